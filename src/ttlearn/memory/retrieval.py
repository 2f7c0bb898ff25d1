"""MemRL's retrieval and Q update as pure functions (arXiv 2601.03192): the maths the `memrl` memory, its local and
remote stores and the memory service share, in a module of its own so none of them imports another's.

Retrieval is two-phase: phase A keeps the intent keys most similar to the query, phase B ranks their items by
similarity *and* learned Q. After a task, every item retrieved for it gets Q ← (1−α)Q + α·r.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ttlearn.memory.items import AffineUpdate, Candidate, Namespace

Z_CLIP = 3.0
DEFAULT_ALPHA = 0.3
"""The Q learning rate of the paper's released configs."""


def phase_a(sims: Sequence[float] | np.ndarray, delta: float, k1: int) -> np.ndarray:
    """Phase A, similarity recall: I_A = top-k1 { i : sim_i ≥ δ } by sim_i, best first (ties: lower index first)."""
    if k1 < 1:
        raise ValueError(f"k1 must be ≥ 1, got {k1}")
    sims = np.asarray(sims, dtype=np.float64)
    eligible = np.flatnonzero(sims >= delta)
    order = eligible[np.lexsort((eligible, -sims[eligible]))]
    return order[:k1]


@dataclass(frozen=True)
class PhaseB:
    chosen: list[int]
    """Indices into the candidates, in rank order (random order when `explored`)."""
    scores: list[float | None]
    """score_i per candidate; None for candidates dropped by q_min."""
    explored: bool


def phase_b(
    candidates: Sequence[tuple[float, float]],
    q_min: float,
    w_sim: float,
    w_q: float,
    sim_mean: float,
    sim_std: float,
    k2: int,
    epsilon: float,
    rng: np.random.Generator,
) -> PhaseB:
    """Phase B, utility ranking over the phase-A candidates' (sim, Q).

    For every candidate i (the released code normalises Q over all phase-A candidates, *before* the q_min filter):
        z_sim_i = (sim_i − sim_mean) / sim_std                        (fixed normalisation stats)
        z_Q_i   = clip((Q_i − mean Q) / std Q, −3, 3)                  (population std over all candidates; 0 if 0)
        score_i = w_sim · z_sim_i + w_q · z_Q_i
    then keep C = { i : Q_i ≥ q_min }. With probability ε return k2 items of C drawn uniformly without replacement
    (exploration), else the top-k2 of C by score (ties: lower index first). No random number is drawn when ε = 0,
    so ε = 0 is deterministic.
    """
    if k2 < 1:
        raise ValueError(f"k2 must be ≥ 1, got {k2}")
    if sim_std <= 0:
        raise ValueError(f"sim_std must be positive, got {sim_std}")
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    # Plain Python, not numpy: there are a handful of candidates and numpy's per-call overhead would dominate.
    scores: list[float | None] = [None] * len(candidates)
    if not candidates:
        return PhaseB([], scores, False)
    q_all = [q for _, q in candidates]
    q_mean = sum(q_all) / len(q_all)
    q_std = math.sqrt(sum((q - q_mean) ** 2 for q in q_all) / len(q_all))
    kept = [i for i, q in enumerate(q_all) if q >= q_min]
    for i in kept:
        z_q = min(Z_CLIP, max(-Z_CLIP, (q_all[i] - q_mean) / q_std)) if q_std > 0 else 0.0
        scores[i] = w_sim * (candidates[i][0] - sim_mean) / sim_std + w_q * z_q
    if not kept:
        return PhaseB([], scores, False)
    explored = epsilon > 0 and rng.random() < epsilon
    if explored:
        picks = [int(i) for i in rng.choice(kept, size=min(k2, len(kept)), replace=False)]
    else:
        picks = sorted(kept, key=lambda i: (-scores[i], i))[:k2]
    return PhaseB(picks, scores, bool(explored))


def q_update_rule(r: float, alpha: float) -> AffineUpdate:
    """Q ← (1 − α)·Q + α·r: the paper's Q ← (1 − α)·Q + α·(r + γ·max Q′) at γ = 0, its released setting (α = 0 leaves
    Q unchanged), as keep = 1 − α and add = α·r, which a database applies in one statement. Why γ is 0 here: see
    `memrl.MemRLMemory`."""
    return AffineUpdate(1.0 - alpha, alpha * r)


def q_update(q: float | np.ndarray, r: float, alpha: float) -> float | np.ndarray:
    """One Q update (`q_update_rule`) applied to `q`."""
    rule = q_update_rule(r, alpha)
    return rule.keep * q + rule.add


@dataclass(frozen=True)
class RetrievalConfig:
    """The retrieval settings. Defaults: the released BigCodeBench configuration (`memrl.PRESETS["bcb"]`)."""

    k1: int = 5
    k2: int = 5
    delta: float = 0.5
    q_min: float = -0.8
    w_sim: float = 0.5
    w_q: float = 0.5
    sim_mean: float = 0.31
    sim_std: float = 0.10
    epsilon: float = 0.1

    def __post_init__(self) -> None:
        if not 1 <= self.k2 <= self.k1:
            raise ValueError(f"need 1 ≤ k2 ≤ k1, got k1 = {self.k1}, k2 = {self.k2}")
        if self.sim_std <= 0:
            raise ValueError(f"sim_std must be positive, got {self.sim_std}")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {self.epsilon}")


def two_phase_retrieve(
    ns: Namespace, query: str | np.ndarray, cfg: RetrievalConfig, rng: np.random.Generator
) -> tuple[list[Candidate], PhaseB]:
    """Phase A over intent keys (their items inherit the key's similarity), then phase B over those items."""
    intent_ids, sims = ns.nearest(query, cfg.k1)
    keep = phase_a(sims, cfg.delta, cfg.k1)
    candidates = ns.items_of(intent_ids[keep], sims[keep])
    ranked = phase_b(
        [(c.sim, c.q_value) for c in candidates],
        cfg.q_min,
        cfg.w_sim,
        cfg.w_q,
        cfg.sim_mean,
        cfg.sim_std,
        cfg.k2,
        cfg.epsilon,
        rng,
    )
    return candidates, ranked


def reinforce(ns: Namespace, item_ids: Sequence[int], reward: float, alpha: float) -> dict[int, float]:
    """The update after a finished task, applied to every item retrieved for it (γ = 0: see `memrl.MemRLMemory`)."""
    return ns.update_q(item_ids, reward, q_update_rule(reward, alpha))


def commit_order(q0: float, updates: Sequence[tuple[float, float, float]]) -> list[int] | None:
    """The order in which a store applied one item's Q updates, from what each writer was answered: `updates` are
    (reward, alpha, Q after) and each Q after must be `q_update` of the one before, starting at `q0`. None when no
    order explains them: an update was lost (two computed from the same Q) or applied twice. Updates with equal
    reward and alpha are interchangeable, so taking any that fits never blocks a valid order."""
    waiting: dict[tuple[float, float, float], list[int]] = {}
    for i, (r, alpha, after) in enumerate(updates):
        waiting.setdefault((r, alpha, after), []).append(i)
    rules = sorted({(r, alpha) for r, alpha, _ in updates})
    order: list[int] = []
    q = q0
    while len(order) < len(updates):
        for r, alpha in rules:
            fits = waiting.get((r, alpha, float(q_update(q, r, alpha))))
            if fits:
                order.append(fits.pop())
                q = updates[order[-1]][2]
                break
        else:
            return None
    return order
