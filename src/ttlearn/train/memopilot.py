"""Multi-turn GRPO over the MemoPilot memory writer G_θ (MemoPilot, arXiv 2606.08656, ICML 2026).

One training sequence = (opponent, seed). Its G rollouts each play T games: game 1 with no memory (the same game in
every rollout, so it is played once), then after game t the writer samples m_t ~ G_θ(· | e_t, m_{t−1}) — with the
exact prompt and length bound of `ttlearn.memory.memopilot` — and the frozen player plays game t+1 reading m_t.
The reward of write t is the per-round score of game t+1; advantages are turn-level and context-independent
(`turn_level_advantages` over the G rollouts of the sequence), and the step is the one policy update
(`ttlearn.train.update`): TRL's clipped GRPO loss on the tokens of each write, with the sampling-time log-probs as
the old policy, in micro-batches.

What makes a step cheap without changing what it computes: the step's sequences advance in lockstep, so each turn's
S·G writes are one batched sampling call (`HFPolicy.sample`, which evaluates the G identical prompts after game 1
once); the frozen player's greedy decisions are a function of their prompt, so a note that suggests a move some
other rollout's note suggested replays that game from the embedded runtime's reply cache; and the update scores
the writes that share a prompt on one evaluation of it (`HFPolicy.sequence_logprobs`).

Only the tokens the player sees are trained: the memory is cut to `memory_chars` after sampling, and the tokens past
the cut (`seen_token_count`) are dropped from the write (`train.seen`), since no reward depends on them.

Data parallel: under `accelerate launch` or `torchrun` (one process per GPU, or several on the CPU) every rank plays
its share of the G rollouts and the reward matrices are summed across ranks (`Accelerator.reduce`), so all ranks
compute the same advantages; the scorer and the optimiser are `accelerate`'s prepared ones, so the backward pass
averages the LoRA gradients across ranks and the weights stay identical everywhere. The run directory, checkpoints
and resume are the trainer base's (`ttlearn.train.base`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from ttlearn.envs.base import ENVS, Env, make_env
from ttlearn.eval.metrics import mean_ci, paired_sign_flip_p
from ttlearn.llm.base import make_llm
from ttlearn.memory.memopilot import (
    FORMS,
    advice_of,
    note_source,
    reading_choices,
    seen_token_count,
    writer_messages,
    writer_stop,
)
from ttlearn.memory.text import bound_memory
from ttlearn.players.base import Player
from ttlearn.players.llm import suggested_action
from ttlearn.rollout.inflight import map_in_flight
from ttlearn.rollout.loop import play_sequence_game
from ttlearn.rollout.parts import make_player
from ttlearn.runs import RunDir
from ttlearn.seeding import derive_seed
from ttlearn.train.advantages import turn_level_advantages
from ttlearn.train.base import Progress, TrainConfig, Trainer
from ttlearn.train.parallel import rank_share, reduced
from ttlearn.train.seen import seen_tokens
from ttlearn.train.update import UpdateSettings, base_logprobs, policy_update
from ttlearn.types import Episode, NoteAt

if TYPE_CHECKING:
    from ttlearn.llm.hf import HFPolicy, Sample


def fixed_memory(text: str) -> Callable[[str], str]:
    """The memory the frozen player sees during a training game: one text, whatever the situation."""
    return lambda task: text


class MemoPilotTrainConfig(TrainConfig):
    """`ttlearn train memopilot` options. Writer length limits default to those of the `memopilot` memory."""

    resumable: ClassVar[frozenset[str]] = TrainConfig.resumable | {"eval_every", "concurrency"}

    env: str = Field("rps", description="Environment of the training games.")
    env_options: dict[str, Any] = Field(
        default_factory=dict, description="Environment options (not opponent, rounds or seed)."
    )
    opponents: list[str] = Field(
        default_factory=lambda: ["cycle3", "beat-last", "biased"], min_length=1, description="Training opponents."
    )
    games: int = Field(4, ge=2, description="T: games per rollout; the writes after games 1..T-1 are trained.")
    rounds: int = Field(10, ge=1, description="Rounds per game (hands, for hold'em).")
    group: int = Field(4, ge=2, description="G: rollouts per sequence (the turn-level advantage group).")
    sequences_per_step: int = Field(1, ge=1, description="Training sequences (opponent, seed) per step.")
    steps: int = Field(30, ge=1, description="Optimiser steps.")
    lr: float = Field(1e-4, gt=0, description="Learning rate of AdamW on the LoRA weights (no weight decay).")
    save_every: int = Field(1, ge=1, description="Checkpoint every N steps (and after the last one).")
    lora_r: int = Field(8, ge=1, description="LoRA rank of the writer.")
    lora_alpha: float = Field(16.0, gt=0, description="LoRA alpha.")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout.")
    lora_targets: list[str] = Field(
        default_factory=lambda: ["q_proj", "v_proj"], min_length=1, description="Modules that get LoRA adapters."
    )
    temperature: float = Field(1.0, gt=0, description="Writer sampling temperature.")
    epsilon: float = Field(0.2, ge=0, description="PPO clip range ε.")
    epsilon_high: float | None = Field(None, ge=0, description="Upper clip range (DAPO); None: ε.")
    beta: float = Field(0.0, ge=0, description="KL weight against the frozen base writer.")
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = Field(
        "dapo", description="Loss aggregation, as TRL defines grpo, bnpo, dr_grpo and dapo."
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="Divide advantages by the std of the turn's group, of the batch, or not at all."
    )
    max_completion_length: int = Field(80, ge=8, description="Most tokens a write may sample.")
    memory_words: int = Field(40, ge=3, description="Word limit the writer prompt asks for.")
    memory_chars: int = Field(400, ge=20, description="The memory is cut to this many characters.")
    writer_form: str = Field(
        "notes", description=f"How the writer is asked for a note (the memory's `form`): {', '.join(FORMS)}."
    )
    ppo_epochs: int = Field(1, ge=1, description="Optimiser steps on each batch of writes.")
    micro_batch: int = Field(8, ge=1, description="Writes per forward/backward pass.")
    player: str = Field("smollm2", description="The frozen player (an LLM spec, e.g. openai:URL#MODEL).")
    player_temperature: float = Field(0.0, ge=0, description="The player's sampling temperature.")
    note_at: NoteAt = Field(
        "system",
        description="Where the player shows the memory (as `ttlearn run --note-at`): train the writer for the "
        "presentation its player follows (docs/ceiling.md).",
    )
    concurrency: int = Field(
        1, ge=1, description="Rollout games in flight against the player (a server's parallel slots); same results."
    )
    writer_base: str = Field("smollm2", description="HF source of the writer G_θ.")
    eval_every: int = Field(
        10,
        ge=0,
        description="Every N steps (and before the first) the greedy writer plays every training opponent on the "
        "development `eval_seeds`; 0: never.",
    )
    eval_seeds: list[int] = Field(
        default_factory=lambda: [1000, 1001], description="Seeds of the development evaluation sequences (fixed)."
    )

    @model_validator(mode="after")
    def _check(self) -> MemoPilotTrainConfig:
        if self.writer_form not in FORMS:
            raise ValueError(f"writer_form must be one of {', '.join(FORMS)}, got {self.writer_form!r}")
        length = ENVS.get(self.env).rounds_option
        if length is None:
            raise ValueError(f"environment {self.env!r} has no option for a game's length (Env.rounds_option)")
        clash = {"opponent", length, "seed"} & set(self.env_options)
        if clash:
            raise ValueError(f"env_options may not set {sorted(clash)}: use --opponents, --rounds and --seed")
        return self


# ---- pure pieces -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Write:
    """One memory write: rollout i (0..G−1) of sequence `sequence` wrote m_t after game `turn` (1..T−1)."""

    sequence: int
    rollout: int
    turn: int
    sample: Sample


@dataclass
class Rollouts:
    """What some rollouts of one sequence played: their writes, rewards [rollouts, T−1] (reward[i, t−1] = per-round
    score of game t+1), the first game's per-round score (no memory) and the notes the player read (notes[i][t−1])."""

    sequence: int
    opponent: str
    seed: int
    writes: list[Write]
    rewards: np.ndarray
    first: float
    notes: list[list[str]]


def write_advantages(writes: Sequence[Write], rewards: dict[int, np.ndarray], scale: str) -> np.ndarray:
    """A(write) = turn_level_advantages(r_s)[i, t−1] for the write of rollout i after game t of sequence s, where
    r_s[i, t−1] is the per-round score of game t+1 of that rollout (shape [G, T−1])."""
    table = {s: turn_level_advantages(r, scale=scale) for s, r in rewards.items()}
    return np.array([table[w.sequence][w.rollout, w.turn - 1] for w in writes], dtype=float)


def interval(values: Sequence[float]) -> list[float]:
    """[mean, low, high]: the mean with its 95 % t-interval (low = high = mean for one value)."""
    mean, half = mean_ci(values) if len(values) > 1 else (float(np.mean(values)), 0.0)
    return [round(mean, 6), round(mean - half, 6), round(mean + half, 6)]


def paired_change(before: Sequence[float], after: Sequence[float]) -> dict[str, float]:
    """after − before over paired sequences: the mean gain, how many rose and fell, and the exact sign-flip p."""
    diffs = [a - b for a, b in zip(after, before, strict=True)]
    return {
        "gain": round(float(np.mean(diffs)), 6),
        "rose": sum(d > 1e-9 for d in diffs),
        "fell": sum(d < -1e-9 for d in diffs),
        "p": paired_sign_flip_p(diffs),
    }


def move_shares(moves: Sequence[str | None]) -> dict[str, float]:
    """Share of each suggested move (None → "none"), in the order first seen, rounded to 4 places."""
    counts = Counter("none" if m is None else m for m in moves)
    return {move: round(n / len(moves), 4) for move, n in counts.items()}


# ---- how far the writer moved -----------------------------------------------------------------------------------
def kl_to_base(policy: HFPolicy, writes: Sequence[Write], temperature: float, micro_batch: int) -> float:
    """KL(π_θ ‖ π_base) per token, estimated on the sampled tokens as mean(log π_θ − log π_base) (the k1 estimator,
    unbiased for tokens drawn from π_θ at the sampling temperature)."""
    total, count = 0.0, 0
    for i in range(0, len(writes), micro_batch):
        part = writes[i : i + micro_batch]
        ref = base_logprobs(policy, [w.sample for w in part], temperature)
        for row, write in enumerate(part):
            n = len(write.sample.logprobs)
            total += sum(write.sample.logprobs) - float(ref[row, :n].sum())
            count += n
    return total / max(count, 1)


# ---- the trainer -------------------------------------------------------------------------------------------------
class MemoPilotTrainer(Trainer):
    """MemoPilot: train the memory writer by multi-turn GRPO with turn-level, context-independent advantages.

    Holds the writer, the frozen player and the optimiser; `train()` (the base's loop) runs the remaining steps."""

    config_class = MemoPilotTrainConfig
    config: MemoPilotTrainConfig

    def __init__(
        self,
        config: MemoPilotTrainConfig,
        *,
        player: Player | None = None,
        progress: Progress | None = None,
        policy: HFPolicy | None = None,
    ) -> None:
        super().__init__(config, progress=progress, policy=policy)
        probe_env = self.make_env(config, config.opponents[0], config.seed)
        self.player = (
            player
            or make_player(config.player, make_llm, config.player_temperature, probe_env, note_at=config.note_at)[0]
        )
        self.actions = probe_env.reset(config.seed).legal_actions
        """The first decision's legal actions: what a note's suggested move is read against in the metrics."""
        self._no_memory: dict[tuple[str, int], float] = {}
        self._eval_start: list[float] | None = None

    def check(self) -> None:
        """Every opponent names a game, and the group splits evenly over the processes (`self.rollouts`: this
        rank's)."""
        self.rollouts = rank_share(self.config.group, self.rank, self.world, "group")
        for opponent in self.config.opponents:
            self.make_env(self.config, opponent, self.config.seed)

    def train(self) -> list[dict[str, Any]]:
        """The base's loop, then the learning curve of the whole run (`RunDir.TRAINING_CURVE`) from its metrics."""
        from ttlearn.eval.report.plots import training_chart

        done = super().train()
        if self.rank == 0:
            (self.out / RunDir.TRAINING_CURVE).write_text(training_chart(self.logged_metrics()))
        return done

    def evaluation_scores(self, metrics: dict[str, Any]) -> list[float]:
        """The greedy writer's mean development reward: before the first step (logged with step 1), then after
        every `eval_every` steps."""
        return [metrics[key]["reward"][0] for key in ("eval_start", "eval") if key in metrics]

    def next_command(self) -> str:
        final = self.final
        return f"play it with: ttlearn run {self.config.env} --memory memopilot --writer {final}"

    def load_policy(self) -> HFPolicy:
        from ttlearn.llm.hf import HFPolicy, LoraOptions

        cfg = self.config
        lora = LoraOptions(
            r=cfg.lora_r, alpha=cfg.lora_alpha, dropout=cfg.lora_dropout, target_modules=tuple(cfg.lora_targets)
        )
        return HFPolicy.from_source(cfg.writer_base, lora=lora, device=self.device.torch_name, dtype=self.device.dtype)

    @staticmethod
    def make_env(cfg: MemoPilotTrainConfig, opponent: str, seed: int) -> Env:
        length = ENVS.get(cfg.env).rounds_option
        return make_env(cfg.env, **{**cfg.env_options, "opponent": opponent, length: cfg.rounds, "seed": seed})

    def suggested(self, note: str) -> str | None:
        """The move a `note_at="default"` player is shown as suggested for its first decision of a game."""
        return suggested_action(note, self.actions, 0)

    # ---- rollouts -------------------------------------------------------------------------------------------------
    def play(self, jobs: Sequence[tuple[Env, str, int, int]], marks: dict[str, Any] | None = None) -> list[Episode]:
        """Games (env, memory, sequence seed, game index), `concurrency` in flight; recorded as training games, or
        with `marks` as evaluation games."""
        cfg = self.config
        games = map_in_flight(
            lambda job: play_sequence_game(job[0], self.player, fixed_memory(job[1]), job[2], job[3]),
            list(jobs),
            cfg.concurrency,
        )
        if marks is None:
            self.played.extend(games)
        else:
            self.evaluated.extend((marks, game) for game in games)
        return games

    def play_rollouts(
        self,
        sequences: Sequence[tuple[int, str, int]],
        rollouts: Sequence[int],
        temperature: float,
        sample_seed: int,
        timings: Counter[str] | None = None,
        marks: dict[str, Any] | None = None,
    ) -> list[Rollouts]:
        """Play `rollouts` (indices into the group) of every sequence (index, opponent, seed), all in lockstep: each
        turn's writes of every sequence and rollout are one batched sampling call, then its games are played
        (`marks`: evaluation games, as `play` records them)."""
        cfg, timings = self.config, Counter() if timings is None else timings
        n = len(rollouts)
        envs = [[self.make_env(cfg, opponent, seed) for _ in rollouts] for _, opponent, seed in sequences]
        start = time.perf_counter()
        firsts = self.play([(e[0], "", seed, 1) for e, (_, _, seed) in zip(envs, sequences)], marks)  # no memory
        timings["play_s"] += time.perf_counter() - start
        episodes = [[first] * n for first in firsts]
        memories = [[""] * n for _ in sequences]
        results = [
            Rollouts(
                k, opponent, seed, [], np.zeros((n, cfg.games - 1)), first.score / cfg.rounds, [[] for _ in rollouts]
            )
            for (k, opponent, seed), first in zip(sequences, firsts)
        ]
        for turn in range(1, cfg.games):
            start = time.perf_counter()
            prompts = [
                writer_messages(e.info["rules"], m, e, cfg.memory_words, cfg.writer_form)
                for row_e, row_m in zip(episodes, memories)
                for e, m in zip(row_e, row_m)
            ]
            choices = reading_choices(cfg.writer_form, advice_of(episodes[0][0]))
            if choices:
                samples = self.policy.sample_choices(
                    prompts, choices, temperature=temperature, seed=derive_seed(sample_seed, turn)
                )
            else:
                samples = self.policy.sample(
                    prompts,
                    max_new_tokens=cfg.max_completion_length,
                    temperature=temperature,
                    seed=derive_seed(sample_seed, turn),
                    stop=writer_stop(cfg.writer_form),
                )
            memories = [
                [
                    bound_memory(note_source(cfg.writer_form, s.text, advice_of(e)), cfg.memory_chars)
                    for s, e in zip(samples[j * n : (j + 1) * n], episodes[j])
                ]
                for j in range(len(sequences))
            ]
            timings["write_s"] += time.perf_counter() - start
            start = time.perf_counter()
            jobs = [
                (env, m, seed, turn + 1)
                for row_env, row_m, (_, _, seed) in zip(envs, memories, sequences)
                for env, m in zip(row_env, row_m)
            ]
            games = self.play(jobs, marks)
            timings["play_s"] += time.perf_counter() - start
            for j, result in enumerate(results):
                episodes[j] = games[j * n : (j + 1) * n]
                result.rewards[:, turn - 1] = [e.score / cfg.rounds for e in episodes[j]]
                for i, (rollout, sample, note) in enumerate(zip(rollouts, samples[j * n : (j + 1) * n], memories[j])):
                    result.writes.append(
                        Write(
                            result.sequence,
                            rollout,
                            turn,
                            self.trained_part(sample, advice_of(episodes[j][i])),
                        )
                    )
                    result.notes[i].append(note)
        return results

    def trained_part(self, sample: Sample, advice: Mapping[str, str]) -> Sample:
        """What of a write is trained: the tokens of the note the player reads (`seen_token_count` of the notes its
        prefixes make)."""
        form, max_chars = self.config.writer_form, self.config.memory_chars
        return seen_tokens(
            self.policy,
            sample,
            lambda texts: (0, seen_token_count([note_source(form, text, advice) for text in texts], max_chars)),
        )

    def sequences(self, step: int) -> list[tuple[int, str, int]]:
        """(index, opponent, seed) of the training sequences of step `step` (from 1); opponents cycle across steps."""
        n = self.config.sequences_per_step
        opponents = self.config.opponents
        return [
            (k, opponents[k % len(opponents)], derive_seed(self.config.seed, "sequence", k))
            for k in range((step - 1) * n, step * n)
        ]

    # ---- one step -------------------------------------------------------------------------------------------------
    def train_step(self, step: int) -> dict[str, Any]:
        cfg = self.config
        start = time.perf_counter()
        timings: Counter[str] = Counter()
        metrics: dict[str, Any] = {}
        if cfg.eval_every and step == 1:
            metrics["eval_start"] = self.evaluate(after_step=0)
        sequences = self.sequences(step)
        played = self.play_rollouts(
            sequences, self.rollouts, cfg.temperature, derive_seed(cfg.seed, "write", step, self.rank), timings
        )
        rewards: dict[int, np.ndarray] = {}
        for result in played:
            full = np.zeros((cfg.group, cfg.games - 1))
            full[self.rollouts] = result.rewards
            rewards[result.sequence] = reduced(self.accelerator, full, self.policy.device, "sum")
        writes = [w for result in played for w in sorted(result.writes, key=lambda w: (w.turn, w.rollout))]
        advantages = write_advantages(writes, rewards, cfg.scale_rewards)
        local_tokens = sum(len(w.sample.completion_ids) for w in writes)
        global_tokens = int(reduced(self.accelerator, np.array([local_tokens]), self.policy.device, "sum")[0])
        update_start = time.perf_counter()
        stats = policy_update(
            self.policy,
            self.optimizer,
            [w.sample for w in writes],
            advantages,
            UpdateSettings.of(cfg),
            accelerator=self.accelerator,
            scorer=self.scorer,
            batch_tokens=global_tokens,
        )
        update_s = time.perf_counter() - update_start
        table = np.stack(list(rewards.values()))  # [S, G, T−1]
        spread = table.std(axis=1, ddof=1)  # [S, T−1]: the reward spread of each (sequence, turn) group
        all_adv = np.concatenate([turn_level_advantages(r, scale=cfg.scale_rewards).ravel() for r in rewards.values()])
        notes = [note for result in played for row in result.notes for note in row]
        by_opponent: dict[str, list[str | None]] = {}
        for result in played:
            by_opponent.setdefault(result.opponent, []).extend(self.suggested(n) for row in result.notes for n in row)
        metrics.update(
            {
                "sequences": [{"opponent": o, "seed": s} for _, o, s in sequences],
                "notes": table.size,
                "note_reward": interval(table.mean(axis=(1, 2))),
                "reward_mean": table.mean(axis=(0, 1)).round(6).tolist(),
                "reward_std": spread.mean(axis=0).round(6).tolist(),
                "flat_groups": float((spread < 1e-9).mean()),
                "first_game_reward": float(np.mean([r.first for r in played])),
                "suggested": move_shares([self.suggested(n) for n in notes]),
                "suggested_by_opponent": {o: move_shares(m) for o, m in by_opponent.items()},
                "advantage_mean": float(all_adv.mean()),
                "advantage_std": float(all_adv.std()),
                "advantage_abs_mean": float(np.abs(all_adv).mean()),
                **{k: v for k, v in stats.items() if k != "kl" or cfg.beta},
                "write_s": timings["write_s"],
                "play_s": timings["play_s"],
                "update_s": update_s,
            }
        )
        if cfg.eval_every and (step % cfg.eval_every == 0 or step == cfg.steps):
            metrics["kl_to_base"] = kl_to_base(self.policy, writes, cfg.temperature, cfg.micro_batch)
            metrics["eval"] = self.evaluate(after_step=step)
        metrics["wall_s"] = time.perf_counter() - start
        return metrics

    # ---- the development evaluation -------------------------------------------------------------------------------
    def evaluate(self, after_step: int, seeds: Sequence[int] | None = None) -> dict[str, Any]:
        """The greedy writer on every training opponent × `eval_seeds` (development data, the same every time): per
        sequence the mean per-round reward of games 2..T, their mean with its 95 % interval, the same games with no
        memory, the notes it wrote for each opponent's first seed, and — after training steps — the paired change
        since the evaluation before the first step (exact sign-flip p). The sequences are split across ranks."""
        cfg = self.config
        seeds = list(cfg.eval_seeds if seeds is None else seeds)
        if not seeds:
            raise ValueError("evaluation needs at least one seed")
        jobs = [(n, o, s) for n, (o, s) in enumerate((o, s) for o in cfg.opponents for s in seeds)]
        mine = [job for job in jobs if job[0] % self.world == self.rank]
        found = np.zeros((len(jobs), 2))
        notes: dict[str, list[str]] = {}
        moves: list[str | None] = []
        marks = {"after_step": after_step, "memory": "writer"}
        for result in self.play_rollouts(mine, [0], 0.0, derive_seed(cfg.seed, "eval"), marks=marks):
            baseline = self._no_memory_reward(result.opponent, result.seed, after_step)
            found[result.sequence] = [result.rewards.mean(), baseline]
            moves += [self.suggested(n) for n in result.notes[0]]
            if result.seed == seeds[0]:
                notes[result.opponent] = result.notes[0]
        found = reduced(self.accelerator, found, self.policy.device, "sum")
        rewards = found[:, 0].round(6).tolist()
        record: dict[str, Any] = {
            "after_step": after_step,
            "reward": interval(rewards),
            "none": interval(found[:, 1]),
            "none_rewards": found[:, 1].tolist(),
            "by_opponent": {
                o: round(float(np.mean([r for (_, opp, _), r in zip(jobs, rewards) if opp == o])), 6)
                for o in cfg.opponents
            },
            "rewards": rewards,
            "suggested": move_shares(moves),
            "notes": notes,
        }
        if after_step == 0:
            self._eval_start = rewards
        else:
            record["vs_start"] = paired_change(self._start_rewards(), rewards)
        return record

    def _start_rewards(self) -> list[float]:
        """Per-sequence rewards of the evaluation before the first step (logged with step 1; read back on resume)."""
        if self._eval_start is None:
            logged = [m for m in self.logged_metrics() if "eval_start" in m]
            if not logged:
                raise ValueError(f"{self.out} has no evaluation before its first step to compare with")
            self._eval_start = logged[0]["eval_start"]["rewards"]
        return self._eval_start

    def _no_memory_reward(self, opponent: str, seed: int, after_step: int) -> float:
        """Games 2..T with an empty memory. The frozen player makes it a constant, so its games are played, and
        recorded, once a run (marked memory "none"): after a resume it is read back from the evaluation before the
        first step (`none_rewards`)."""
        key = (opponent, seed)
        if not self._no_memory and after_step > 0:
            logged = [m["eval_start"] for m in self.logged_metrics() if "eval_start" in m]
            if logged:
                jobs = [(o, s) for o in self.config.opponents for s in self.config.eval_seeds]
                self._no_memory = dict(zip(jobs, logged[0].get("none_rewards", [])))
        if key not in self._no_memory:
            env = self.make_env(self.config, opponent, seed)
            jobs = [(env, "", seed, g) for g in range(2, self.config.games + 1)]
            games = self.play(jobs, {"after_step": after_step, "memory": "none"})
            self._no_memory[key] = float(np.mean([g.score for g in games])) / self.config.rounds
        return self._no_memory[key]
