"""Multi-turn GRPO over the MemoPilot memory writer G_θ (REFERENCE §2, §7).

One training sequence = (opponent, seed). Its G rollouts each play T games: game 1 with no memory (the same game in
every rollout, so it is played once), then after game t the writer samples m_t ~ G_θ(· | e_t, m_{t−1}) — with the
exact prompt and length bound of `ttlearn.memory.memopilot` — and the frozen player plays game t+1 reading m_t.
The reward of write t is the per-round score of game t+1; advantages are turn-level and context-independent
(`turn_level_advantages` over the G rollouts of the sequence), and the loss is TRL's clipped GRPO loss on the tokens
of each write, with the sampling-time log-probs as the old policy.

Data parallel: under `accelerate launch` every rank plays its share of the G rollouts, the reward matrix is summed
across ranks so all ranks compute the same advantages, and LoRA gradients are averaged before the optimiser step, so
the weights stay identical everywhere. Checkpoints carry adapter + optimiser + RNG state; a rerun resumes.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ttlearn.envs.base import make_env
from ttlearn.memory.memopilot import bound_memory, writer_messages
from ttlearn.llm.base import make_llm
from ttlearn.players.base import Player
from ttlearn.rollout.loop import play_sequence_game
from ttlearn.rollout.parts import make_player
from ttlearn.seeding import derive_seed
from ttlearn.train.advantages import turn_level_advantages
from ttlearn.train.loss import LOSS_TYPES

if TYPE_CHECKING:
    import torch

    from ttlearn.llm.hf import HFPolicy, Sample

STATE_FILE = "trainer_state.pt"
RESUMABLE = {"steps", "eval_every", "eval_seeds", "save_every", "out"}
"""Config fields a resumed run may change; any other difference means a different experiment (→ ValueError)."""

Progress = Callable[[int, dict[str, Any]], None]
"""Called after every step with (step, metrics), like the LaMer trainer."""


def fixed_memory(text: str) -> Callable[[str], str]:
    """The memory the frozen player sees during a training game: one text, whatever the situation."""
    return lambda task: text


class MemoPilotTrainConfig(BaseModel):
    """`ttlearn train memopilot` flags. Writer length limits default to those of the `memopilot` memory."""

    model_config = ConfigDict(extra="forbid")

    env: str = "rps"
    env_options: dict[str, Any] = Field(default_factory=dict)
    opponents: list[str] = Field(default_factory=lambda: ["cycle3", "beat-last", "biased"], min_length=1)
    games: int = Field(4, ge=2, description="T: games per rollout; writes 1..T-1 are trained")
    rounds: int = Field(10, ge=1)
    group: int = Field(4, ge=2, description="G: rollouts per sequence")
    sequences_per_step: int = Field(1, ge=1)
    steps: int = Field(30, ge=1)
    lr: float = Field(1e-4, gt=0)
    lora_r: int = Field(8, ge=1)
    lora_alpha: float = Field(16.0, gt=0)
    lora_dropout: float = Field(0.0, ge=0, lt=1)
    lora_targets: list[str] = Field(default_factory=lambda: ["q_proj", "v_proj"], min_length=1)
    temperature: float = Field(1.0, gt=0, description="writer sampling temperature")
    epsilon: float = Field(0.2, ge=0)
    epsilon_high: float | None = Field(None, ge=0)
    beta: float = Field(0.0, ge=0)
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = "dapo"
    scale_rewards: Literal["group", "batch", "none"] = "group"
    max_completion_length: int = Field(80, ge=8)
    memory_words: int = Field(40, ge=3)
    memory_chars: int = Field(400, ge=20)
    ppo_epochs: int = Field(1, ge=1)
    micro_batch: int = Field(4, ge=1, description="writes per forward/backward pass")
    max_grad_norm: float = Field(1.0, gt=0)
    player: str = "smollm2"
    player_temperature: float = Field(0.0, ge=0)
    writer_base: str = "smollm2"
    eval_every: int = Field(10, ge=0, description="0: never")
    eval_seeds: list[int] = Field(default_factory=lambda: [1000, 1001])
    save_every: int = Field(1, ge=1)
    seed: int = 0
    out: Path = Path("runs/memopilot")

    @model_validator(mode="after")
    def _check(self) -> MemoPilotTrainConfig:
        clash = {"opponent", "rounds", "seed"} & set(self.env_options)
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


def write_advantages(writes: Sequence[Write], rewards: dict[int, np.ndarray], scale: str) -> np.ndarray:
    """A(write) = turn_level_advantages(r_s)[i, t−1] for the write of rollout i after game t of sequence s, where
    r_s[i, t−1] is the per-round score of game t+1 of that rollout (shape [G, T−1])."""
    table = {s: turn_level_advantages(r, scale=scale) for s, r in rewards.items()}
    return np.array([table[w.sequence][w.rollout, w.turn - 1] for w in writes], dtype=float)


def micro_batch_weight(loss_type: str, rows: int, tokens: int, total_rows: int, total_tokens: int) -> float:
    """w_c such that Σ_c w_c · loss_c over micro-batches c equals the loss of the whole batch:

    grpo, dr_grpo: w_c = B_c / B   (both average over sequences; dr_grpo's divisor is B · max_completion_length),
    bnpo:          w_c = N_c / N   (a mean over all N completion tokens),
    dapo:          w_c = 1         (policy_loss already divides by num_items_in_batch, the whole batch's tokens).
    """
    if loss_type in ("grpo", "dr_grpo"):
        return rows / total_rows
    if loss_type == "bnpo":
        return tokens / total_tokens
    if loss_type == "dapo":
        return 1.0
    raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")


def rank_rollouts(group: int, rank: int, world: int) -> list[int]:
    """The rollouts rank `rank` plays: i ≡ rank (mod world). Equal shares keep the sequence means of every rank equal
    in weight when gradients are averaged."""
    if group % world:
        raise ValueError(f"group ({group}) must be a multiple of the number of processes ({world})")
    return list(range(rank, group, world))


# ---- distributed helpers (no-ops in one process) -----------------------------------------------------------------
def _world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _all_sum(array: np.ndarray) -> np.ndarray:
    import torch
    import torch.distributed as dist

    if _world()[1] == 1:
        return array
    tensor = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float64))
    dist.all_reduce(tensor)
    return tensor.numpy()


def _average_gradients(params: Sequence[torch.nn.Parameter]) -> None:
    import torch.distributed as dist

    world = _world()[1]
    if world == 1:
        return
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world


def _broadcast(params: Sequence[torch.nn.Parameter]) -> None:
    import torch.distributed as dist

    if _world()[1] > 1:
        for p in params:
            dist.broadcast(p.data, src=0)


def _barrier() -> None:
    import torch.distributed as dist

    if _world()[1] > 1:
        dist.barrier()


# ---- the policy update -------------------------------------------------------------------------------------------
def _padded(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    import torch

    out = torch.zeros(len(rows), width)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def policy_update(
    policy: HFPolicy,
    optimizer: torch.optim.Optimizer,
    writes: Sequence[Write],
    advantages: np.ndarray,
    config: MemoPilotTrainConfig,
    *,
    global_tokens: int | None = None,
    step: bool = True,
) -> dict[str, float]:
    """`ppo_epochs` optimiser steps of `policy_loss` on the writes' completion tokens, old log-probs = sampled ones.

    Returns stats of the first epoch's loss (the number a resumed run must reproduce) and of the last step's
    gradient. `global_tokens`: completion tokens of the step over all ranks (for "dapo"). `step=False` computes loss
    and gradients only (tests, benchmarks)."""
    import torch

    from ttlearn.train.loss import policy_loss

    if not writes:
        raise ValueError("policy_update needs at least one write")
    world = _world()[1]
    params = policy.trainable_parameters()
    tokens = [len(w.sample.completion_ids) for w in writes]
    total_tokens = sum(tokens)
    num_items = (global_tokens or total_tokens * world) / world  # TRL: the generation batch's tokens per process
    chunks = [range(i, min(i + config.micro_batch, len(writes))) for i in range(0, len(writes), config.micro_batch)]
    refs: list[torch.Tensor | None] = [None] * len(chunks)
    if config.beta:
        with torch.no_grad(), policy.adapters_disabled():
            refs = [
                policy.sequence_logprobs(
                    [writes[i].sample.prompt_ids for i in c],
                    [writes[i].sample.completion_ids for i in c],
                    config.temperature,
                )[0]
                for c in chunks
            ]
    first: dict[str, float] = {}
    policy.model.train()
    try:
        for epoch in range(config.ppo_epochs):
            totals = {"loss": 0.0, "clip_fraction": 0.0, "ratio_mean": 0.0, "kl": 0.0}
            for chunk, ref in zip(chunks, refs):
                batch = [writes[i].sample for i in chunk]
                logp, mask = policy.sequence_logprobs(
                    [s.prompt_ids for s in batch], [s.completion_ids for s in batch], config.temperature
                )
                old = _padded([s.logprobs for s in batch], logp.shape[1])
                loss, stats = policy_loss(
                    logp,
                    old,
                    torch.tensor(advantages[list(chunk)], dtype=logp.dtype),
                    mask,
                    epsilon=config.epsilon,
                    epsilon_high=config.epsilon_high,
                    beta=config.beta,
                    ref_logp=ref,
                    loss_type=config.loss_type,
                    max_completion_length=config.max_completion_length,
                    num_items_in_batch=num_items,
                )
                chunk_tokens = sum(tokens[i] for i in chunk)
                weight = micro_batch_weight(config.loss_type, len(chunk), chunk_tokens, len(writes), total_tokens)
                (loss * weight).backward()
                share = chunk_tokens / total_tokens
                totals["loss"] += float(loss.detach()) * weight
                totals["clip_fraction"] += stats["clip_fraction"] * share
                totals["ratio_mean"] += stats["ratio_mean"] * share
                totals["kl"] += stats.get("kl_mean", 0.0) * share
            _average_gradients(params)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm))
            if epoch == 0:
                first = totals
            if step:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    finally:
        policy.model.eval()
    return {**first, "grad_norm": grad_norm, "completion_tokens": float(total_tokens)}


# ---- the trainer -------------------------------------------------------------------------------------------------
class MemoPilotTrainer:
    """Holds the writer, the frozen player and the optimiser; `train()` runs the remaining steps."""

    def __init__(
        self, config: MemoPilotTrainConfig, *, player: Player | None = None, progress: Progress | None = None
    ) -> None:
        import torch

        from ttlearn.llm.hf import HFPolicy, LoraOptions

        self.config, self.progress = config, progress
        self.rank, self.world = _world()
        self.rollouts = rank_rollouts(config.group, self.rank, self.world)
        self.out = Path(config.out)
        for opponent in config.opponents:  # fail on a bad name or a changed experiment before any model loads
            self.make_env(opponent, config.seed)
        self._claim_run_directory()
        torch.manual_seed(config.seed)  # identical LoRA initialisation on every rank
        lora = LoraOptions(
            r=config.lora_r,
            alpha=config.lora_alpha,
            dropout=config.lora_dropout,
            target_modules=tuple(config.lora_targets),
        )
        self.policy = HFPolicy.from_source(config.writer_base, lora=lora)
        self.params = self.policy.trainable_parameters()
        _broadcast(self.params)
        self.optimizer = torch.optim.AdamW(self.params, lr=config.lr, weight_decay=0.0)
        probe_env = self.make_env(config.opponents[0], config.seed)
        self.player = player or make_player(config.player, make_llm, config.player_temperature, probe_env)[0]
        self.step = self._resume()
        self._no_memory: dict[tuple[str, int], float] = {}

    def make_env(self, opponent: str, seed: int) -> Any:
        cfg = self.config
        return make_env(cfg.env, **{**cfg.env_options, "opponent": opponent, "rounds": cfg.rounds, "seed": seed})

    # ---- rollouts -------------------------------------------------------------------------------------------------
    def rollout(
        self, sequence: int, opponent: str, seed: int, rollouts: Sequence[int], temperature: float, sample_seed: int
    ) -> tuple[list[Write], np.ndarray, float]:
        """Play `rollouts` (indices into the group) of one sequence: (writes, rewards [len, T−1], game-1 reward)."""
        cfg = self.config
        envs = [self.make_env(opponent, seed) for _ in rollouts]
        first = play_sequence_game(envs[0], self.player, fixed_memory(""), seed, 1)  # no memory: same in every rollout
        episodes, memories = [first] * len(rollouts), [""] * len(rollouts)
        rewards = np.zeros((len(rollouts), cfg.games - 1))
        writes: list[Write] = []
        for turn in range(1, cfg.games):
            prompts = [writer_messages(e.info["rules"], m, e, cfg.memory_words) for e, m in zip(episodes, memories)]
            samples = self.policy.sample(
                prompts,
                max_new_tokens=cfg.max_completion_length,
                temperature=temperature,
                seed=derive_seed(sample_seed, turn),
            )
            memories = [bound_memory(s.text, cfg.memory_chars) for s in samples]
            episodes = [
                play_sequence_game(env, self.player, fixed_memory(m), seed, turn + 1) for env, m in zip(envs, memories)
            ]
            rewards[:, turn - 1] = [e.score / cfg.rounds for e in episodes]
            writes += [Write(sequence, i, turn, s) for i, s in zip(rollouts, samples)]
        return writes, rewards, first.score / cfg.rounds

    def sequences(self, step: int) -> list[tuple[int, str, int]]:
        """(index, opponent, seed) of the step's training sequences; opponents cycle across steps."""
        n = self.config.sequences_per_step
        opponents = self.config.opponents
        return [
            (k, opponents[k % len(opponents)], derive_seed(self.config.seed, "sequence", k))
            for k in range(step * n, (step + 1) * n)
        ]

    # ---- one step -------------------------------------------------------------------------------------------------
    def train_step(self, step: int) -> dict[str, Any]:
        cfg = self.config
        start = time.perf_counter()
        writes: list[Write] = []
        rewards: dict[int, np.ndarray] = {}
        first_game = []
        for k, opponent, seed in self.sequences(step):
            mine, local, first = self.rollout(
                k, opponent, seed, self.rollouts, cfg.temperature, derive_seed(cfg.seed, "write", k, self.rank)
            )
            full = np.zeros((cfg.group, cfg.games - 1))
            full[self.rollouts] = local
            rewards[k] = _all_sum(full)
            writes += mine
            first_game.append(first)
        rollout_s = time.perf_counter() - start
        advantages = write_advantages(writes, rewards, cfg.scale_rewards)
        local_tokens = sum(len(w.sample.completion_ids) for w in writes)
        global_tokens = int(_all_sum(np.array([local_tokens]))[0])
        update_start = time.perf_counter()
        stats = policy_update(self.policy, self.optimizer, writes, advantages, cfg, global_tokens=global_tokens)
        update_s = time.perf_counter() - update_start
        processed = sum(len(w.sample.prompt_ids) + len(w.sample.completion_ids) for w in writes) * cfg.ppo_epochs
        table = np.stack(list(rewards.values()))  # [S, G, T−1]
        all_adv = np.concatenate([turn_level_advantages(r, scale=cfg.scale_rewards).ravel() for r in rewards.values()])
        metrics = {
            "step": step + 1,
            "sequences": [{"opponent": o, "seed": s} for _, o, s in self.sequences(step)],
            "reward_mean": table.mean(axis=(0, 1)).round(6).tolist(),
            "reward_std": table.std(axis=1, ddof=1).mean(axis=0).round(6).tolist(),
            "first_game_reward": float(np.mean(first_game)),
            "advantage_mean": float(all_adv.mean()),
            "advantage_std": float(all_adv.std()),
            "advantage_abs_mean": float(np.abs(all_adv).mean()),
            **{k: v for k, v in stats.items() if k != "kl" or cfg.beta},
            "tokens_per_s": processed / update_s,
            "rollout_s": rollout_s,
            "update_s": update_s,
            "wall_s": time.perf_counter() - start,
        }
        return metrics

    # ---- held-out evaluation --------------------------------------------------------------------------------------
    def evaluate(self, seeds: Sequence[int] | None = None) -> dict[str, float]:
        """Mean per-round reward of games 2..T on held-out seeds, greedy writer (`eval_memory`) vs no memory
        (`eval_none`), over every opponent × seed; the work is split across ranks."""
        cfg = self.config
        seeds = list(cfg.eval_seeds if seeds is None else seeds)
        if not seeds:
            raise ValueError("evaluation needs at least one seed")
        jobs = [(o, s) for o in cfg.opponents for s in seeds]
        sums = np.zeros((len(cfg.opponents), 2))
        for n, (opponent, seed) in enumerate(jobs):
            if n % self.world != self.rank:
                continue
            sums[cfg.opponents.index(opponent)] += self.heldout_rewards(opponent, seed)
        means = _all_sum(sums) / len(seeds)
        result = {"eval_memory": float(means[:, 0].mean()), "eval_none": float(means[:, 1].mean())}
        for opponent, (with_memory, without) in zip(cfg.opponents, means):
            result[f"eval_memory/{opponent}"], result[f"eval_none/{opponent}"] = float(with_memory), float(without)
        return result

    def heldout_rewards(self, opponent: str, seed: int) -> tuple[float, float]:
        """(greedy writer, no memory): mean per-round reward of games 2..T of one sequence."""
        _, rewards, _ = self.rollout(-1, opponent, seed, [0], 0.0, seed)
        return float(rewards.mean()), self._no_memory_reward(opponent, seed)

    def _no_memory_reward(self, opponent: str, seed: int) -> float:
        """Games 2..T with an empty memory; the frozen player makes it a constant, so it is computed once."""
        key = (opponent, seed)
        if key not in self._no_memory:
            env = self.make_env(opponent, seed)
            scores = [
                play_sequence_game(env, self.player, fixed_memory(""), seed, g).score for g in range(2, self.config.games + 1)
            ]
            self._no_memory[key] = float(np.mean(scores)) / self.config.rounds
        return self._no_memory[key]

    # ---- the loop -------------------------------------------------------------------------------------------------
    def train(self) -> list[dict[str, Any]]:
        """Run steps `self.step + 1 .. config.steps`; returns their metrics (also appended to metrics.jsonl)."""
        cfg = self.config
        done: list[dict[str, Any]] = []
        while self.step < cfg.steps:
            metrics = self.train_step(self.step)
            self.step += 1
            if cfg.eval_every and (self.step % cfg.eval_every == 0 or self.step == cfg.steps):
                metrics.update(self.evaluate())
            if self.step % cfg.save_every == 0 or self.step == cfg.steps:
                self._save(metrics)
            if self.rank == 0:
                with open(self.out / "metrics.jsonl", "a") as f:
                    f.write(json.dumps(metrics) + "\n")
            done.append(metrics)
            if self.progress is not None:
                self.progress(self.step, metrics)
        self._finalise()
        return done

    # ---- checkpoints ----------------------------------------------------------------------------------------------
    def checkpoint_dir(self, step: int) -> Path:
        return self.out / f"step_{step:04d}"

    def _save(self, metrics: dict[str, Any]) -> None:
        import torch

        if self.rank == 0:
            target = self.checkpoint_dir(self.step)
            scratch = self.out / f".{target.name}.partial"
            shutil.rmtree(scratch, ignore_errors=True)
            self.policy.save_adapter(scratch)
            torch.save(
                {
                    "step": self.step,
                    "optimizer": self.optimizer.state_dict(),
                    "torch_rng": torch.get_rng_state(),
                    "python_rng": random.getstate(),
                    "numpy_rng": np.random.get_state(),
                },
                scratch / STATE_FILE,
            )
            (scratch / "metrics.json").write_text(json.dumps(metrics, indent=2))
            shutil.rmtree(target, ignore_errors=True)
            os.replace(scratch, target)
        _barrier()

    def _finalise(self) -> None:
        last = self.checkpoint_dir(self.step)
        if self.rank == 0 and last.is_dir():
            final = self.out / "final"
            shutil.rmtree(final, ignore_errors=True)
            shutil.copytree(last, final, ignore=shutil.ignore_patterns(STATE_FILE))
        _barrier()

    def _claim_run_directory(self) -> None:
        """Write config.json, or check that the one already there describes the same experiment."""
        saved_config = self.out / "config.json"
        current = json.loads(self.config.model_dump_json())
        if saved_config.is_file():
            before = json.loads(saved_config.read_text())
            changed = sorted(
                k for k in set(before) | set(current) if k not in RESUMABLE and before.get(k) != current.get(k)
            )
            if changed:
                raise ValueError(
                    f"{self.out} holds a run with different settings ({', '.join(changed)}); "
                    "use another --out or the same settings"
                )
        _barrier()
        if self.rank == 0:
            self.out.mkdir(parents=True, exist_ok=True)
            saved_config.write_text(json.dumps(current, indent=2))
        _barrier()

    def _resume(self) -> int:
        """Load the newest complete checkpoint under `out`; the step to continue from (0 if none)."""
        import torch

        checkpoints = sorted(p for p in self.out.glob("step_*") if (p / STATE_FILE).is_file())
        if not checkpoints:
            return 0
        last = checkpoints[-1]
        self.policy.load_adapter(last)
        state = torch.load(last / STATE_FILE, weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        np.random.set_state(state["numpy_rng"])
        step = int(state["step"])
        if self.rank == 0:  # drop metrics of steps after the checkpoint (a crash between append and save)
            log = self.out / "metrics.jsonl"
            if log.is_file():
                kept = [line for line in log.read_text().splitlines() if json.loads(line)["step"] <= step]
                log.write_text("".join(line + "\n" for line in kept))
        _barrier()
        return step


def train_memopilot(config: MemoPilotTrainConfig, progress: Progress | None = None) -> list[dict[str, Any]]:
    """Train (or resume) a MemoPilot writer; under `accelerate launch` the process group is set up first."""
    from accelerate import PartialState

    # the writer lives on the CPU (HFPolicy keeps its tensors there), so the gradient all-reduce runs over gloo
    PartialState(cpu=True)  # initialises torch.distributed when launched with several processes
    return MemoPilotTrainer(config, progress=progress).train()
