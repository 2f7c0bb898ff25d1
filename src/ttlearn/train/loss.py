"""The clipped policy-gradient loss of GRPO / PPO, numerically the same as TRL's `GRPOTrainer` (TRL 1.16).

Both trainers use it: MemoPilot with one advantage per memory write (shape [B]), LaMer with per-token advantages
(shape [B, L]) when one sequence carries several steps. Everything is per token, masked, then aggregated the way
TRL's `loss_type` says, so a run here and a run with TRL optimise the same number. torch is imported inside the
function, so the trainer registry (which imports this package) lists trainers without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo", "dapo")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    beta: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    loss_type: LossType = "grpo",
    max_completion_length: int | None = None,
    num_items_in_batch: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate with an optional KL penalty, per token (all tensors [B, L]; advantages [B] or [B, L]):

    ℓ = −min(ρ·A, clip(ρ, 1 − ε, 1 + ε_high)·A) + β·KL,   ρ = exp(logp − old_logp),
    KL = exp(ref − logp) − (ref − logp) − 1   (Schulman's k3 estimator; computed only when β ≠ 0).

    Aggregated over the tokens where mask = 1:
      "grpo":    mean over each sequence's tokens, then mean over sequences (favours short sequences),
      "bnpo":    Σ ℓ / number of tokens in this batch,
      "dr_grpo": Σ ℓ / (B · max_completion_length)   (default max_completion_length: L, the padded length),
      "dapo":    Σ ℓ / num_items_in_batch, the token count of the whole generation batch, so that micro-batches of
                 one generation step sum to the token mean over it (default: this batch's tokens, i.e. "bnpo").
    `old_logp=None` means on-policy (ρ = 1 in value, gradient of logp). ε_high defaults to ε (DAPO raises it).
    Returns the loss and detached stats: clip_fraction (tokens whose clipped branch is active: ρ < 1 − ε with A < 0
    or ρ > 1 + ε_high with A > 0), ratio_mean, and kl_mean when β ≠ 0.
    """
    import torch

    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if logp.dim() != 2 or mask.shape != logp.shape:
        raise ValueError(f"logp and mask must both be [B, L], got {tuple(logp.shape)} and {tuple(mask.shape)}")
    old_logp = logp.detach() if old_logp is None else old_logp
    if old_logp.shape != logp.shape:
        raise ValueError(f"old_logp {tuple(old_logp.shape)} must match logp {tuple(logp.shape)}")
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    if advantages.shape not in (logp.shape, (logp.shape[0], 1)):
        raise ValueError(
            f"advantages must be [B] or [B, L] for logp {tuple(logp.shape)}, got {tuple(advantages.shape)}"
        )
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    if beta != 0.0 and (ref_logp is None or ref_logp.shape != logp.shape):
        raise ValueError("beta != 0 needs ref_logp with the shape of logp")
    mask = mask.to(logp.dtype)

    ratio = torch.exp(logp - old_logp)
    clipped_ratio = torch.clamp(ratio, 1 - epsilon, 1 + epsilon_high)
    per_token = -torch.min(ratio * advantages, clipped_ratio * advantages)
    if beta != 0.0:
        kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
        per_token = per_token + beta * kl

    masked_sum = (per_token * mask).sum()
    if loss_type == "grpo":
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        loss = masked_sum / mask.sum().clamp(min=1.0)
    elif loss_type == "dr_grpo":
        loss = masked_sum / (logp.shape[0] * (max_completion_length or logp.shape[1]))
    else:  # "dapo"
        tokens = mask.sum() if num_items_in_batch is None else mask.new_tensor(float(num_items_in_batch))
        loss = masked_sum / tokens.clamp(min=1.0)

    def token_mean(values: torch.Tensor) -> float:
        return float((values.detach() * mask).sum() / mask.sum().clamp(min=1.0))

    clipped = ((ratio < 1 - epsilon) & (advantages < 0)) | ((ratio > 1 + epsilon_high) & (advantages > 0))
    stats = {"clip_fraction": token_mean(clipped.to(logp.dtype)), "ratio_mean": token_mean(ratio)}
    if beta != 0.0:
        stats["kl_mean"] = token_mean(kl)
    return loss, stats
