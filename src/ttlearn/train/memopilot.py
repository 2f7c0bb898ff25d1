"""Multi-turn GRPO over the MemoPilot memory writer G_θ (MemoPilot, arXiv 2606.08656, ICML 2026).

One training sequence = (opponent, seed). Its G rollouts each play T games: game 1 with no memory (the same game in
every rollout, so it is played once), then after game t the writer samples m_t ~ G_θ(· | e_t, m_{t−1}) — with the
exact prompt and length bound of `ttlearn.memory.memopilot` — and the frozen player plays game t+1 reading m_t.
The reward of write t is the per-round score of game t+1; advantages are turn-level and context-independent
(`turn_level_advantages` over the G rollouts of the sequence), and the loss is TRL's clipped GRPO loss on the tokens
of each write, with the sampling-time log-probs as the old policy.

Only the tokens the player sees are trained: the memory is cut to `memory_chars` after sampling, and the tokens past
the cut (`seen_token_count`) are dropped from the write, since no reward depends on them.

Data parallel: under `accelerate launch` or `torchrun` (one process per GPU, or several on the CPU) every rank plays
its share of the G rollouts, the reward matrix is summed across ranks so all ranks compute the same advantages, and
LoRA gradients are averaged before the optimiser step, so the weights stay identical everywhere. The run directory,
checkpoints and resume are the trainer base's (`ttlearn.train.base`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from ttlearn.envs.base import Env, make_env
from ttlearn.llm.base import make_llm
from ttlearn.memory.memopilot import seen_token_count, writer_messages
from ttlearn.memory.text import bound_memory
from ttlearn.players.base import Player
from ttlearn.rollout.inflight import map_in_flight
from ttlearn.rollout.loop import play_sequence_game
from ttlearn.rollout.parts import make_player
from ttlearn.seeding import derive_seed
from ttlearn.train.advantages import turn_level_advantages
from ttlearn.train.base import Progress, TrainConfig, Trainer, this_device, world
from ttlearn.train.loss import LOSS_TYPES
from ttlearn.types import NoteAt

if TYPE_CHECKING:
    import torch

    from ttlearn.llm.hf import HFPolicy, Sample


def fixed_memory(text: str) -> Callable[[str], str]:
    """The memory the frozen player sees during a training game: one text, whatever the situation."""
    return lambda task: text


class MemoPilotTrainConfig(TrainConfig):
    """`ttlearn train memopilot` options. Writer length limits default to those of the `memopilot` memory."""

    resumable: ClassVar[frozenset[str]] = TrainConfig.resumable | {"eval_every", "eval_seeds", "concurrency"}

    env: str = Field("rps", description="Environment of the training games.")
    env_options: dict[str, Any] = Field(
        default_factory=dict, description="Environment options (not opponent, rounds or seed)."
    )
    opponents: list[str] = Field(
        default_factory=lambda: ["cycle3", "beat-last", "biased"], min_length=1, description="Training opponents."
    )
    games: int = Field(4, ge=2, description="T: games per rollout; the writes after games 1..T-1 are trained.")
    rounds: int = Field(10, ge=1, description="Rounds per game.")
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
    ppo_epochs: int = Field(1, ge=1, description="Optimiser steps on each batch of writes.")
    micro_batch: int = Field(4, ge=1, description="Writes per forward/backward pass.")
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
    eval_every: int = Field(10, ge=0, description="Held-out evaluation every N steps (0: never).")
    eval_seeds: list[int] = Field(default_factory=lambda: [1000, 1001], description="Seeds of the held-out sequences.")

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
def _all_sum(array: np.ndarray, device: torch.device) -> np.ndarray:
    """The element-wise sum over ranks, reduced on `device` (NCCL reduces only GPU tensors, gloo CPU ones)."""
    import torch
    import torch.distributed as dist

    if world()[1] == 1:
        return array
    tensor = torch.tensor(array, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.cpu().numpy()


def _average_gradients(params: Sequence[torch.nn.Parameter]) -> None:
    import torch.distributed as dist

    processes = world()[1]
    if processes == 1:
        return
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= processes


def _broadcast(params: Sequence[torch.nn.Parameter]) -> None:
    import torch.distributed as dist

    if world()[1] > 1:
        for p in params:
            dist.broadcast(p.data, src=0)


# ---- the policy update -------------------------------------------------------------------------------------------
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

    from ttlearn.llm.hf import pad_rows
    from ttlearn.train.loss import policy_loss

    if not writes:
        raise ValueError("policy_update needs at least one write")
    processes = world()[1]
    params = policy.trainable_parameters()
    tokens = [len(w.sample.completion_ids) for w in writes]
    total_tokens = sum(tokens)
    num_items = (global_tokens or total_tokens * processes) / processes  # TRL: the batch's tokens per process
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
                old, _ = pad_rows([s.logprobs for s in batch], 0.0, left=False, device=logp.device, dtype=logp.dtype)
                loss, stats = policy_loss(
                    logp,
                    old,
                    torch.tensor(advantages[list(chunk)], dtype=logp.dtype, device=logp.device),
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
def seen_part(policy: HFPolicy, sample: Sample, max_chars: int) -> Sample:
    """The sample cut to the tokens the player sees (`seen_token_count`), log-probs alike."""
    ids = sample.completion_ids
    prefixes = [policy.tokenizer.decode(ids[: k + 1], skip_special_tokens=True) for k in range(len(ids))]
    seen = seen_token_count(prefixes, max_chars)
    return dataclasses.replace(sample, completion_ids=ids[:seen], logprobs=sample.logprobs[:seen])


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
        from accelerate import PartialState

        # initialises torch.distributed when launched with several processes: NCCL between GPUs, gloo between CPUs
        PartialState(cpu=this_device(config.device).name == "cpu")
        rank, processes = world()
        self.rollouts = rank_rollouts(config.group, rank, processes)
        for opponent in config.opponents:  # fail on a bad name before any model loads
            self.make_env(config, opponent, config.seed)
        super().__init__(config, progress=progress, policy=policy)
        _broadcast(self.params)
        probe_env = self.make_env(config, config.opponents[0], config.seed)
        self.player = player or make_player(
            config.player, make_llm, config.player_temperature, probe_env, note_at=config.note_at
        )[0]
        self._no_memory: dict[tuple[str, int], float] = {}

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
        return make_env(cfg.env, **{**cfg.env_options, "opponent": opponent, "rounds": cfg.rounds, "seed": seed})

    # ---- rollouts -------------------------------------------------------------------------------------------------
    def rollout(
        self, sequence: int, opponent: str, seed: int, rollouts: Sequence[int], temperature: float, sample_seed: int
    ) -> tuple[list[Write], np.ndarray, float]:
        """Play `rollouts` (indices into the group) of one sequence: (writes, rewards [len, T−1], game-1 reward)."""
        cfg = self.config
        envs = [self.make_env(cfg, opponent, seed) for _ in rollouts]
        first = play_sequence_game(envs[0], self.player, fixed_memory(""), seed, 1)  # no memory: same in every rollout
        episodes, memories = [first] * len(rollouts), [""] * len(rollouts)
        self.played.append(first)
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
            episodes = map_in_flight(
                lambda pair: play_sequence_game(pair[0], self.player, fixed_memory(pair[1]), seed, turn + 1),  # noqa: B023
                list(zip(envs, memories)),
                cfg.concurrency,
            )
            self.played.extend(episodes)
            rewards[:, turn - 1] = [e.score / cfg.rounds for e in episodes]
            seen = [seen_part(self.policy, s, cfg.memory_chars) for s in samples]
            writes += [Write(sequence, i, turn, s) for i, s in zip(rollouts, seen)]
        return writes, rewards, first.score / cfg.rounds

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
        writes: list[Write] = []
        rewards: dict[int, np.ndarray] = {}
        first_game = []
        for k, opponent, seed in self.sequences(step):
            mine, local, first = self.rollout(
                k, opponent, seed, self.rollouts, cfg.temperature, derive_seed(cfg.seed, "write", k, self.rank)
            )
            full = np.zeros((cfg.group, cfg.games - 1))
            full[self.rollouts] = local
            rewards[k] = _all_sum(full, self.policy.device)
            writes += mine
            first_game.append(first)
        rollout_s = time.perf_counter() - start
        advantages = write_advantages(writes, rewards, cfg.scale_rewards)
        local_tokens = sum(len(w.sample.completion_ids) for w in writes)
        global_tokens = int(_all_sum(np.array([local_tokens]), self.policy.device)[0])
        update_start = time.perf_counter()
        stats = policy_update(self.policy, self.optimizer, writes, advantages, cfg, global_tokens=global_tokens)
        update_s = time.perf_counter() - update_start
        processed = sum(len(w.sample.prompt_ids) + len(w.sample.completion_ids) for w in writes) * cfg.ppo_epochs
        table = np.stack(list(rewards.values()))  # [S, G, T−1]
        all_adv = np.concatenate([turn_level_advantages(r, scale=cfg.scale_rewards).ravel() for r in rewards.values()])
        metrics = {
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
        if cfg.eval_every and (step % cfg.eval_every == 0 or step == cfg.steps):
            metrics.update(self.evaluate())
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
        means = _all_sum(sums, self.policy.device) / len(seeds)
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
            env = self.make_env(self.config, opponent, seed)
            games = range(2, self.config.games + 1)
            scores = [play_sequence_game(env, self.player, fixed_memory(""), seed, g).score for g in games]
            self._no_memory[key] = float(np.mean(scores)) / self.config.rounds
        return self._no_memory[key]
