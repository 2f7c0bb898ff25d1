"""LaMer's cross-episode meta-RL: train the agent policy (LoRA on an `HFPolicy`) on whole trials.

One step: pick `tasks_per_step` instances from a fixed pool of `tasks`, play `group` trials of `attempts` attempts at
each (`ttlearn.rollout.loop.play_trial`), with the policy both choosing the actions and writing the reflections between
attempts; score every step with `cross_episode_returns` (γ_step inside an attempt, γ_traj across attempts, so an early
attempt is credited for what the later ones achieve), turn returns into advantages by GiGPO (anchor = the observation
text) or the GRPO variant, and take one clipped policy-gradient step (`policy_loss`) on the action and reflection
tokens. The baselines `gigpo` and `grpo` play the same number of attempts per instance, all independent and without
reflection (LaMer's 8 × 3 against 24 × 1).

How actions get log-probs. The player scores the legal actions and samples one from
π(a | s) = softmax_a(score(a) / T),  score(a) = Σ_k log p(a_k | prompt, a_<k)  (the action's tokens plus end-of-turn),
which is exactly what the `hf` back end serves at temperature T, so the trained policy is the one that plays. Its
log-prob is differentiable through every choice's score; free text would leave a 135M model with mostly unparseable
moves. Each decision is a sequence of one "token", log π(a | s); each reflection is its sampled tokens at T. With one
update per batch the PPO ratio is 1 and the clip inactive (TRL's default, num_iterations = 1).

Run directory: OUT/config.json, OUT/metrics.jsonl (one line per step), OUT/step_k (adapter + optimizer state),
OUT/final (adapter; use it as `hf:OUT/final`). A killed run resumes from its last checkpoint.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ttlearn.envs.base import Env
from ttlearn.llm.base import LLM, Message
from ttlearn.memory.base import make_memory
from ttlearn.train.advantages import (
    cross_episode_returns,
    gigpo_advantages,
    grpo_episode_advantages,
)
from ttlearn.train.loss import policy_loss
from ttlearn.players.base import Player
from ttlearn.players.llm import LLMPlayer
from ttlearn.players.turn import TurnPlayer
from ttlearn.rollout.loop import Trial, play_trial
from ttlearn.rollout.parts import resolve_moves_per_turn
from ttlearn.rollout.trials import validate_trials
from ttlearn.runs import TrialConfig
from ttlearn.seeding import derive_seed
from ttlearn.types import Completion

if TYPE_CHECKING:
    import torch

    from ttlearn.llm.hf import HFPolicy, Sample

GAMMA_TRAJ = {"sokoban": 0.9}
"""LaMer's cross-attempt discount: 0.9 for Sokoban, 0.6 for every other environment."""


class LamerTrainConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    env: str = "sokoban"
    env_options: dict[str, Any] = Field(default_factory=dict)
    out: str
    algo: Literal["lamer", "gigpo", "grpo"] = "lamer"
    """lamer: trials with reflection; gigpo / grpo: the baselines, independent attempts with that estimator."""
    advantage: Literal["gigpo", "grpo"] = "gigpo"
    """The estimator of `lamer` (the baselines use their own name)."""
    mode: Literal["reflection", "history", "both"] = "reflection"
    policy: str = "smollm2"
    """HF source of the policy (smollm2, a .gguf, an HF directory) or a ttlearn adapter directory to continue."""
    tasks: int = Field(16, ge=1)
    """Size of the training instance pool (held out from `run_trials`, which seeds its instances differently)."""
    tasks_per_step: int = Field(2, ge=1)
    group: int = Field(4, ge=2)
    attempts: int = Field(3, ge=1)
    steps: int = Field(20, ge=1)
    gamma_step: float = Field(0.95, ge=0, le=1)
    gamma_traj: float | None = Field(None, ge=0, le=1)
    """None: LaMer's value for the environment (`GAMMA_TRAJ`)."""
    temperature: float = Field(1.0, gt=0)
    lr: float = Field(1e-5, gt=0)
    lora_r: int = Field(8, ge=1)
    max_grad_norm: float = Field(1.0, gt=0)
    reflection_tokens: int = Field(64, ge=8)
    moves_per_turn: int | None = Field(None, ge=1)
    save_every: int = Field(5, ge=1)
    seed: int = 0

    @property
    def reflects(self) -> bool:
        return self.algo == "lamer"

    def trial_shape(self) -> tuple[int, int]:
        """(trials per instance, attempts per trial): the baselines spend the same attempts independently."""
        return (self.group, self.attempts) if self.reflects else (self.group * self.attempts, 1)

    def discount_across(self) -> float:
        return GAMMA_TRAJ.get(self.env, 0.6) if self.gamma_traj is None else self.gamma_traj


# ---- the policy as the trial loop's LLM, keeping what the loss needs ---------------------------------------------
def choice_logprobs(
    policy: HFPolicy, prompt: Sequence[int], answers: Sequence[Sequence[int]], temperature: float
) -> torch.Tensor:
    """log π(a | prompt) = log_softmax_a(score(a) / T), score by `HFPolicy.choice_scores` (gradients flow)."""
    import torch

    return torch.log_softmax(policy.choice_scores(prompt, answers) / temperature, dim=0)


@dataclass(frozen=True)
class ActionRecord:
    tag: tuple[str, int, int]
    prompt: tuple[int, ...]
    answers: tuple[tuple[int, ...], ...]
    chosen: int
    old_logp: float


@dataclass(frozen=True)
class TextRecord:
    tag: tuple[str, int, int]
    sample: Sample


class PolicyRecorder(LLM):
    """Serves the policy to players and memories, sampling at the temperature they ask for, and files every call
    under the trial step announced by `mark` (see `ttlearn.trials.Mark`)."""

    supports_choices = True

    def __init__(self, policy: HFPolicy) -> None:
        self.policy, self.spec = policy, policy.spec
        self.records: list[ActionRecord | TextRecord] = []
        self.tag: tuple[str, int, int] = ("act", 1, 0)

    def mark(self, kind: str, attempt: int, step: int) -> None:
        self.tag = (kind, attempt, step)

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 128,
        temperature: float = 0.0,
        seed: int = 0,
        stop: Sequence[str] = (),
        choices: Sequence[str] | None = None,
    ) -> Completion:
        import torch

        if temperature <= 0:
            raise ValueError("training samples need temperature > 0")
        start = time.perf_counter()
        prompt = self.policy.encode(messages)
        if choices:
            answers = tuple(tuple(self.policy.answer_ids(c)) for c in choices)
            with torch.no_grad():
                logps = choice_logprobs(self.policy, prompt, answers, temperature)
            chosen = int(torch.multinomial(logps.exp(), 1, generator=torch.Generator().manual_seed(seed)))
            self.records.append(ActionRecord(self.tag, tuple(prompt), answers, chosen, float(logps[chosen])))
            scores = dict(zip(choices, logps.tolist()))
            return Completion(choices[chosen], len(prompt), 0, time.perf_counter() - start, choice_logprobs=scores)
        (sample,) = self.policy.sample_ids(
            [prompt], max_new_tokens=max_tokens, temperature=temperature, seed=seed, stop=stop
        )
        self.records.append(TextRecord(self.tag, sample))
        return Completion(sample.text.strip(), len(prompt), len(sample.completion_ids), time.perf_counter() - start)

    def take(self) -> list[ActionRecord | TextRecord]:
        records, self.records = self.records, []
        return records


# ---- from trials to advantages -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainStep:
    """One step of the return chain: an env turn (its decisions) or a reflection (its tokens)."""

    reward: float
    attempt: int
    reflection: bool
    anchor: Any
    records: tuple[ActionRecord | TextRecord, ...]


def trial_steps(trial: Trial, records: list[ActionRecord | TextRecord]) -> list[TrainStep]:
    """The trial's steps in play order: each attempt's turns, then the reflection written after it (if any)."""
    by_tag: dict[tuple[str, int, int], list[ActionRecord | TextRecord]] = {}
    for record in records:
        by_tag.setdefault(record.tag, []).append(record)
    steps = []
    for episode in trial.attempts:
        for index, step in enumerate(episode.steps):
            steps.append(
                TrainStep(
                    step.reward,
                    episode.index,
                    False,
                    step.observation,
                    tuple(by_tag.get(("act", episode.index, index), ())),
                )
            )
        written = by_tag.get(("reflect", episode.index, 0), [])
        if written:
            steps.append(
                TrainStep(0.0, episode.index, True, ("reflection", written[0].sample.prompt_ids), tuple(written))
            )
    return steps


def step_advantages(trials: list[tuple[Any, Any, list[TrainStep]]], config: LamerTrainConfig) -> np.ndarray:
    """Advantages of every step of a batch of (instance, trial, steps): returns per trial by `cross_episode_returns`,
    then GiGPO (episode + anchor-state advantage) or GRPO (group-normalised trial return) over each instance's
    trials."""
    rewards, returns, groups, trial_ids, anchors = [], [], [], [], []
    for instance, trial_id, steps in trials:
        r = [s.reward for s in steps]
        returns.extend(
            cross_episode_returns(
                r,
                [s.attempt for s in steps],
                [s.reflection for s in steps],
                gamma_step=config.gamma_step,
                gamma_traj=config.discount_across(),
            )
        )
        rewards.extend(r)
        groups.extend([instance] * len(steps))
        trial_ids.extend([trial_id] * len(steps))
        anchors.extend(s.anchor for s in steps)
    estimator = config.advantage if config.reflects else config.algo
    if estimator == "gigpo":
        return gigpo_advantages(rewards, returns, groups, trial_ids, anchors)
    return grpo_episode_advantages(rewards, groups, trial_ids)


# ---- the update --------------------------------------------------------------------------------------------------
def record_logprobs(
    policy: HFPolicy, record: ActionRecord | TextRecord, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs with gradients [1, L], the sampling-time ones [1, L]) of one decision or reflection."""
    import torch

    if isinstance(record, ActionRecord):
        logp = choice_logprobs(policy, record.prompt, record.answers, temperature)[record.chosen].reshape(1, 1)
        return logp, torch.tensor([[record.old_logp]])
    logp, _ = policy.sequence_logprobs([record.sample.prompt_ids], [record.sample.completion_ids], temperature)
    return logp, torch.tensor([record.sample.logprobs])


def update(
    policy: HFPolicy, optimizer: Any, rows: list[tuple[ActionRecord | TextRecord, float]], config: LamerTrainConfig
) -> dict[str, float]:
    """One optimiser step on `policy_loss` with TRL's "grpo" aggregation: (1/B) Σ_rows mean over the row's tokens.

    The sum splits by row, so each row is backpropagated on its own (memory stays one row deep); rows with zero
    advantage contribute neither loss nor gradient and are skipped.
    """
    import torch

    optimizer.zero_grad()
    total, clipped, used = 0.0, 0.0, 0
    for record, advantage in rows:
        if advantage == 0.0:
            continue
        logp, old = record_logprobs(policy, record, config.temperature)
        loss, stats = policy_loss(logp, old, torch.tensor([advantage]), torch.ones_like(logp))
        (loss / len(rows)).backward()
        total += float(loss.detach()) / len(rows)
        clipped += stats["clip_fraction"]
        used += 1
    norm = torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), config.max_grad_norm)
    optimizer.step()
    return {
        "loss": total,
        "rows": len(rows),
        "rows_trained": used,
        "grad_norm": float(norm),
        "clip_fraction": clipped / max(used, 1),
    }


# ---- the loop ----------------------------------------------------------------------------------------------------
def pool_seed(config: LamerTrainConfig, index: int) -> int:
    return derive_seed(config.seed, "train-task", index)


def step_instances(config: LamerTrainConfig, step: int) -> list[int]:
    """The pool indices trained on at `step`, drawn without replacement from a seed of (run seed, step)."""
    rng = random.Random(derive_seed(config.seed, "step", step))
    return rng.sample(range(config.tasks), min(config.tasks_per_step, config.tasks))


def make_player(recorder: PolicyRecorder, env: Env, config: LamerTrainConfig) -> tuple[Player, int]:
    moves = resolve_moves_per_turn(config.moves_per_turn, env)
    player: Player = LLMPlayer(recorder, temperature=config.temperature)
    return (TurnPlayer(player, moves) if moves > 1 else player), moves


def collect(
    policy: HFPolicy, env: Env, config: LamerTrainConfig, step: int
) -> tuple[list[tuple[Any, Any, list[TrainStep]]], list[Trial]]:
    """Play every trial of one step; returns (instance, trial id, steps) per trial and the trials themselves."""
    recorder = PolicyRecorder(policy)
    player, moves = make_player(recorder, env, config)
    n_trials, attempts = config.trial_shape()
    batch, trials = [], []
    for instance in step_instances(config, step):
        for j in range(n_trials):
            memory = (
                make_memory(
                    "lamer",
                    recorder,
                    mode=config.mode,
                    temperature=config.temperature,
                    max_tokens=config.reflection_tokens,
                )
                if config.reflects
                else make_memory("none")
            )
            trial = play_trial(
                env,
                player,
                memory,
                seed=pool_seed(config, instance),
                attempts=attempts,
                early_stop=True,
                mark=recorder.mark,
                act_seed=lambda a, s, i=instance, j=j: derive_seed(config.seed, "train-act", step, i, j, a, s),
            )
            batch.append((instance, j, trial_steps(trial, recorder.take())))
            trials.append(trial)
    return batch, trials


def trial_metrics(trials: list[Trial]) -> dict[str, float]:
    solved = [t.first_success for t in trials]
    return {
        "success_first": float(np.mean([s == 1 for s in solved])),
        "success_any": float(np.mean([s is not None for s in solved])),
        "reward_per_trial": float(np.mean([sum(e.score for e in t.attempts) for t in trials])),
        "attempts_per_trial": float(np.mean([len(t.attempts) for t in trials])),
    }


def load_policy(config: LamerTrainConfig) -> HFPolicy:
    from ttlearn.llm.hf import ADAPTER_META, HFPolicy, LoraOptions

    if (Path(config.policy).expanduser() / ADAPTER_META).is_file():
        return HFPolicy.from_adapter(config.policy)
    return HFPolicy.from_source(config.policy, lora=LoraOptions(r=config.lora_r))


def checkpoint_steps(out: Path) -> list[int]:
    """Steps with a complete checkpoint (its state.json is written last)."""
    return sorted(int(p.name[5:]) for p in out.glob("step_*") if (p / "state.json").is_file())


def save_checkpoint(policy: HFPolicy, optimizer: Any, out: Path, step: int) -> None:
    import torch

    target, scratch = out / f"step_{step}", out / f"step_{step}.partial"
    shutil.rmtree(scratch, ignore_errors=True)
    policy.save_adapter(scratch)
    torch.save(optimizer.state_dict(), scratch / "optimizer.pt")
    (scratch / "state.json").write_text(json.dumps({"step": step}))
    shutil.rmtree(target, ignore_errors=True)
    scratch.rename(target)


def open_train_dir(config: LamerTrainConfig) -> int:
    """Create OUT or reopen it; returns the last checkpointed step (0 for a fresh run) and drops later metrics."""
    out = Path(config.out)
    config_file = out / "config.json"
    if config_file.exists():
        saved = LamerTrainConfig.model_validate_json(config_file.read_text())
        if saved.model_dump(exclude={"steps"}) != config.model_dump(exclude={"steps"}):
            raise FileExistsError(f"{out} holds a training run with another config; use another --out")
        done = max(checkpoint_steps(out), default=0)
        metrics = out / "metrics.jsonl"
        if metrics.exists():
            kept = [
                line
                for line in metrics.read_text().splitlines(keepends=True)
                if line.endswith("\n") and _step_of(line) is not None and _step_of(line) <= done
            ]
            metrics.write_text("".join(kept))
        config_file.write_text(config.model_dump_json(indent=2))
        return done
    out.mkdir(parents=True, exist_ok=True)
    config_file.write_text(config.model_dump_json(indent=2))
    return 0


def _step_of(line: str) -> int | None:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None


def train_lamer(
    config: LamerTrainConfig,
    progress: Callable[[int, dict[str, Any]], None] | None = None,
    policy: HFPolicy | None = None,
) -> dict[str, Any]:
    """Train (or resume training) and return the last step's metrics. `policy` overrides `config.policy` (tests)."""
    import torch

    env = validate_trials(
        TrialConfig(
            env=config.env,
            env_options=config.env_options,
            memory="none",
            player="hf",
            moves_per_turn=config.moves_per_turn,
        )
    )
    out = Path(config.out)
    done = open_train_dir(config)
    policy = policy or load_policy(config)
    if policy.lora is None:
        raise ValueError("the LaMer trainer trains LoRA adapters; give it a policy with one")
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=config.lr)
    if done:
        policy.load_adapter(out / f"step_{done}")
        optimizer.load_state_dict(torch.load(out / f"step_{done}" / "optimizer.pt"))
    metrics: dict[str, Any] = {}
    for step in range(done + 1, config.steps + 1):
        start = time.perf_counter()
        batch, trials = collect(policy, env, config, step)
        advantages = step_advantages(batch, config)
        rows, position = [], 0
        for _, _, steps in batch:
            for train_step in steps:
                rows.extend((record, float(advantages[position])) for record in train_step.records)
                position += 1
        stats = update(policy, optimizer, rows, config)
        if not np.isfinite(stats["loss"]):
            raise FloatingPointError(f"non-finite loss at step {step}: {stats}")
        metrics = {
            "step": step,
            **stats,
            **trial_metrics(trials),
            "reflections": sum(isinstance(r, TextRecord) for r, _ in rows),
            "wall_s": time.perf_counter() - start,
        }
        with open(out / "metrics.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(metrics) + "\n")
        if step % config.save_every == 0 or step == config.steps:
            save_checkpoint(policy, optimizer, out, step)
        if progress is not None:
            progress(step, metrics)
    policy.save_adapter(out / "final")
    return metrics
