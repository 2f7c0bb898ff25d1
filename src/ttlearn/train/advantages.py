"""Advantages and returns: rewards in, one number per trained sample out.

Pure numpy, so trainers, tests and offline analyses share one implementation without importing torch. Every estimator
is one formula, stated in its docstring. Groups, trials and anchors are named by any hashable (int, str, tuple);
samples are flat arrays aligned with the rewards, which is how a trainer holds its batch.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Literal

import numpy as np

Scale = Literal["group", "batch", "none"]
SCALES: tuple[str, ...] = ("group", "batch", "none")


def _floats(name: str, values: Iterable[float], ndim: int = 1) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite, got {array}")
    return array


def _keys(name: str, keys: Iterable[Hashable], n: int) -> list[Hashable]:
    keys = list(keys)
    if len(keys) != n:
        raise ValueError(f"{name} has {len(keys)} entries, expected {n} (one per reward)")
    return keys


def _labels(name: str, keys: Iterable[Hashable]) -> np.ndarray:
    """0, 1, 2, … per distinct key in order of first appearance, so any hashable can name a group."""
    index: dict[Hashable, int] = {}
    try:
        return np.array([index.setdefault(key, len(index)) for key in keys], dtype=np.int64)
    except TypeError as error:
        raise ValueError(f"{name} must be hashable (int, str, tuple): {error}") from None


def _group_mean(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Mean of `values` over each element's group, broadcast back to the elements."""
    return (np.bincount(labels, weights=values) / np.bincount(labels))[labels]


def _group_std(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Sample std (Bessel: ÷ (n − 1)) of each element's group; 0 for a group of one (see `group_advantages`)."""
    squares = np.bincount(labels, weights=(values - _group_mean(values, labels)) ** 2)
    counts = np.bincount(labels)
    variance = np.divide(squares, counts - 1, out=np.zeros_like(squares), where=counts > 1)
    return np.sqrt(variance)[labels]


def group_advantages(
    rewards: Iterable[float], groups: Iterable[Hashable], scale: Scale = "group", eps: float = 1e-4
) -> np.ndarray:
    """TRL's GRPO advantage: A_i = (r_i − mean_{j∈g(i)} r_j) / (s + eps).

    s is the sample std (Bessel's correction) of r over the group g(i) for scale="group", over the whole batch for
    "batch"; "none" skips the division (Dr. GRPO). A group of one gets std 0, hence A = 0: TRL does the same when it has
    one generation per prompt (torch.std of one element would be nan and poison the batch).
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    r = _floats("rewards", rewards)
    labels = _labels("groups", _keys("groups", groups, len(r)))
    centred = r - _group_mean(r, labels)
    if scale == "none":
        return centred
    std = _group_std(r, labels if scale == "group" else np.zeros_like(labels))
    return centred / (std + eps)


def turn_level_advantages(rewards: Iterable[Iterable[float]], scale: Scale = "group", eps: float = 1e-4) -> np.ndarray:
    """MemoPilot's context-independent turn-level advantage, for G rollouts of one sequence, rewards shaped [G, T]:

    A[i, t] = (r[i, t] − mean_j r[j, t]) / (std_j r[j, t] + eps)

    Rollouts are compared turn by turn (same game index, same opponent and seeds) although their memories differ;
    "batch" divides by the std of all G·T rewards instead, "none" only centres.
    """
    r = _floats("rewards", rewards, ndim=2)
    rollouts, turns = r.shape
    turn_of_each = np.tile(np.arange(turns), rollouts)  # row-major: element (i, t) → t
    return group_advantages(r.ravel(), turn_of_each, scale=scale, eps=eps).reshape(rollouts, turns)


def _check_gammas(gamma_step: float, gamma_traj: float) -> None:
    for name, gamma in (("gamma_step", gamma_step), ("gamma_traj", gamma_traj)):
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {gamma}")


def _trial_arrays(
    rewards: Iterable[float], attempts: Iterable[int], is_reflection: Iterable[bool] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rewards, attempt index, is-reflection) of one trial's steps, checked: aligned, in trial order, reflections
    without reward."""
    r = _floats("rewards", rewards)
    attempt = np.asarray(list(attempts))
    reflection = np.zeros(len(r), bool) if is_reflection is None else np.asarray(list(is_reflection), bool)
    if attempt.shape != r.shape or reflection.shape != r.shape:
        raise ValueError(f"attempts and is_reflection need one entry per reward ({len(r)})")
    if np.any(np.diff(attempt) < 0):
        raise ValueError(f"attempts must be non-decreasing (steps in trial order), got {attempt.tolist()}")
    if np.any(r[reflection] != 0):
        raise ValueError("reflection steps carry no reward; put rewards on action steps")
    return r, attempt, reflection


def cross_episode_returns(
    rewards: Iterable[float],
    attempts: Iterable[int],
    is_reflection: Iterable[bool] | None = None,
    *,
    gamma_step: float = 0.95,
    gamma_traj: float = 0.6,
) -> np.ndarray:
    """LaMer's cross-episode return of every step of one trial (its attempts at one instance, in order):

    G_t⁽ⁿ⁾ = g_t⁽ⁿ⁾ + Σ_{m>n} γ_trajᵐ⁻ⁿ g_0⁽ᵐ⁾,   g_t⁽ⁿ⁾ = Σ_{t′≥t} γ_stepᵗ′⁻ᵗ r_t′⁽ⁿ⁾  (t counted within attempt n),

    computed backwards as g_t = r_t + γ_step · g_{t+1} inside an attempt and Σ_{m>n} … = γ_traj · G_0⁽ⁿ⁺¹⁾. Later
    attempts credit every step of an earlier one by the same γ_traj-discounted amount, however far the step is from
    the attempt's end (γ_step never crosses the boundary), so the first step's return is the trial's score R(τ)
    (`discounted_score_terms`). A reflection step (written between attempts) takes the return of the action step that
    follows it, undiscounted: it carries no reward of its own (non-zero → ValueError). `attempts` gives each step's
    attempt index, non-decreasing (a reflection may carry the index of either attempt it sits between).
    """
    _check_gammas(gamma_step, gamma_traj)
    r, attempt, reflection = _trial_arrays(rewards, attempts, is_reflection)
    returns = np.zeros_like(r)
    head = 0.0  # G of the next action step, seen from the back
    within, later, current = 0.0, 0.0, None  # g inside the current attempt; γ_traj · G_0 of the attempt after it
    for t in range(len(r) - 1, -1, -1):
        if reflection[t]:
            returns[t] = head
            continue
        if attempt[t] != current:  # the last action step of an earlier attempt: head is G_0 of the one after
            within, later, current = 0.0, (0.0 if current is None else gamma_traj * head), attempt[t]
        within = r[t] + gamma_step * within
        returns[t] = head = within + later
    return returns


def released_step_returns(
    rewards: Iterable[float],
    attempts: Iterable[int],
    is_reflection: Iterable[bool] | None = None,
    *,
    gamma_step: float = 0.95,
    gamma_traj: float = 0.6,
) -> np.ndarray:
    """The per-step return of LaMer's released code (`credit_assignment` in
    agent_system/multi_turn_rollout/metarl_rollout_loop.py, lines 551–570 at github.com/mlbio-epfl/LaMer 9a4756c),
    one chain backwards over the trial:

    G_t = r_t + γ · G_t′,  t′ the next action step, γ = γ_step when t′ is in t's attempt and γ_traj when it begins
    the next attempt;

    a reflection takes G of the action step after it. The later attempts' credit therefore reaches step t of an
    earlier attempt discounted once more, by γ_step per step left in that attempt, so the first step's return is
    not the trial's score R(τ) as in the paper's `cross_episode_returns` (the Minesweeper trial of
    docs/estimators.md §7: 15.774 here, 17.067 there). Same arguments as `cross_episode_returns`.
    """
    _check_gammas(gamma_step, gamma_traj)
    r, attempt, reflection = _trial_arrays(rewards, attempts, is_reflection)
    returns = np.zeros_like(r)
    head, current = 0.0, None  # G of the next action step, and its attempt
    for t in range(len(r) - 1, -1, -1):
        if reflection[t]:
            returns[t] = head
            continue
        head = r[t] + (gamma_step if attempt[t] == current or current is None else gamma_traj) * head
        returns[t], current = head, attempt[t]
    return returns


def attempt_rewards(
    rewards: Iterable[float], attempts: Iterable[int], is_reflection: Iterable[bool] | None = None
) -> np.ndarray:
    """The episode reward LaMer's released code gives each step of one trial (`credit_assignment`, lines 572–592
    of the file `released_step_returns` names): the undiscounted sum of the rewards of the step's own attempt,
    and 0 for a reflection. Same arguments as `cross_episode_returns`."""
    r, attempt, reflection = _trial_arrays(rewards, attempts, is_reflection)
    action = ~reflection
    totals = {key: r[action & (attempt == key)].sum() for key in np.unique(attempt[action])}
    return np.array([0.0 if reflection[t] else totals[attempt[t]] for t in range(len(r))])


def discounted_score_terms(
    rewards: Iterable[float],
    attempts: Iterable[int],
    is_reflection: Iterable[bool] | None = None,
    *,
    gamma_step: float = 0.95,
    gamma_traj: float = 0.6,
) -> np.ndarray:
    """The terms of LaMer's trial score, for one trial (its steps in order, as for `cross_episode_returns`):

    R(τ) = Σₙ γ_trajⁿ Σₜ γ_stepᵗ rₜ⁽ⁿ⁾,  term of step t of the n-th attempt = γ_trajⁿ · γ_stepᵗ · rₜ⁽ⁿ⁾,

    n and t counted from 0 (n: the attempt's position in the trial; t: the action step's position in its attempt;
    reflections are skipped and get 0). Summing the terms gives R(τ), which is also the first step's
    `cross_episode_returns`. Discounting favours solving early, but it does not guarantee it: with dense rewards a
    late success can outscore an early one (Minesweeper, γ_traj 0.9: (2, 12) solved at once scores 13.4, while
    (2, 2, −0.1) then (2, 2, 12) scores 3.81 + 0.9 · 14.73 = 17.07; at γ_traj 0.6 the late trial scores 12.65).
    """
    _check_gammas(gamma_step, gamma_traj)
    r, attempt, reflection = _trial_arrays(rewards, attempts, is_reflection)
    terms = np.zeros_like(r)
    position, step, previous = -1, 0, None
    for i in range(len(r)):
        if reflection[i]:
            continue
        if attempt[i] != previous:
            position, step, previous = position + 1, 0, attempt[i]
        terms[i] = gamma_traj**position * gamma_step**step * r[i]
        step += 1
    return terms


def _trial_scores(
    score_terms: np.ndarray, groups: list[Hashable], trials: Iterable[Hashable]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(R(τ) per trial, group label per trial, trial label per step); a trial is keyed by (group, trial)."""
    group_of_step = _labels("groups", groups)
    trial_of_step = _labels("trials", zip(groups, _keys("trials", trials, len(score_terms))))
    scores = np.bincount(trial_of_step, weights=score_terms)
    group_of_trial = np.empty(len(scores), np.int64)
    group_of_trial[trial_of_step] = group_of_step
    return scores, group_of_trial, trial_of_step


def gigpo_advantages(
    score_terms: Iterable[float],
    returns: Iterable[float],
    groups: Iterable[Hashable],
    trials: Iterable[Hashable],
    anchors: Iterable[Hashable],
) -> np.ndarray:
    """LaMer's GiGPO advantage per step as its paper defines it (the released code's: `released_gigpo_advantages`),
    without std normalisation: A = A_episode + A_step, where

    A_episode = R(τ) − mean_{τ' in the group} R(τ'),  R(τ) = Σ score_terms of the step's trial τ (each trial once),
    A_step    = G_t − mean{G_s : s in the same group with the same anchor},

    with G the step returns (`cross_episode_returns`) and the score terms LaMer's discounted ones
    (`discounted_score_terms`; plain rewards would give the undiscounted sum). The anchor is the state a step acts
    from, e.g. (attempt, environment state): a step whose anchor occurs once in its group gets A_step = 0 (it is its
    own mean). A group is all trials of one instance; all arrays are per step.
    """
    terms = _floats("score_terms", score_terms)
    g = _floats("returns", returns)
    if g.shape != terms.shape:
        raise ValueError(f"returns has {len(g)} entries, expected {len(terms)} (one per score term)")
    groups = _keys("groups", groups, len(terms))
    scores, group_of_trial, trial_of_step = _trial_scores(terms, groups, trials)
    episode = (scores - _group_mean(scores, group_of_trial))[trial_of_step]
    anchor_of_step = _labels("anchors", zip(groups, _keys("anchors", anchors, len(terms))))
    step = g - _group_mean(g, anchor_of_step)
    return episode + step


def released_gigpo_advantages(
    episode_rewards: Iterable[float],
    returns: Iterable[float],
    groups: Iterable[Hashable],
    anchors: Iterable[Hashable],
) -> np.ndarray:
    """GiGPO as LaMer's released code computes it (`core_gigpo.compute_gigpo_outcome_advantage`, mode "mean_norm",
    in verl/trainer/ppo/core_gigpo.py at mlbio-epfl/LaMer 9a4756c): A = A_episode + A_step, where

    A_episode = E_i − mean{E_j : j a step of the same group},
    A_step    = G_i − mean{G_j : j in the same group with the same anchor},

    E the step's `attempt_rewards` (its attempt's undiscounted total, 0 for a reflection) and G its
    `released_step_returns` (they reach `core_gigpo` as the token-level score through the `episode` reward manager,
    agent_system/reward_manager/episode.py:73–79, and as `step_returns`, verl/trainer/ppo/ray_trainer.py:346–348).
    Every step counts in the group mean (`compute_mean_std_cross_all_data`), so a long
    attempt weighs more than a short one, and an attempt is judged by its own reward, not by the trial's discounted
    score as in the paper's `gigpo_advantages`. All arrays are per step.
    """
    e = _floats("episode_rewards", episode_rewards)
    g = _floats("returns", returns)
    if g.shape != e.shape:
        raise ValueError(f"returns has {len(g)} entries, expected {len(e)} (one per episode reward)")
    groups = _keys("groups", groups, len(e))
    anchor_of_step = list(zip(groups, _keys("anchors", anchors, len(e))))
    return group_advantages(e, groups, scale="none") + group_advantages(g, anchor_of_step, scale="none")


def grpo_episode_advantages(
    score_terms: Iterable[float],
    groups: Iterable[Hashable],
    trials: Iterable[Hashable],
    scale: Scale = "group",
    eps: float = 1e-4,
) -> np.ndarray:
    """LaMer's GRPO variant, per step: every step of trial τ gets `group_advantages` of its trial's score,

    A = (R(τ) − mean_{τ' in the group} R(τ')) / (std_{τ'} R(τ') + eps),  R(τ) = Σ score_terms of τ,

    with each trial counted once however many steps it has (score terms as in `gigpo_advantages`).
    """
    terms = _floats("score_terms", score_terms)
    scores, group_of_trial, trial_of_step = _trial_scores(terms, _keys("groups", groups, len(terms)), trials)
    return group_advantages(scores, group_of_trial, scale=scale, eps=eps)[trial_of_step]
