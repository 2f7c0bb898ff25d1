"""A trainer's directory is untrusted input too (docs/run-directory.md): resuming from one runs none of its code and
reads only regular files inside it. Crafted on a real one-step run of the LaMer trainer on a tiny random Llama."""

from __future__ import annotations

import json
import os
import random
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

from test_train_lamer import TINY_MINES, tiny_policy  # noqa: E402

from ttlearn.llm.hf import model_dir  # noqa: E402
from ttlearn.runs import RunDir  # noqa: E402
from ttlearn.train.lamer import LamerTrainConfig, LamerTrainer  # noqa: E402

torch.set_num_threads(1)


class RunsACommand:
    """Unpickling this runs a shell command: what a crafted `trainer_state.pt` can hold."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(model_dir("smollm2"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tokenizer):
    """A directory after one step of training, with its checkpoint step_0001."""
    out = tmp_path_factory.mktemp("trained") / "run"
    LamerTrainer(config(out, steps=1), policy=tiny_policy(tokenizer)).train()
    assert (out / "step_0001" / "trainer_state.pt").is_file()
    return out


def config(out, steps: int) -> LamerTrainConfig:
    return LamerTrainConfig(
        env="minesweeper", env_options=TINY_MINES, actions="choices", reply_tokens=8, out=out, tasks=1,
        tasks_per_step=1, group=2, attempts=1, steps=steps, reflection_tokens=8, lr=1e-2,
    )  # fmt: skip


def resume(out, tokenizer, steps: int = 2) -> LamerTrainer:
    return LamerTrainer(config(out, steps), policy=tiny_policy(tokenizer))


def test_a_pickled_trainer_state_runs_nothing(trained, tmp_path, tokenizer) -> None:
    out, marker = tmp_path / "run", tmp_path / "marker"
    shutil.copytree(trained, out)
    state = torch.load(out / "step_0001" / "trainer_state.pt", weights_only=False)  # the test's own file
    torch.save({**state, "step": RunsACommand(str(marker))}, out / "step_0001" / "trainer_state.pt")
    with pytest.raises(ValueError, match="trainer_state.pt.*refused") as refused:
        resume(out, tokenizer)
    assert not marker.exists(), "resuming a trainer unpickled a command from its checkpoint"
    assert "\n" not in str(refused.value)


def test_the_rng_states_and_the_step_come_back_from_a_checkpoint(trained, tmp_path, tokenizer) -> None:
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    saved = torch.load(out / "step_0001" / "trainer_state.pt", weights_only=True)  # tensors and numbers only
    random.seed(5), np.random.seed(5), torch.manual_seed(5)  # noqa: B018 - anything but the saved states
    trainer = resume(out, tokenizer)
    assert trainer.step == 1 and trainer.optimizer.state_dict()["param_groups"][0]["lr"] == 1e-2
    assert torch.equal(torch.get_rng_state(), saved["torch_rng"])
    assert random.getstate() == (saved["python_rng"][0], tuple(saved["python_rng"][1]), saved["python_rng"][2])
    assert np.array_equal(np.random.get_state()[1], np.asarray(saved["numpy_rng"][1]))


@pytest.mark.parametrize("which", ["trainer_state.pt", "adapter_model.safetensors", "step_0001", RunDir.TRAINER_CONFIG])
def test_links_in_a_trainer_directory_are_refused(trained, tmp_path, tokenizer, which) -> None:
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    outside = tmp_path / "outside"
    path = out / which if which in ("step_0001", RunDir.TRAINER_CONFIG) else out / "step_0001" / which
    shutil.move(path, outside)
    path.symlink_to(outside)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ValueError, match="symbolic link") as refused:
        resume(out, tokenizer)
    assert "\n" not in str(refused.value) and sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_fifo_for_a_trainer_config_is_refused_at_once(trained, tmp_path, tokenizer) -> None:
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    (out / RunDir.TRAINER_CONFIG).unlink()
    os.mkfifo(out / RunDir.TRAINER_CONFIG)
    with pytest.raises(ValueError, match="not a regular file"):
        resume(out, tokenizer)
    json.dumps({})  # the FIFO was never opened for a blocking read (the test would hang)


def test_micro_batch_changes_memory_not_the_run_so_a_run_resumes_with_another(trained, tmp_path, tokenizer) -> None:
    """A directory written before LaMer had micro-batches (no `micro_batch` in its config) resumes, as does one
    resumed with another size: the update is the same, only its memory differs."""
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    saved = json.loads((out / RunDir.TRAINER_CONFIG).read_text())
    assert saved.pop("micro_batch") == 8
    (out / RunDir.TRAINER_CONFIG).write_text(json.dumps(saved))
    trainer = LamerTrainer(config(out, 2).model_copy(update={"micro_batch": 1}), policy=tiny_policy(tokenizer))
    assert trainer.step == 1
