"""Bradley–Terry ratings on an Elo scale from paired results, with block-bootstrap confidence intervals.

Why this shape: online Elo depends on the order of games, a maximum-likelihood Bradley–Terry fit does
not. Methods are compared only on *paired* games — same opponent, seed and game index — so card or instance luck
cancels. Games of one sequence (opponent, seed) share a learning trajectory and are dependent, so the honest
confidence interval resamples whole sequences (block bootstrap), not single battles.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

import numpy as np

DEFAULT_PRIOR = 0.1


@dataclass(frozen=True)
class GameResult:
    """One recorded game of one method: the unit `battles_from_results` pairs up."""

    method: str
    opponent: str
    seed: int
    game: int
    score: float


@dataclass(frozen=True)
class Battle:
    """Method `a` against method `b` on one paired game; `score_a` is 1 (a won), 0.5 (tie) or 0 (b won).

    `sequence` = (opponent, seed) names the block of dependent games the battle belongs to.
    """

    a: str
    b: str
    score_a: float
    sequence: Hashable


def battles_from_results(results: Iterable[GameResult | Mapping[str, Any]]) -> list[Battle]:
    """A battle for every pair of methods that played the same (opponent, seed, game): higher score wins, ties half.

    Results may be `GameResult`s or mappings with the same keys (records read back from disk). Games that only one
    method played make no battle.
    """
    by_game: dict[tuple[str, int, int], dict[str, float]] = defaultdict(dict)
    for record in results:
        r = record if isinstance(record, GameResult) else GameResult(**record)
        scores = by_game[(r.opponent, r.seed, r.game)]
        if r.method in scores:
            raise ValueError(
                f"method {r.method!r} has two results for opponent {r.opponent!r}, seed {r.seed}, game {r.game}"
            )
        scores[r.method] = float(r.score)
    battles = []
    for (opponent, seed, _game), scores in by_game.items():
        for a, b in combinations(sorted(scores), 2):
            score_a = 1.0 if scores[a] > scores[b] else 0.0 if scores[a] < scores[b] else 0.5
            battles.append(Battle(a, b, score_a, (opponent, seed)))
    return battles


@dataclass(frozen=True)
class _Encoded:
    """Battles as index arrays, so a bootstrap replicate is a re-weighting rather than a rebuild."""

    methods: list[str]
    a: np.ndarray
    b: np.ndarray
    score_a: np.ndarray

    @classmethod
    def of(cls, battles: list[Battle]) -> _Encoded:
        if not battles:
            raise ValueError("no battles given")
        bad = [x for x in battles if x.score_a not in (0.0, 0.5, 1.0) or x.a == x.b]
        if bad:
            raise ValueError(f"a battle needs two different methods and score_a in {{0, 0.5, 1}}, got {bad[0]}")
        methods = sorted({x.a for x in battles} | {x.b for x in battles})
        index = {m: i for i, m in enumerate(methods)}
        return cls(
            methods,
            np.array([index[x.a] for x in battles]),
            np.array([index[x.b] for x in battles]),
            np.array([x.score_a for x in battles]),
        )

    def wins(self, weights: np.ndarray | None = None) -> np.ndarray:
        """W[i, j] = points i scored against j (ties half), each battle counted `weights` times."""
        m = len(self.methods)
        w = np.ones(self.a.size) if weights is None else weights
        won = np.bincount(self.a * m + self.b, weights=w * self.score_a, minlength=m * m)
        lost = np.bincount(self.b * m + self.a, weights=w * (1.0 - self.score_a), minlength=m * m)
        return (won + lost).reshape(m, m)


def _log_likelihood(theta: np.ndarray, wins: np.ndarray) -> float:
    """ℓ(θ) = Σ_{i≠j} W_ij · log σ(θ_i − θ_j), with log σ(x) = −log(1 + e^{−x})."""
    diff = theta[:, None] - theta[None, :]
    return float(-(wins * np.logaddexp(0.0, -diff)).sum())


def _fit_log_strengths(wins: np.ndarray, prior: float) -> np.ndarray:
    """Maximise ℓ(θ) + prior-ties by Newton's method; returns natural-log strengths θ with mean 0.

    The prior adds `prior` virtual tied games to every pair (prior/2 points each way), a symmetric pull towards equal
    strengths that keeps an undefeated method finite. Newton step: L Δ = g with gradient g_i = Σ_j (W_ij − N_ij σ_ij),
    N = W + Wᵀ, σ_ij = σ(θ_i − θ_j), and L the Laplacian of weights N_ij σ_ij σ_ji (= −Hessian); the system is solved
    as (L + 11ᵀ) Δ = g, which fixes the free shift of θ. Backtracking keeps each step uphill (ℓ is concave).
    """
    m = wins.shape[0]
    w = wins + prior / 2 * (1.0 - np.eye(m))
    games = w + w.T
    theta = np.zeros(m)
    current = _log_likelihood(theta, w)
    for _ in range(100):
        sigma = 1.0 / (1.0 + np.exp(theta[None, :] - theta[:, None]))
        gradient = (w - games * sigma).sum(axis=1)
        weights = games * sigma * sigma.T
        laplacian = np.diag(weights.sum(axis=1)) - weights
        step = np.linalg.solve(laplacian + np.ones((m, m)), gradient)
        t = 1.0
        while (candidate := _log_likelihood(theta + t * step, w)) < current - 1e-12 and t > 1e-8:
            t /= 2
        theta, current = theta + t * step, candidate
        if np.abs(t * step).max() < 1e-10:
            break
    return theta - theta.mean()


def _reachable_from_first(adjacency: np.ndarray) -> np.ndarray:
    seen = np.zeros(len(adjacency), dtype=bool)
    seen[0] = True
    frontier = seen.copy()
    while frontier.any():
        frontier = adjacency[frontier].any(axis=0) & ~seen
        seen |= frontier
    return seen


def _check_identifiable(encoded: _Encoded, wins: np.ndarray, prior: float) -> None:
    """Refuse fits whose answer would come from the prior alone, or would not exist at all.

    Connected comparison graph: otherwise gaps between the parts are set by the prior, not by data. With prior 0 the
    MLE exists only if the graph "i scored a point against j" is strongly connected (Zermelo / Ford, 1957).
    """
    methods = encoded.methods
    connected = _reachable_from_first((wins + wins.T) > 0)
    if not connected.all():
        apart = [m for m, reached in zip(methods, connected) if not reached]
        raise ValueError(
            f"the comparison graph is disconnected: {apart} never meet {methods[0]!r} through paired "
            "games, so their rating gap is undefined"
        )
    scored = wins > 0
    if prior == 0 and not (_reachable_from_first(scored).all() and _reachable_from_first(scored.T).all()):
        raise ValueError(
            "with prior=0 the maximum-likelihood ratings diverge (some group of methods won or lost "
            "every battle against the rest); use prior > 0"
        )


def _to_elo(
    theta: np.ndarray, methods: list[str], scale: float, base: float, anchor: float, anchor_method: str | None
) -> np.ndarray:
    """R_i = anchor + scale · log_base(p_i) − shift, p_i = e^{θ_i}; the shift makes mean(R) = anchor, or
    R_{anchor_method} = anchor."""
    elo = scale * theta / math.log(base)
    reference = elo.mean(axis=-1, keepdims=True) if anchor_method is None else elo[..., [methods.index(anchor_method)]]
    return anchor + elo - reference


def _check_scale(scale: float, base: float, anchor_method: str | None, methods: list[str], prior: float) -> None:
    if scale <= 0 or base <= 1:
        raise ValueError(f"need scale > 0 and base > 1, got scale={scale}, base={base}")
    if prior < 0:
        raise ValueError(f"prior must be >= 0, got {prior}")
    if anchor_method is not None and anchor_method not in methods:
        raise ValueError(f"anchor_method {anchor_method!r} is not among the rated methods {methods}")


def bradley_terry(
    battles: list[Battle],
    scale: float = 400.0,
    base: float = 10.0,
    anchor: float = 1000.0,
    anchor_method: str | None = None,
    prior: float = DEFAULT_PRIOR,
) -> dict[str, float]:
    """Maximum-likelihood Bradley–Terry ratings on the Elo scale, best first.

    Model: P(i beats j) = p_i / (p_i + p_j); a tie counts as half a win for each side. Reported as
    R_i = anchor + scale · log_base(p_i), so a gap of `scale` means odds of `base` : 1 (400 Elo ↔ 10 : 1, i.e. a
    91 % expected score). The mean rating is `anchor`, or `anchor_method` is pinned to it. `prior` virtual tied
    games per pair keep an undefeated method finite (0.1 moves a 1,000-battle fit by well under 1 Elo).
    """
    encoded = _Encoded.of(battles)
    _check_scale(scale, base, anchor_method, encoded.methods, prior)
    wins = encoded.wins()
    _check_identifiable(encoded, wins, prior)
    ratings = _to_elo(_fit_log_strengths(wins, prior), encoded.methods, scale, base, anchor, anchor_method)
    return dict(sorted(zip(encoded.methods, ratings.tolist()), key=lambda item: -item[1]))


def bootstrap_ci(
    battles: list[Battle],
    n_boot: int = 1000,
    block: Literal["sequence", "battle"] = "sequence",
    seed: int = 0,
    level: float = 0.95,
    scale: float = 400.0,
    base: float = 10.0,
    anchor: float = 1000.0,
    anchor_method: str | None = None,
    prior: float = DEFAULT_PRIOR,
) -> dict[str, tuple[float, float]]:
    """Percentile bootstrap confidence intervals of the Bradley–Terry Elo ratings, per method.

    Each replicate draws as many blocks as there are, with replacement, and refits: block="sequence" resamples
    whole (opponent, seed) sequences, so the dependence between games of one sequence is kept; block="battle"
    resamples single battles and understates the width when games are dependent. The interval is the
    [(1 − level)/2, (1 + level)/2] quantiles of the replicate ratings. Needs prior > 0, because a replicate may
    well contain an undefeated method.
    """
    if block not in ("sequence", "battle"):
        raise ValueError(f"block must be 'sequence' or 'battle', got {block!r}")
    if not isinstance(n_boot, int) or n_boot < 2:
        raise ValueError(f"n_boot must be an integer >= 2, got {n_boot!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    if prior <= 0:
        raise ValueError("bootstrap needs prior > 0: a replicate can contain an undefeated method")
    encoded = _Encoded.of(battles)
    _check_scale(scale, base, anchor_method, encoded.methods, prior)
    _check_identifiable(encoded, encoded.wins(), prior)
    if block == "sequence":
        ids: dict[Hashable, int] = {}
        block_of = np.array([ids.setdefault(x.sequence, len(ids)) for x in battles])
    else:
        block_of = np.arange(len(battles))
    n_blocks = int(block_of.max()) + 1
    rng = np.random.default_rng(seed)
    thetas = np.empty((n_boot, len(encoded.methods)))
    for r in range(n_boot):
        drawn = rng.multinomial(n_blocks, np.full(n_blocks, 1.0 / n_blocks))
        thetas[r] = _fit_log_strengths(encoded.wins(drawn[block_of].astype(float)), prior)
    ratings = _to_elo(thetas, encoded.methods, scale, base, anchor, anchor_method)
    low, high = np.quantile(ratings, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return {m: (float(lo), float(hi)) for m, lo, hi in zip(encoded.methods, low, high)}


def win_matrix(battles: list[Battle]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(methods, rate, games): rate[i, j] = points i scored against j / games[i, j] (ties half); NaN where the
    pair never met, including the diagonal."""
    encoded = _Encoded.of(battles)
    wins = encoded.wins()
    games = wins + wins.T
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(games > 0, wins / games, np.nan)
    return encoded.methods, rate, games.astype(int)


def rank_with_ties(ratings: Mapping[str, float], cis: Mapping[str, tuple[float, float]]) -> dict[str, int]:
    """rank(i) = 1 + #{j : low_j > high_i}: one plus the number of methods *clearly* better than i.

    Methods whose intervals overlap are never ranked apart by each other, so a clear leader is 1 and a crowd of
    indistinguishable methods shares a number. Ranks can still differ between overlapping methods through a third
    one (A ≫ C, B ~ A, B ~ C gives A 1, B 1, C 2). Returned best first (by rating).
    """
    if set(ratings) != set(cis):
        raise ValueError(f"ratings and cis name different methods: {sorted(set(ratings) ^ set(cis))}")
    ranks = {m: 1 + sum(cis[o][0] > cis[m][1] for o in cis) for m in cis}
    return dict(sorted(ranks.items(), key=lambda item: (item[1], -ratings[item[0]])))
