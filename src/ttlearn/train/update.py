"""The one policy-gradient step of every trainer: `policy_loss` (`train.loss`) on sampled rows, in micro-batches, data
parallel under `accelerate`.

A row is what the policy sampled: a `Sample` (its completion tokens at the sampling temperature) or a `Choice`
(one decision among scored answers, a sequence of one "token", log π(a | s)). The old policy of the ratio is the
log-probs recorded when the row was sampled.

Micro-batches change nothing but memory: the rows are split into micro-batches c of `micro_batch` rows, each
backpropagated as w_c · ℓ_c with ℓ_c = `policy_loss` on c, and w_c (`micro_batch_weight`) makes Σ_c w_c · ℓ_c the
loss of the whole batch, so the gradient is the whole batch's however the rows are split.

Data parallel: each process holds its share of the batch, scores it through `accelerate`'s prepared scorer
(`scorer_module`; a DistributedDataParallel under a launcher) and backpropagates; the wrapper averages the gradients
over the P processes on the last micro-batch's backward (the others run under `no_sync`), so every process takes the
same optimiser step. The weights are chosen so that the average is the one-process gradient: "grpo" and "dr_grpo"
count rows against the batch's rows per process (`batch_rows` / P), "dapo" tokens against its tokens per process
(`batch_tokens` / P: TRL's `num_items_in_batch`), "bnpo" against the process's own tokens (as TRL).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ttlearn.llm.hf import Sample, pad_rows
from ttlearn.train.loss import LOSS_TYPES, LossType
from ttlearn.train.parallel import reduced

if TYPE_CHECKING:
    import torch
    from accelerate import Accelerator

    from ttlearn.llm.hf import HFPolicy


@dataclass(frozen=True)
class Choice:
    """One decision sampled from π(a | s) = softmax_a(score(a) / T) over `answers` (token ids), with score(a) =
    Σ_k log p(a_k | prompt, a_<k) (`HFPolicy.choice_scores`); `logprob` = log π(chosen | s) when it was sampled."""

    prompt_ids: tuple[int, ...]
    answers: tuple[tuple[int, ...], ...]
    chosen: int
    logprob: float


Row = Sample | Choice


@dataclass(frozen=True)
class UpdateSettings:
    """What the step computes: the sampling temperature, the clipped loss (`policy_loss`'s options), the optimiser
    steps per batch, the gradient clip, and the rows per forward / backward pass (memory only)."""

    temperature: float
    max_grad_norm: float
    micro_batch: int
    ppo_epochs: int = 1
    epsilon: float = 0.2
    epsilon_high: float | None = None
    beta: float = 0.0
    loss_type: LossType = "grpo"
    max_completion_length: int | None = None

    @classmethod
    def of(cls, config: Any) -> UpdateSettings:
        """The settings a trainer's config names; those it does not name keep the defaults above (TRL's)."""
        return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls) if hasattr(config, f.name)})


def choice_logprobs(
    policy: HFPolicy, prompt: Sequence[int], answers: Sequence[Sequence[int]], temperature: float
) -> torch.Tensor:
    """log π(a | prompt) = log_softmax_a(score(a) / T), score by `HFPolicy.choice_scores` (gradients flow)."""
    import torch

    return torch.log_softmax(policy.choice_scores(prompt, answers) / temperature, dim=0)


def tokens_of(row: Row) -> int:
    """The tokens a row trains: a sample's completion, one for a choice."""
    return len(row.completion_ids) if isinstance(row, Sample) else 1


def row_logprobs(policy: HFPolicy, rows: Sequence[Row], temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs [B, L] with gradients, mask [B, L]) of the rows in order, right-padded: the samples' completion
    tokens by one `sequence_logprobs` call (shared prompts evaluated once), each choice as one token."""
    import torch
    from torch.nn.functional import pad

    samples = [r for r in rows if isinstance(r, Sample)]
    if samples:
        logp, mask = policy.sequence_logprobs(
            [s.prompt_ids for s in samples], [s.completion_ids for s in samples], temperature
        )
        if len(samples) == len(rows):
            return logp, mask
    width = max(tokens_of(r) for r in rows)
    values, masks, scored = [], [], iter(zip(logp, mask) if samples else ())
    for row in rows:
        if isinstance(row, Sample):
            row_logp, row_mask = next(scored)
            values.append(pad(row_logp, (0, width - len(row_logp))))
            masks.append(pad(row_mask, (0, width - len(row_mask))))
        else:
            value = choice_logprobs(policy, row.prompt_ids, row.answers, temperature)[row.chosen]
            values.append(pad(value.reshape(1), (0, width - 1)))
            masks.append(torch.arange(width, device=value.device) == 0)
    return torch.stack(values), torch.stack(masks)


def old_logprobs(rows: Sequence[Row], like: torch.Tensor) -> torch.Tensor:
    """The log-probs recorded when the rows were sampled, padded as `row_logprobs` pads (the ratio's old policy)."""
    recorded = [r.logprobs if isinstance(r, Sample) else (r.logprob,) for r in rows]
    return pad_rows(recorded, 0.0, left=False, device=like.device, dtype=like.dtype)[0]


def base_logprobs(policy: HFPolicy, rows: Sequence[Row], temperature: float) -> torch.Tensor:
    """The rows' log-probs under the frozen base policy (adapters off), without gradients: the reference of the KL
    term and of a reported KL."""
    import torch

    with torch.no_grad(), policy.adapters_disabled():
        return row_logprobs(policy, rows, temperature)[0]


def scorer_module(policy: HFPolicy) -> torch.nn.Module:
    """`row_logprobs` as one module call, for `accelerate` to prepare: a data-parallel wrapper synchronises gradients
    once per forward, and the scorer's forward scores a whole micro-batch."""
    import torch

    class RowScorer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = policy.model

        def forward(self, rows: Sequence[Row], temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
            return row_logprobs(policy, rows, temperature)

    return RowScorer()


def micro_batch_weight(loss_type: str, rows: int, tokens: int, total_rows: float, total_tokens: float) -> float:
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


def policy_update(
    policy: HFPolicy,
    optimizer: torch.optim.Optimizer,
    rows: Sequence[Row],
    advantages: np.ndarray,
    settings: UpdateSettings,
    *,
    accelerator: Accelerator | None = None,
    scorer: torch.nn.Module | None = None,
    batch_rows: int | None = None,
    batch_tokens: int | None = None,
    step: bool = True,
) -> dict[str, float]:
    """`ppo_epochs` optimiser steps of `policy_loss` on this process's rows, advantages[i] for rows[i].

    With an `accelerator` the log-probs come from its prepared `scorer` and the gradients are averaged over the
    processes on the last micro-batch's backward; without one, from the policy directly. `batch_rows`,
    `batch_tokens`: the rows and tokens of the whole batch over all processes (default: this process's times the
    processes). Returns the first epoch's loss stats (the numbers a resumed run must reproduce; averaged over the
    processes, they are the whole batch's) and the last step's gradient norm. `step=False` computes loss and
    gradients only (tests, benchmarks), left in the parameters' `.grad`."""
    import torch

    from ttlearn.train.loss import policy_loss

    if not rows:
        raise ValueError("policy_update needs at least one row")
    processes = accelerator.num_processes if accelerator else 1
    score: Callable[..., tuple[torch.Tensor, torch.Tensor]] = scorer or (
        lambda part, temperature: row_logprobs(policy, part, temperature)
    )
    tokens = [tokens_of(r) for r in rows]
    total_tokens = sum(tokens)
    rows_per_process = (batch_rows or len(rows) * processes) / processes
    num_items = (batch_tokens or total_tokens * processes) / processes  # TRL: the batch's tokens per process
    size = settings.micro_batch
    chunks = [range(i, min(i + size, len(rows))) for i in range(0, len(rows), size)]
    refs: list[torch.Tensor | None] = [None] * len(chunks)
    if settings.beta:
        refs = [base_logprobs(policy, [rows[i] for i in c], settings.temperature) for c in chunks]
    first: dict[str, float] = {}
    policy.model.train()
    try:
        for epoch in range(settings.ppo_epochs):
            optimizer.zero_grad(set_to_none=True)
            totals = {"loss": 0.0, "clip_fraction": 0.0, "ratio_mean": 0.0, "kl": 0.0}
            for n, (chunk, ref) in enumerate(zip(chunks, refs)):
                part = [rows[i] for i in chunk]
                last = n == len(chunks) - 1
                with accelerator.no_sync(scorer) if accelerator and not last else contextlib.nullcontext():
                    logp, mask = score(part, settings.temperature)
                    loss, stats = policy_loss(
                        logp,
                        old_logprobs(part, logp),
                        torch.tensor(advantages[list(chunk)], dtype=logp.dtype, device=logp.device),
                        mask,
                        epsilon=settings.epsilon,
                        epsilon_high=settings.epsilon_high,
                        beta=settings.beta,
                        ref_logp=ref,
                        loss_type=settings.loss_type,
                        max_completion_length=settings.max_completion_length,
                        num_items_in_batch=num_items,
                    )
                    chunk_tokens = sum(tokens[i] for i in chunk)
                    weight = micro_batch_weight(
                        settings.loss_type, len(chunk), chunk_tokens, rows_per_process, total_tokens
                    )
                    if accelerator:
                        accelerator.backward(loss * weight)
                    else:
                        (loss * weight).backward()
                share = chunk_tokens / total_tokens
                totals["loss"] += float(loss.detach()) * weight
                totals["clip_fraction"] += stats["clip_fraction"] * share
                totals["ratio_mean"] += stats["ratio_mean"] * share
                totals["kl"] += stats.get("kl_mean", 0.0) * share
            clip = accelerator.clip_grad_norm_ if accelerator else torch.nn.utils.clip_grad_norm_
            grad_norm = float(clip(policy.trainable_parameters(), settings.max_grad_norm))
            if epoch == 0:  # each process's loss is its share of the averaged gradient's: their mean is the batch's
                means = reduced(accelerator, np.array(list(totals.values())), policy.device, "mean")
                first = dict(zip(totals, means.tolist()))
            if step:
                optimizer.step()
    finally:
        policy.model.eval()
    return {**first, "grad_norm": grad_norm, "completion_tokens": float(total_tokens)}
