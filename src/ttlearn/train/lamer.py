"""LaMer's cross-episode meta-RL: train the agent policy (LoRA on an `HFPolicy`) on whole trials.

One step: pick `tasks_per_step` instances from a fixed pool of `tasks`, play `group` trials of `attempts` attempts at
each (`ttlearn.rollout.loop.play_trial`), with the policy both choosing the actions and writing the reflections between
attempts; score every step with `cross_episode_returns` (G_t⁽ⁿ⁾ = its attempt's γ_step-discounted return from t plus
Σ_{m>n} γ_trajᵐ⁻ⁿ of each later attempt's discounted return, so an early attempt is credited for what the later ones
achieve and the first step's return is the trial's score R(τ)), turn returns into advantages by GiGPO or the GRPO
variant, and take one clipped policy-gradient step, the one policy update of every trainer (`ttlearn.train.update`,
in micro-batches), on the action tokens and on the reflection tokens the next attempt sees (`train.seen`). The
baselines `gigpo` and `grpo` play the same number of attempts per instance, all independent and without reflection
(LaMer's 8 × 3 against 24 × 1).

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

Data parallel: under `accelerate launch` or `torchrun` (one process per GPU, or several on the CPU) every rank plays
its share of each instance's trials (trial j on rank j mod P, with the seeds one process would give it), the ranks
exchange what they played (`accelerate.utils.gather_object`), so every rank computes the advantages of the whole
step, and each updates on its own trials' rows through `accelerate`'s prepared scorer and optimiser, which average
the gradients: the same step as one process, and the same weights on every rank.

The run directory, checkpoints and resume are the trainer base's (`ttlearn.train.base`); play the result with
`hf:OUT/final`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from ttlearn.envs.base import ENVS, Env, make_env
from ttlearn.llm.base import LLM, Message
from ttlearn.llm.hf import Sample
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
from ttlearn.train.base import TrainConfig, Trainer
from ttlearn.train.parallel import rank_share
from ttlearn.train.seen import seen_tokens
from ttlearn.train.update import Choice, Row, UpdateSettings, choice_logprobs, policy_update
from ttlearn.types import Completion

if TYPE_CHECKING:
    from ttlearn.llm.hf import HFPolicy


class LamerTrainConfig(TrainConfig):
    """`ttlearn train lamer` options."""

    resumable: ClassVar[frozenset[str]] = TrainConfig.resumable | {"micro_batch"}

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
    micro_batch: int = Field(
        8, ge=1, description="Rows (decisions, reflections) per forward/backward pass: memory, not the update."
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
@dataclass(frozen=True)
class Record:
    """One call of the policy during a trial: what it sampled (a text, or a choice among the legal actions), filed
    under the trial step it served: (kind "act" or "reflect", attempt, step)."""

    tag: tuple[str, int, int]
    row: Row


class PolicyRecorder(LLM):
    """Serves the policy to players and memories, sampling at the temperature they ask for, and files every call
    under the trial step announced by `mark` (see `ttlearn.rollout.loop.Mark`)."""

    supports_choices = True

    def __init__(self, policy: HFPolicy) -> None:
        self.policy, self.spec = policy, policy.spec
        self.records: list[Record] = []
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
            self.records.append(Record(self.tag, Choice(tuple(prompt), answers, chosen, float(logps[chosen]))))
            scores = dict(zip(choices, logps.tolist()))
            return Completion(choices[chosen], len(prompt), 0, time.perf_counter() - start, choice_logprobs=scores)
        (sample,) = self.policy.sample_ids(
            [prompt], max_new_tokens=max_tokens, temperature=temperature, seed=seed, stop=stop
        )
        self.records.append(Record(self.tag, sample))
        return Completion(sample.text.strip(), len(prompt), len(sample.completion_ids), time.perf_counter() - start)

    def take(self) -> list[Record]:
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
    records: tuple[Record, ...]


def trial_steps(trial: Trial, records: list[Record], states: dict[tuple[int, int], Hashable | None]) -> list[TrainStep]:
    """The trial's steps in play order: each attempt's turns, then the reflection written after it (if any).

    `states[(attempt, step)]` is the environment's `state_key()` when the step was decided (None where it names
    none); a step's GiGPO anchor is (attempt, that state)."""
    by_tag: dict[tuple[str, int, int], list[Record]] = {}
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
            steps.append(TrainStep(0.0, episode.index, True, ("reflection", written[0].row.prompt_ids), tuple(written)))
    return steps


def trained_part(policy: HFPolicy, record: Record, memory: Any) -> Record | None:
    """What of a record is trained: a reflection only as far as the next attempt sees it (`seen_token_span`; None
    when it sees nothing), the rest whole."""
    if record.tag[0] != "reflect" or not isinstance(record.row, Sample) or not isinstance(memory, LamerMemory):
        return record
    seen = seen_tokens(policy, record.row, lambda texts: seen_token_span(texts, memory.max_chars))
    return Record(record.tag, seen) if seen.completion_ids else None


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


@dataclass(frozen=True)
class PlayedTrial:
    """One trial of a step: its instance, its index in the instance's group, its steps (`trial_steps`), the trial."""

    instance: int
    index: int
    steps: list[TrainStep]
    trial: Trial


class LamerTrainer(Trainer):
    """LaMer: cross-episode meta-RL of the agent policy over multi-attempt trials (LoRA on the embedded model).

    Each step plays the step's trials with the policy, scores them and takes one policy-gradient step."""

    config_class = LamerTrainConfig
    config: LamerTrainConfig

    def check(self) -> None:
        """The environment, its moves per turn and the estimator fit together, and each instance's trials split
        evenly over the processes (`self.trials`: this rank's)."""
        config = self.config
        self.env = make_env(config.env, **{"seed": config.seed, **config.env_options})
        resolve_moves_per_turn(config.moves_per_turn, self.env)
        refuse_stateless_gigpo(config, self.env)
        self.trials = rank_share(config.trial_shape()[0], self.rank, self.world, "trials per instance")

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

    def collect(self, step: int) -> list[PlayedTrial]:
        """Play this rank's trials of one step; returns every rank's, in the order one process plays them."""
        from accelerate.utils import gather_object

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

        attempts = config.trial_shape()[1]
        instances = step_instances(config, step)
        played = []
        for instance in instances:
            for j in self.trials:
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
                records = [trained_part(self.policy, r, memory) for r in recorder.take()]
                steps = trial_steps(trial, [r for r in records if r is not None], states)
                played.append(PlayedTrial(instance, j, steps, trial))
        return sorted(gather_object(played), key=lambda p: (instances.index(p.instance), p.index))

    def train_step(self, step: int) -> dict[str, Any]:
        start = time.perf_counter()
        played = self.collect(step)
        advantages = step_advantages([(p.instance, p.index, p.steps) for p in played], self.config)
        rows, mine, position = [], [], 0
        for trial in played:
            for train_step in trial.steps:
                for record in train_step.records:
                    rows.append((record, float(advantages[position])))
                    mine.append(trial.index in self.trials)
                position += 1
        self.played.extend(episode for p in played for episode in p.trial.attempts)
        return {
            **self.update(rows, mine),
            **trial_metrics([p.trial for p in played]),
            "reflections": sum(r.tag[0] == "reflect" for r, _ in rows),
            "wall_s": time.perf_counter() - start,
        }

    def update(self, rows: list[tuple[Record, float]], mine: list[bool]) -> dict[str, float]:
        """The policy update on this rank's rows of the step (`mine`) with TRL's "grpo" aggregation over all of them:
        (1/B) Σ_rows mean over the row's tokens.

        Rows with zero advantage add neither loss nor gradient and are skipped; when the whole step has none with
        one, no step is taken (AdamW leaves parameters without a gradient alone). A rank whose own rows all have
        zero advantage still joins the gradient average, with one of them."""
        trained = sum(advantage != 0.0 for _, advantage in rows)
        stats = {"loss": 0.0, "grad_norm": 0.0, "clip_fraction": 0.0}
        if trained:
            own = [row for row, is_mine in zip(rows, mine) if is_mine]
            part = [row for row in own if row[1] != 0.0] or own[:1]
            found = policy_update(
                self.policy,
                self.optimizer,
                [record.row for record, _ in part],
                np.array([advantage for _, advantage in part]),
                UpdateSettings.of(self.config),
                accelerator=self.accelerator,
                scorer=self.scorer,
                batch_rows=len(rows),
            )
            stats = {name: found[name] for name in stats}
        return {**stats, "rows": len(rows), "rows_trained": trained}
