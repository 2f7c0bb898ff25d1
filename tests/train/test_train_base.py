"""The trainer base without a model: device resolution, atomic directories, the registry and its option metadata."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ttlearn.train.base import TRAINERS, Device, changed_fields, plateaued, resolve_device, write_dir_atomically


def test_device_is_cuda_when_there_is_one_and_bf16_only_where_supported() -> None:
    assert resolve_device("auto", gpus=0, bf16_supported=False) == Device("cpu", "float32")
    assert resolve_device("auto", gpus=1, bf16_supported=True) == Device("cuda", "bfloat16", 0)
    assert resolve_device("cuda", gpus=1, bf16_supported=False) == Device("cuda", "float32", 0)
    assert resolve_device("cpu", gpus=1, bf16_supported=True) == Device("cpu", "float32")
    assert resolve_device("auto", gpus=0, bf16_supported=False, local_rank=3).torch_name == "cpu"
    assert resolve_device("cuda", gpus=1, bf16_supported=True, dtype="float32") == Device("cuda", "float32", 0)
    assert resolve_device("cpu", gpus=0, bf16_supported=False, dtype="bfloat16") == Device("cpu", "bfloat16")
    with pytest.raises(ValueError, match="dtype must be auto, float32 or bfloat16"):
        resolve_device("auto", gpus=0, bf16_supported=False, dtype="float16")
    with pytest.raises(ValueError, match="no CUDA device visible; use --device cpu or auto"):
        resolve_device("cuda", gpus=0, bf16_supported=False)
    with pytest.raises(ValueError, match="auto, cpu or cuda"):
        resolve_device("tpu", gpus=0, bf16_supported=False)


def test_each_launched_process_takes_the_gpu_of_its_local_rank() -> None:
    assert resolve_device("cuda", gpus=4, bf16_supported=True, local_rank=2).torch_name == "cuda:2"
    assert resolve_device("auto", gpus=4, bf16_supported=True, local_rank=0).torch_name == "cuda:0"
    with pytest.raises(ValueError, match="LOCAL_RANK=2 has no GPU of its own"):
        resolve_device("cuda", gpus=2, bf16_supported=True, local_rank=2)


def test_changed_fields_ignore_the_resumable_ones() -> None:
    saved, current = {"steps": 5, "lr": 0.1, "seed": 0}, {"steps": 9, "lr": 0.2, "seed": 0, "env": "rps"}
    assert changed_fields(saved, current, frozenset({"steps"})) == ["env", "lr"]


def test_the_stopping_rule_by_hand() -> None:
    """patience 2: stop once the last two scores do not beat the best before them; a tie is no gain."""
    assert not plateaued([0.1, 0.3, 0.2], 2)  # 0.3 is a new best in the last two
    assert plateaued([0.1, 0.3, 0.2, 0.3], 2)  # 0.2 and 0.3 against the best before them, 0.3: no gain
    assert not plateaued([0.1, 0.3, 0.2, 0.31], 2)
    assert not plateaued([0.5, 0.4], 2)  # nothing before the last two to beat
    assert plateaued([0.5, 0.4], 1) and not plateaued([0.4, 0.5], 1)
    assert not plateaued([0.5, 0.1, 0.1, 0.1], 0)  # 0: never


def test_a_directory_is_replaced_whole(tmp_path) -> None:
    target = tmp_path / "step_0001"
    write_dir_atomically(target, lambda d: (d / "a").write_text("1"))
    write_dir_atomically(target, lambda d: (d / "b").write_text("2"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_0001"]
    assert [p.name for p in target.iterdir()] == ["b"]

    def crash(directory):
        (directory / "c").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        write_dir_atomically(target, crash)
    assert [p.name for p in target.iterdir()] == ["b"]  # the old checkpoint is untouched


def test_the_registry_lists_the_trainers_and_every_option_is_described() -> None:
    assert TRAINERS.names() == ["lamer", "memopilot"]
    for name in TRAINERS.names():
        fields = TRAINERS.get(name).config_class.model_fields
        assert "out" in fields and "device" in fields
        assert all(info.description for info in fields.values()), name


def test_the_maths_and_the_registry_import_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import ttlearn.train.advantages, ttlearn.train.loss\n"
        "from ttlearn.train.base import TRAINERS; print(' '.join(TRAINERS.names()))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["lamer", "memopilot"]
