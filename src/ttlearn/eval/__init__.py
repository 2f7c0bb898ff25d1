"""Evaluation from recorded runs: per-run metrics and Bradley–Terry ratings with bootstrap intervals."""

from ttlearn.eval.metrics import (
    cumulative_performance,
    mbb_per_hand,
    mean_ci,
    mean_pass_at_k,
    mean_trajectory_entropy,
    pass_at_k,
    success_at_k,
    trajectory_entropy,
)
from ttlearn.eval.rating import (
    Battle,
    GameResult,
    battles_from_results,
    bootstrap_ci,
    bradley_terry,
    rank_with_ties,
    win_matrix,
)

__all__ = [
    "Battle",
    "GameResult",
    "battles_from_results",
    "bootstrap_ci",
    "bradley_terry",
    "cumulative_performance",
    "mbb_per_hand",
    "mean_ci",
    "mean_pass_at_k",
    "mean_trajectory_entropy",
    "pass_at_k",
    "rank_with_ties",
    "success_at_k",
    "trajectory_entropy",
    "win_matrix",
]
