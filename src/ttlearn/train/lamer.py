"""LaMer's cross-episode meta-RL: train the agent policy (LoRA on an `HFPolicy`) on whole trials.

One step: pick `tasks_per_step` instances from a fixed pool of `tasks`, play `group` trials of `attempts` attempts at
each (`ttlearn.rollout.loop.play_trial`), with the policy both choosing the actions and writing the reflections between
attempts; score every step with `cross_episode_returns` (G_t⁽ⁿ⁾ = its attempt's γ_step-discounted return from t plus
Σ_{m>n} γ_trajᵐ⁻ⁿ of each later attempt's discounted return, so an early attempt is credited for what the later ones
achieve and the first step's return is the trial's score R(τ)), turn returns into advantages by GiGPO or the GRPO
variant, and take one clipped policy-gradient step (`policy_loss`) on the action tokens and on the reflection tokens
the next attempt sees. The baselines `gigpo` and `grpo` play the same number of attempts per instance, all
independent and without reflection (LaMer's 8 × 3 against 24 × 1).

A trial's score is LaMer's discounted R(τ) = Σₙ γ_trajⁿ Σₜ γ_stepᵗ rₜ⁽ⁿ⁾ (`discounted_score_terms`): the paper's
formula, the default. The authors' released code computes the returns and GiGPO's episode term otherwise;
`formula="released"` follows it (`step_advantages`; docs/estimators.md §12 has both on one example). GiGPO's step
groups are anchored on (attempt, environment state) with the environment's `state_key()`, so the same board reached
in several trials forms a group whatever the turn counter and log say; GiGPO is refused on an environment without a
state key (observation texts carry turn counters and logs, so their anchors would never group).

How the policy acts (`actions`). "text", LaMer's: one free-text reply per step, reasoning then the action in an
<action> block, read by the environment's `parse_action`; a reply it cannot read is an invalid step with the
environment's penalty (no retries), and every sampled token of the reply is trained. "choices": the player scores
the legal actions and samples one from π(a | s) = softmax_a(score(a) / T), score(a) = Σ_k log p(a_k | prompt, a_<k)
(the action's tokens plus end-of-turn), differentiable through every choice's score; it makes invalid moves
impossible, which LaMer's agents do not enjoy, so it is the option for models too small to write a parseable move.
Each choice is a sequence of one "token", log π(a | s); each text is its sampled tokens at T. With one update per
batch the PPO ratio is 1 and the clip inactive (TRL's default, num_iterations = 1).

The run directory, checkpoints and resume are the trainer base's (`ttlearn.train.base`); play the result with
`hf:OUT/final`.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from ttlearn.envs.base import ENVS, Env, make_env
from ttlearn.llm.base import LLM, Message
from ttlearn.memory.base import make_memory
from ttlearn.memory.lamer import LamerMemory, seen_token_span
from ttlearn.rollout.loop import Trial, play_trial
from ttlearn.rollout.parts import make_player, resolve_moves_per_turn
from ttlearn.seeding import derive_seed
from ttlearn.train.advantages import (
    attempt_rewards,
    cross_episode_returns,
    discounted_score_terms,
    gigpo_advantages,
    group_advantages,
    grpo_episode_advantages,
    released_gigpo_advantages,
    released_step_returns,
)
from ttlearn.train.base import Progress, TrainConfig, Trainer
from ttlearn.types import Completion

if TYPE_CHECKING:
    import torch

    from ttlearn.llm.hf import HFPolicy, Sample

class LamerTrainConfig(TrainConfig):
    """`ttlearn train lamer` options."""

    env: str = Field("sokoban", description="Environment of the trials (sokoban or minesweeper).")
    env_options: dict[str, Any] = Field(default_factory=dict, description="Environment options.")
    algo: Literal["lamer", "gigpo", "grpo"] = Field(
        "lamer", description="lamer: trials with reflection; gigpo / grpo: the baselines, independent attempts."
    )
    advantage: Literal["gigpo", "grpo"] = Field(
        "gigpo", description="The estimator of lamer (the baselines use their own)."
    )
    mode: Literal["reflection", "history", "both"] = Field(
        "reflection", description="What later attempts see: reflections, the history of attempts, or both."
    )
    policy: str = Field("smollm2", description="HF source of the policy, or a ttlearn adapter folder to continue.")
    tasks: int = Field(16, ge=1, description="Training instance pool (held out from the instances a run plays).")
    tasks_per_step: int = Field(2, ge=1, description="Instances per step.")
    group: int = Field(4, ge=2, description="Trials per instance (the advantage group).")
    attempts: int = Field(3, ge=1, description="Attempts per trial.")
    gamma_step: float = Field(0.95, ge=0, le=1, description="Discount between steps of an attempt.")
    gamma_traj: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Discount between attempts; None: LaMer's released value for the environment "
        "(`Env.trajectory_discount`: 0.9 Sokoban, 0.6 Minesweeper).",
    )
    formula: Literal["paper", "released"] = Field(
        "paper",
        description="paper: returns and episode term from the paper's discounted trial score R(τ); released: as"
        " the authors' code computes them (one γ chain over the trial; each attempt's undiscounted reward centred"
        " over the group's steps). docs/estimators.md §12.",
    )
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of actions and reflections.")
    actions: Literal["text", "choices"] = Field(
        "text",
        description="text: LaMer's, one free-text reply per step (reasoning, then the action; unreadable = invalid"
        " step); choices: score the legal actions and sample one (no invalid moves).",
    )
    reply_tokens: int = Field(64, ge=8, description="Most tokens of a free-text action reply (reasoning included).")
    lora_r: int = Field(8, ge=1, description="LoRA rank of a new adapter.")
    reflection_tokens: int = Field(64, ge=8, description="Most tokens of a reflection.")
    moves_per_turn: int | None = Field(
        None, ge=1, description="Scored moves per turn; None: the environment's actions per turn."
    )

    @property
    def reflects(self) -> bool:
        return self.algo == "lamer"

    def trial_shape(self) -> tuple[int, int]:
        """(trials per instance, attempts per trial): the baselines spend the same attempts independently."""
        return (self.group, self.attempts) if self.reflects else (self.group * self.attempts, 1)

    @model_validator(mode="after")
    def _published_gamma_traj(self) -> LamerTrainConfig:
        if self.gamma_traj is None and ENVS.get(self.env).trajectory_discount is None:
            raise ValueError(f"LaMer published no gamma_traj for {self.env!r}: give --gamma-traj")
        return self

    def discount_across(self) -> float:
        """γ_traj: the one given, else LaMer's released value for the environment (step_gamma is 0.95 in both of
        its scripts)."""
        return ENVS.get(self.env).trajectory_discount if self.gamma_traj is None else self.gamma_traj

    @property
    def uses_gigpo(self) -> bool:
        return (self.advantage if self.reflects else self.algo) == "gigpo"


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
    under the trial step announced by `mark` (see `ttlearn.rollout.loop.Mark`)."""

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
            chosen = int(torch.multinomial(logps.exp(), 1, generator=self.policy.generator(seed)))
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


def trial_steps(
    trial: Trial, records: list[ActionRecord | TextRecord], states: dict[tuple[int, int], Hashable | None]
) -> list[TrainStep]:
    """The trial's steps in play order: each attempt's turns, then the reflection written after it (if any).

    `states[(attempt, step)]` is the environment's `state_key()` when the step was decided (None where it names
    none); a step's GiGPO anchor is (attempt, that state)."""
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
                    (episode.index, states.get((episode.index, index))),
                    tuple(by_tag.get(("act", episode.index, index), ())),
                )
            )
        written = by_tag.get(("reflect", episode.index, 0), [])
        if written:
            steps.append(
                TrainStep(0.0, episode.index, True, ("reflection", written[0].sample.prompt_ids), tuple(written))
            )
    return steps


def seen_reflection(policy: HFPolicy, record: TextRecord, max_chars: int) -> TextRecord | None:
    """The reflection cut to the tokens the next attempt sees (`seen_token_span`): the tokens before the span join
    the prompt, those after it are dropped, log-probs alike; None when nothing is seen."""
    sample = record.sample
    ids = sample.completion_ids
    prefixes = [policy.tokenizer.decode(ids[: k + 1], skip_special_tokens=True) for k in range(len(ids))]
    start, end = seen_token_span(prefixes, max_chars)
    if start == end:
        return None
    seen = dataclasses.replace(
        sample,
        prompt_ids=sample.prompt_ids + ids[:start],
        completion_ids=ids[start:end],
        logprobs=sample.logprobs[start:end],
    )
    return TextRecord(record.tag, seen)


def refuse_stateless_gigpo(config: LamerTrainConfig, env: Env) -> None:
    """GiGPO groups steps by the state they act from; an environment without `state_key()` names none, and its
    observation texts carry turn counters and logs, so such anchors would never group: refuse, say what to use."""
    if config.uses_gigpo and type(env).state_key is Env.state_key:
        raise ValueError(
            f"GiGPO anchors steps on the environment's state, and {env.name!r} names none (no state_key());"
            " use --advantage grpo (or --algo grpo)"
        )


def step_advantages(trials: list[tuple[Any, Any, list[TrainStep]]], config: LamerTrainConfig) -> np.ndarray:
    """Advantages of every step of a batch of (instance, trial, steps) over each instance's trials, by GiGPO (episode
    + anchor-state advantage) or GRPO (group-normalised episode score).

    `formula="paper"`: the returns are `cross_episode_returns` and the episode score the discounted R(τ)
    (`discounted_score_terms`, each trial once). `formula="released"`: the returns are `released_step_returns` and
    every step is scored by its attempt's undiscounted reward (`attempt_rewards`), centred over all steps of the group
    (`released_gigpo_advantages`; GRPO divides by their std + 1e-6, as the released `compute_grpo_outcome_advantage`).
    """
    released = config.formula == "released"
    scores, returns, groups, trial_ids, anchors = [], [], [], [], []
    gammas = {"gamma_step": config.gamma_step, "gamma_traj": config.discount_across()}
    for instance, trial_id, steps in trials:
        chain = ([s.reward for s in steps], [s.attempt for s in steps], [s.reflection for s in steps])
        returns.extend((released_step_returns if released else cross_episode_returns)(*chain, **gammas))
        scores.extend(attempt_rewards(*chain) if released else discounted_score_terms(*chain, **gammas))
        groups.extend([instance] * len(steps))
        trial_ids.extend([trial_id] * len(steps))
        anchors.extend(s.anchor for s in steps)
    estimator = config.advantage if config.reflects else config.algo
    if estimator == "gigpo":
        if released:
            return released_gigpo_advantages(scores, returns, groups, anchors)
        return gigpo_advantages(scores, returns, groups, trial_ids, anchors)
    if released:
        return group_advantages(scores, groups, eps=1e-6)
    return grpo_episode_advantages(scores, groups, trial_ids)


# ---- the update --------------------------------------------------------------------------------------------------
def record_logprobs(
    policy: HFPolicy, record: ActionRecord | TextRecord, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs with gradients [1, L], the sampling-time ones [1, L]) of one decision or reflection."""
    import torch

    if isinstance(record, ActionRecord):
        logp = choice_logprobs(policy, record.prompt, record.answers, temperature)[record.chosen].reshape(1, 1)
        return logp, torch.tensor([[record.old_logp]], device=logp.device)
    logp, _ = policy.sequence_logprobs([record.sample.prompt_ids], [record.sample.completion_ids], temperature)
    return logp, torch.tensor([record.sample.logprobs], device=logp.device)


def update(
    policy: HFPolicy, optimizer: Any, rows: list[tuple[ActionRecord | TextRecord, float]], config: LamerTrainConfig
) -> dict[str, float]:
    """One optimiser step on `policy_loss` with TRL's "grpo" aggregation: (1/B) Σ_rows mean over the row's tokens.

    The sum splits by row, so each row is backpropagated on its own (memory stays one row deep); rows with zero
    advantage contribute neither loss nor gradient and are skipped.
    """
    import torch

    from ttlearn.train.loss import policy_loss

    optimizer.zero_grad()
    total, clipped, used = 0.0, 0.0, 0
    for record, advantage in rows:
        if advantage == 0.0:
            continue
        logp, old = record_logprobs(policy, record, config.temperature)
        loss, stats = policy_loss(logp, old, torch.tensor([advantage], device=logp.device), torch.ones_like(logp))
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


# ---- the trainer -------------------------------------------------------------------------------------------------
def pool_seed(config: LamerTrainConfig, index: int) -> int:
    return derive_seed(config.seed, "train-task", index)


def step_instances(config: LamerTrainConfig, step: int) -> list[int]:
    """The pool indices trained on at `step`, drawn without replacement from a seed of (run seed, step)."""
    rng = random.Random(derive_seed(config.seed, "step", step))
    return rng.sample(range(config.tasks), min(config.tasks_per_step, config.tasks))


def trial_metrics(trials: list[Trial]) -> dict[str, float]:
    solved = [t.first_success for t in trials]
    return {
        "success_first": float(np.mean([s == 1 for s in solved])),
        "success_any": float(np.mean([s is not None for s in solved])),
        "reward_per_trial": float(np.mean([sum(e.score for e in t.attempts) for t in trials])),
        "attempts_per_trial": float(np.mean([len(t.attempts) for t in trials])),
        "invalid_steps": float(np.mean([not s.valid for t in trials for e in t.attempts for s in e.steps])),
    }


class LamerTrainer(Trainer):
    """LaMer: cross-episode meta-RL of the agent policy over multi-attempt trials (LoRA on the embedded model).

    Each step plays the step's trials with the policy, scores them and takes one policy-gradient step."""

    config_class = LamerTrainConfig
    config: LamerTrainConfig

    def __init__(
        self, config: LamerTrainConfig, *, progress: Progress | None = None, policy: HFPolicy | None = None
    ) -> None:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError("the lamer trainer runs in one process; start it without accelerate launch or torchrun")
        self.env = make_env(config.env, **{"seed": config.seed, **config.env_options})
        resolve_moves_per_turn(config.moves_per_turn, self.env)  # refuse a bad moves_per_turn before a model loads
        refuse_stateless_gigpo(config, self.env)
        super().__init__(config, progress=progress, policy=policy)

    def next_command(self) -> str:
        final = self.final
        acting = f" --free-text {self.config.reply_tokens} --retries 0" if self.config.actions == "text" else ""
        return (
            f"play it with: ttlearn run {self.config.env} --tasks 10 --memory lamer --policy {final}"
            f" --temperature {self.config.temperature:g}{acting}"
        )

    def load_policy(self) -> HFPolicy:
        from ttlearn.llm.hf import ADAPTER_META, HFPolicy, LoraOptions

        placement = {"device": self.device.torch_name, "dtype": self.device.dtype}
        if (Path(self.config.policy).expanduser() / ADAPTER_META).is_file():
            return HFPolicy.from_adapter(self.config.policy, **placement)
        return HFPolicy.from_source(self.config.policy, lora=LoraOptions(r=self.config.lora_r), **placement)

    def collect(self, step: int) -> tuple[list[tuple[Any, Any, list[TrainStep]]], list[Trial]]:
        """Play every trial of one step; returns (instance, trial id, steps) per trial and the trials themselves."""
        config, env = self.config, self.env
        recorder = PolicyRecorder(self.policy)
        player, _ = make_player(
            recorder.spec,
            lambda _spec: recorder,
            config.temperature,
            env,
            config.moves_per_turn,
            retries=0,  # LaMer: one reply per step, an unreadable one is an invalid step
            free_text_tokens=config.reply_tokens if config.actions == "text" else None,
        )
        states: dict[tuple[int, int], Hashable | None] = {}

        def mark(kind: str, attempt: int, index: int) -> None:
            recorder.mark(kind, attempt, index)
            if kind == "act":  # the state the coming decision acts on: the GiGPO anchor
                states[(attempt, index)] = env.state_key()

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
                states.clear()
                trial = play_trial(
                    env,
                    player,
                    memory,
                    seed=pool_seed(config, instance),
                    attempts=attempts,
                    early_stop=True,
                    mark=mark,
                    act_seed=lambda a, s, i=instance, j=j: derive_seed(config.seed, "train-act", step, i, j, a, s),
                )
                records = [self.trained_part(r, memory) for r in recorder.take()]
                batch.append((instance, j, trial_steps(trial, [r for r in records if r is not None], states)))
                trials.append(trial)
                self.played.extend(trial.attempts)
        return batch, trials

    def trained_part(self, record: ActionRecord | TextRecord, memory: Any) -> ActionRecord | TextRecord | None:
        """What of a record is trained: a reflection only as far as the next attempt sees it, the rest whole."""
        if record.tag[0] != "reflect" or not isinstance(record, TextRecord) or not isinstance(memory, LamerMemory):
            return record
        return seen_reflection(self.policy, record, memory.max_chars)

    def train_step(self, step: int) -> dict[str, Any]:
        start = time.perf_counter()
        batch, trials = self.collect(step)
        advantages = step_advantages(batch, self.config)
        rows, position = [], 0
        for _, _, steps in batch:
            for train_step in steps:
                rows.extend((record, float(advantages[position])) for record in train_step.records)
                position += 1
        return {
            **update(self.policy, self.optimizer, rows, self.config),
            **trial_metrics(trials),
            "reflections": sum(r.tag[0] == "reflect" for r, _ in rows),
            "wall_s": time.perf_counter() - start,
        }
