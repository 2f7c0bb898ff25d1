"""BFCL (the `tools` environment's tasks, simulated APIs and checker), unpacked once into the cache.

bfcl-eval's declared requirements (an exact numpy, provider SDKs, faiss, …) would leave an environment pip reports as
broken, and a later resolver run could downgrade numpy; so the pinned wheel is fetched without them, checked against
its SHA-256 and unpacked beside ttlearn's cache, never into site-packages.
"""

from __future__ import annotations

import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from ttlearn.cache import cache_root
from ttlearn.wheels import download_wheel

BFCL_VERSION = "2026.3.23"
BFCL_WHEEL_SHA256 = "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"
PREPARE_COMMAND = "ttlearn data prepare tools"


def bfcl_dir() -> Path:
    """Where `prepare_bfcl` unpacks the wheel: the cache's bfcl/bfcl_eval-VERSION."""
    return cache_root() / "bfcl" / f"bfcl_eval-{BFCL_VERSION}"


def prepare_bfcl(progress: Callable[[str, int, int], None] | None = None) -> Path:
    """Download the pinned bfcl-eval wheel (no dependencies), check its SHA-256, unpack it into `bfcl_dir()`."""
    report = progress or (lambda stage, done, total: None)
    target = bfcl_dir()
    if (target / "bfcl_eval").is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        report(f"downloading bfcl-eval=={BFCL_VERSION}", 0, 1)
        wheel = download_wheel(f"bfcl-eval=={BFCL_VERSION}", Path(scratch), sha256=BFCL_WHEEL_SHA256)
        report(f"downloading bfcl-eval=={BFCL_VERSION}", 1, 1)
        unpacked = Path(scratch) / "unpacked"
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(unpacked)
        try:
            unpacked.rename(target)  # atomic: readers never see a half-unpacked copy
        except OSError:  # another process prepared it meanwhile
            if not (target / "bfcl_eval").is_dir():
                raise
    return target
