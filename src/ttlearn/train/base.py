"""What every trainer shares: one config base, one run directory, one checkpoint format, one metrics log, resume.

A run directory OUT holds

    train.json      the config; rerunning with the same OUT resumes, and a config that differs in anything but its
                    `resumable` fields (how long to train, how often to save) is refused: it is another experiment
    metrics.jsonl   one JSON line per step, appended durably (`runs.append_durable`): a crash leaves at most a torn
                    last line, and lines of steps after the last checkpoint are dropped on resume
    episodes.jsonl  every episode the step played (a trainer adds its training games to `self.played` and the games
                    it plays to evaluate itself, with their marks, to `self.evaluated`: "evaluation" lines), written
                    by the run writer (`RunDir.record_played`) before the step's metrics and cut on resume alike
    step_0004/      a checkpoint: the LoRA adapter (peft) + trainer_state.pt (step, optimiser, torch / python / numpy
                    RNG states: tensors, numbers and lists only, read with `torch.load(weights_only=True)`), written
                    to a scratch directory and renamed, so it is complete or absent
    final/          the adapter after the last step; play it with `hf:OUT/final`

A new trainer is one module in this package: a `TrainConfig` subclass (every field with a `description`, which a
generic `ttlearn train NAME --option value` turns into help) and a `Trainer` subclass named once, by its line in the
`TRAINERS` table below, that loads its policy and implements one step, updating the policy with the one policy
update (`ttlearn.train.update`). The loop, checkpoints, resume and the metrics log are here.

Devices: `--device auto|cpu|cuda` is resolved once (`this_device`); the policy is loaded there and every tensor a
trainer makes follows `policy.device`. Checkpoints are loaded onto the CPU first (`map_location`), so a run saved on a
GPU resumes on a CPU and the other way round; the optimiser moves its state to the parameters' device.

Data parallel (`accelerate launch`, `torchrun`): one process per GPU (or several on the CPU, over gloo), each on
`cuda:LOCAL_RANK`; every trainer holds `accelerate`'s prepared scorer and optimiser (`self.scorer`,
`self.optimizer`), so the update averages the gradients over the processes and the weights stay the same everywhere.
Rank 0 writes the directory, every rank reads the checkpoint, and the ranks meet at barriers around writes. In one
process the helpers (`ttlearn.train.parallel`) are no-ops. torch is imported inside functions, so the registry
lists trainers on an install without the `train` extra.

A trainer's directory may come from anyone, like a run directory (docs/run-directory.md): resuming reads only
regular files inside it (`ttlearn.untrusted`; a checkpoint is a real directory of regular files) and unpickles
nothing but tensors and plain values, so a crafted checkpoint cannot run code.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ttlearn.llm.hf.placement import Device, resolve_device, this_device  # noqa: F401 - re-exported
from ttlearn.registry import Registry
from ttlearn.runs import RunDir, append_durable, read_durable
from ttlearn.train.parallel import barrier, world
from ttlearn.train.update import scorer_module
from ttlearn.types import Episode
from ttlearn.untrusted import UntrustedFileError, open_regular, read_json, regular_directory, write_atomic

if TYPE_CHECKING:
    from ttlearn.llm.hf import HFPolicy

TRAINERS: Registry[type["Trainer"]] = Registry(
    "trainer",
    "ttlearn.trainers",
    {"lamer": "ttlearn.train.lamer:LamerTrainer", "memopilot": "ttlearn.train.memopilot:MemoPilotTrainer"},
)


Progress = Callable[[int, dict[str, Any]], None]
"""Called after every step with (step, metrics)."""


class TrainConfig(BaseModel):
    """The options every trainer has. Subclasses add theirs and may change defaults."""

    model_config = ConfigDict(extra="forbid")

    resumable: ClassVar[frozenset[str]] = frozenset({"out", "steps", "save_every", "device", "dtype", "patience"})
    """Fields a resumed run may change; any other difference is another experiment (→ ValueError)."""

    out: Path = Field(description="Run directory: train.json, metrics.jsonl, step_NNNN/, final/ (rerun to resume).")
    steps: int = Field(20, ge=1, description="Optimiser steps.")
    lr: float = Field(1e-5, gt=0, description="Learning rate of AdamW on the LoRA weights (no weight decay).")
    max_grad_norm: float = Field(1.0, gt=0, description="Clip the gradient to this global norm.")
    save_every: int = Field(5, ge=1, description="Checkpoint every N steps (and after the last one).")
    patience: int = Field(
        0,
        ge=0,
        description="Stopping rule: end the run once this many development evaluations in a row have not beaten "
        "the best one before them (`plateaued`); 0: train all `steps`.",
    )
    seed: int = Field(0, description="Seed of the LoRA initialisation, the rollouts and the sampling.")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where to train: auto picks cuda when a GPU is visible, else cpu."
    )
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="Weights of the policy: auto is bfloat16 on a GPU with native support, else float32 "
        "(float32 keeps sampled and rescored log-probs equal; bfloat16 rounds them apart by up to ~0.1).",
    )


# ---- the run directory -------------------------------------------------------------------------------------------
def plateaued(scores: Sequence[float], patience: int) -> bool:
    """Whether the last `patience` evaluation scores all fail to beat the best score before them (a tie is no
    gain): the stopping rule a run states before it starts, so that how long it trains is not chosen by looking at
    its curve. Never with `patience` 0 or too few scores."""
    if patience < 1 or len(scores) <= patience:
        return False
    return max(scores[-patience:]) <= max(scores[:-patience])


def changed_fields(saved: dict[str, Any], current: dict[str, Any], resumable: frozenset[str]) -> list[str]:
    """The fields whose values differ between two config dumps, ignoring the resumable ones."""
    return sorted(k for k in set(saved) | set(current) if k not in resumable and saved.get(k) != current.get(k))


def write_dir_atomically(target: Path, fill: Callable[[Path], None]) -> None:
    """Fill a scratch directory, then rename it to `target` (replacing an older one): readers see all or nothing."""
    scratch, old = target.parent / f".{target.name}.partial", target.parent / f".{target.name}.old"
    for leftover in (scratch, old):
        shutil.rmtree(leftover, ignore_errors=True)
    scratch.mkdir(parents=True)
    fill(scratch)
    if target.exists():
        target.rename(old)
    scratch.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def last_checkpoint(out: Path) -> Path | None:
    """The newest complete checkpoint under `out` (its state file is written inside the renamed directory)."""
    found = RunDir(out).checkpoints()
    return found[-1] if found else None


def load_trainer_state(path: Path) -> dict[str, Any]:
    """A checkpoint's trainer state, unpickling only tensors and plain values (`weights_only=True`; numpy's array
    reconstruction too, which checkpoints written before held), onto the CPU: the RNG states must live there, and
    the optimiser moves its state to the parameters. A file that holds anything else is refused in one line."""
    import pickle
    import re

    import torch

    arrays = [np.empty(0).__reduce__()[0], np.ndarray, np.dtype, type(np.dtype(np.uint32))]
    try:
        with open_regular(path) as fh, torch.serialization.safe_globals(arrays):
            state = torch.load(fh, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as exc:
        named = re.search(r"GLOBAL (\S+)|got <class '([^']+)'>", str(exc))
        reason = f"it names {named[1] or named[2]}" if named else type(exc).__name__
        raise UntrustedFileError(
            f"{path} holds more than tensors and plain values ({reason}); refused: a checkpoint runs no code"
        ) from None
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise UntrustedFileError(f"{path} is not a trainer state (no step); refused")
    return state


# ---- the trainer -------------------------------------------------------------------------------------------------
class Trainer(ABC):
    """The loop of a trainer: start the processes, claim or reopen the run directory, load the policy and the
    optimiser, resume from the last checkpoint, then `train_step` until `config.steps`, logging and checkpointing.
    Subclasses set `config_class` and implement `load_policy` and `train_step`; they check their own options (env
    names, how the work splits over the processes, …) in `check`, so a bad option fails before a model loads or a
    directory is written."""

    name: ClassVar[str]
    config_class: ClassVar[type[TrainConfig]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        TRAINERS.name_class(cls)  # a class of the package takes its name from the table

    def __init__(self, config: TrainConfig, *, progress: Progress | None = None, policy: HFPolicy | None = None):
        import torch
        from accelerate import Accelerator

        self.config, self.progress = config, progress
        self.out = Path(config.out)
        self.device = this_device(config.device, config.dtype)
        # under a launcher this starts torch.distributed (NCCL between GPUs, gloo between CPUs); the policy is placed
        # by `this_device`, so accelerate leaves placement alone
        self.accelerator = Accelerator(cpu=self.device.name == "cpu", device_placement=False)
        self.rank, self.world = world()
        self.check()
        self._claim_run_directory()
        torch.manual_seed(config.seed)  # the same LoRA initialisation on every rank
        self.policy = policy or self.load_policy()
        if self.policy.lora is None:
            raise ValueError(f"the {self.name} trainer trains LoRA adapters; give it a policy with one")
        self.params = self.policy.trainable_parameters()
        self.optimizer = torch.optim.AdamW(self.params, lr=config.lr, weight_decay=0.0)
        self.played: list[Episode] = []
        """The training episodes the step in progress played (rank 0's are recorded)."""
        self.evaluated: list[tuple[dict[str, Any], Episode]] = []
        """The evaluation games the step in progress played, each with its marks (rank 0's are recorded)."""
        self.step = self._resume()
        self.scorer, self.optimizer = self.accelerator.prepare(scorer_module(self.policy), self.optimizer)
        """The policy's `row_logprobs` as `accelerate` prepared it (data parallel under a launcher) and the optimiser
        it wraps: what `policy_update` takes."""

    @property
    def final(self) -> Path:
        """Where the adapter after the last step lies."""
        return RunDir(self.out).final

    def next_command(self) -> str:
        """How to use what was trained, for the end of `ttlearn train`."""
        return f"play it with --llm hf:{self.final}"

    def check(self) -> None:  # noqa: B027 - a hook: a trainer with nothing to check keeps it empty
        """Refuse options that cannot work before a model loads or the directory is written (`self.rank` and
        `self.world` are known); keep what the check built."""

    @abstractmethod
    def load_policy(self) -> HFPolicy:
        """The policy to train, with a LoRA adapter, on `self.device` (`.torch_name`, `.dtype`)."""

    @abstractmethod
    def train_step(self, step: int) -> dict[str, Any]:
        """Play, score and take one optimiser step; returns the step's metrics (numbers, or JSON values)."""

    def evaluation_scores(self, metrics: dict[str, Any]) -> list[float]:
        """The development evaluation scores a step's metrics hold, in order, for the stopping rule (`patience`);
        a trainer without an evaluation has none."""
        return []

    def logged_metrics(self) -> list[dict[str, Any]]:
        """The metrics lines of the run so far (resumed steps included)."""
        log = RunDir(self.out).metrics
        return read_durable(log, repair=False) if log.exists() else []

    def train(self) -> list[dict[str, Any]]:
        """Run steps `self.step + 1 .. config.steps`, or until the stopping rule ends the run (`plateaued`); returns
        their metrics (also appended to metrics.jsonl)."""
        done: list[dict[str, Any]] = []
        scores = [s for logged in self.logged_metrics() for s in self.evaluation_scores(logged)]
        while self.step < self.config.steps and not plateaued(scores, self.config.patience):
            start, self.played, self.evaluated = time.perf_counter(), [], []
            metrics = {"step": self.step + 1, **self.train_step(self.step + 1)}
            metrics.setdefault("wall_s", time.perf_counter() - start)
            if not np.isfinite(metrics.get("loss", 0.0)):
                raise FloatingPointError(f"non-finite loss at step {self.step + 1}: {metrics}")
            self.step += 1
            if self.rank == 0:  # logged before the checkpoint: a crash in between replays the step, losing nothing
                RunDir(self.out).record_played(self.step, self.played, self.evaluated)
                append_durable(RunDir(self.out).metrics, [metrics])
            scores += self.evaluation_scores(metrics)
            last = self.step == self.config.steps or plateaued(scores, self.config.patience)
            if self.step % self.config.save_every == 0 or last:
                self.save_checkpoint()
            done.append(metrics)
            if self.progress is not None:
                self.progress(self.step, metrics)
        self._on_rank0(lambda: write_dir_atomically(self.final, self.policy.save_adapter))
        return done

    # ---- checkpoints ----------------------------------------------------------------------------------------------
    def save_checkpoint(self) -> None:
        import torch

        def fill(directory: Path) -> None:
            self.policy.save_adapter(directory)
            kind, keys, position, has_gauss, gauss = np.random.get_state()
            state = {
                "step": self.step,
                "optimizer": self.optimizer.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "python_rng": random.getstate(),
                "numpy_rng": (kind, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, gauss),
            }
            torch.save(state, directory / RunDir.TRAINER_STATE)

        self._on_rank0(lambda: write_dir_atomically(RunDir(self.out).checkpoint(self.step), fill))

    def _resume(self) -> int:
        """Load the newest checkpoint (adapter, optimiser, RNG) and drop metrics logged after it; the step reached."""
        import torch

        step, checkpoint = 0, last_checkpoint(self.out)
        if checkpoint is not None:
            regular_directory(checkpoint)
            self.policy.load_adapter(checkpoint)
            state = load_trainer_state(checkpoint / RunDir.TRAINER_STATE)
            self.optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["torch_rng"])
            random.setstate(state["python_rng"])
            kind, keys, position, has_gauss, gauss = state["numpy_rng"]
            np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), position, has_gauss, gauss))
            step = int(state["step"])
        for log in (RunDir(self.out).metrics, RunDir(self.out).played):
            if log.exists():  # the block ends at the last line of a checkpointed step; later lines are cut
                self._on_rank0(
                    lambda log=log: read_durable(log, repair=True, ends_block=lambda record: record["step"] <= step)
                )
        return step

    def _claim_run_directory(self) -> None:
        """Write the config (`RunDir.trainer_config`), or check that the one already there describes the same
        experiment."""
        saved_file = RunDir(self.out).trainer_config
        current = json.loads(self.config.model_dump_json())
        if saved_file.is_symlink() or saved_file.exists():
            changed = changed_fields(read_json(saved_file), current, self.config.resumable)
            if changed:
                raise ValueError(
                    f"{self.out} holds a run with different settings ({', '.join(changed)}); "
                    "use another out directory or the same settings"
                )
        elif self.out.exists() and any(self.out.iterdir()):
            raise ValueError(f"{self.out} exists and is not a training run directory; use another out directory")

        def write() -> None:
            self.out.mkdir(parents=True, exist_ok=True)
            write_atomic(saved_file, json.dumps(current, indent=2))

        self._on_rank0(write)

    def _on_rank0(self, action: Callable[[], Any]) -> None:
        """Do `action` on rank 0 only, then let every rank continue together."""
        barrier()
        if self.rank == 0:
            action()
        barrier()
