"""Per-run metrics, computed from recorded scores only (pure numpy + math, no scipy).

Each function states its equation; the choice between pass@k and success@k matters: pass@k assumes
k *independent* samples of one task, success@k counts *sequential* attempts where later ones may use feedback.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np


def cumulative_performance(scores: Sequence[float]) -> np.ndarray:
    """Running average of per-game scores: c_t = (1/t) · Σ_{i=1..t} s_i for t = 1..T.

    The learning curve of a run's units: a learner's curve rises towards its per-game ceiling, a non-learner's stays
    flat.
    """
    s = np.asarray(scores, dtype=float)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D sequence, got shape {s.shape}")
    return np.cumsum(s) / np.arange(1, s.size + 1)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of Chen et al. (2021) from n independent samples of which c are correct.

    pass@k = 1 − C(n−c, k) / C(n, k) = 1 − Π_{i=n−c+1..n} (1 − k/i).

    The product form avoids the huge binomials; it is 1 as soon as n − c < k (every k-subset holds a success).
    """
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise ValueError(f"n, c, k must be integers, got {n!r}, {c!r}, {k!r}")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def mean_pass_at_k(samples: Iterable[tuple[int, int]], k: int) -> float:
    """Task-averaged pass@k: (1/|tasks|) · Σ_tasks pass@k(n_task, c_task, k), from (n, c) per task."""
    values = [pass_at_k(n, c, k) for n, c in samples]
    if not values:
        raise ValueError("no tasks given")
    return float(np.mean(values))


def success_at_k(first_success: Sequence[int | None], k_max: int) -> np.ndarray:
    """Fraction of tasks solved within the first k sequential attempts, for k = 1..k_max.

    success@k = (1/|tasks|) · #{tasks with 1 ≤ a_task ≤ k}, where a_task is the (1-based) attempt of the first
    success and None or 0 means never solved. Entry k−1 of the result is success@k; it never decreases in k.
    """
    if not isinstance(k_max, int) or k_max < 1:
        raise ValueError(f"k_max must be a positive integer, got {k_max!r}")
    if len(first_success) == 0:
        raise ValueError("no tasks given")
    attempts = np.array([0 if a is None else a for a in first_success])
    if attempts.dtype.kind not in "iu" or (attempts < 0).any():
        raise ValueError("first-success attempts must be non-negative integers or None")
    solved = attempts[attempts > 0]
    ks = np.arange(1, k_max + 1)
    return (solved[None, :] <= ks[:, None]).sum(axis=1) / attempts.size


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value for paired binary outcomes (the same tasks under methods A and B).

    Only the discordant tasks carry information: under H0 (no difference) each of the n = b + c of them favours A
    with probability 1/2, so p = min(1, 2 · Σ_{i ≤ min(b, c)} C(n, i) / 2ⁿ); p = 1 when n = 0.
    """
    if not (isinstance(only_a, int) and isinstance(only_b, int)) or only_a < 0 or only_b < 0:
        raise ValueError(f"discordant counts must be non-negative integers, got {only_a!r}, {only_b!r}")
    n = only_a + only_b
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1))
    return min(1.0, 2 * tail / 2**n)


def paired_sign_flip_p(differences: Sequence[float]) -> float:
    """Two-sided exact p-value of a paired randomization test on scores (the same games under arms A and B): under H0
    each difference d_i = a_i − b_i is as likely to have had the other sign, so p is the share of the 2ⁿ sign
    assignments whose |Σ ±d_i| is at least the observed |Σ d_i|; p = 1 with no non-zero difference. Exact for any n
    (the sums are convolved, not enumerated; differences are compared at 1e-9)."""
    values = [float(d) for d in differences]
    if any(math.isnan(d) or math.isinf(d) for d in values):
        raise ValueError(f"differences must be finite numbers, got {list(differences)!r}")
    sums: dict[float, int] = {0.0: 1}
    for d in values:
        if d == 0:
            continue
        spread: dict[float, int] = {}
        for total, ways in sums.items():
            for signed in (d, -d):
                key = round(total + signed, 9)
                spread[key] = spread.get(key, 0) + ways
        sums = spread
    observed = round(abs(sum(values)), 9)
    return sum(ways for total, ways in sums.items() if abs(total) >= observed - 1e-9) / sum(sums.values())


def mcnemar_power(n: int, p_only_a: float, p_only_b: float, alpha: float = 0.05) -> float:
    """The probability that a paired study of `n` tasks confirms "A beats B": exact McNemar p < `alpha` with more
    tasks solved only by A, when each task is solved only by A with probability `p_only_a` and only by B with
    `p_only_b` (independently across tasks).

    The discordant count D ~ Binomial(n, p_a + p_b); given D = d, A's share ~ Binomial(d, p_a / (p_a + p_b)); so
    power = Σ_d P(D = d) · Σ_{b > d − b, mcnemar_exact(b, d − b) < alpha} P(A's share = b | d)."""
    if n < 0 or not (0 <= p_only_a and 0 <= p_only_b and p_only_a + p_only_b <= 1):
        raise ValueError(
            f"need n >= 0 and discordant probabilities that sum to at most 1, got {n}, {p_only_a}, {p_only_b}"
        )
    discordant = p_only_a + p_only_b
    if discordant == 0:
        return 0.0
    share = p_only_a / discordant
    power = 0.0
    for d in range(n + 1):
        p_d = math.comb(n, d) * discordant**d * (1 - discordant) ** (n - d)
        wins = sum(
            math.comb(d, b) * share**b * (1 - share) ** (d - b)
            for b in range(d + 1)
            if b > d - b and mcnemar_exact(b, d - b) < alpha
        )
        power += p_d * wins
    return power


def paired_sample_size(effect: float, sd: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """How many paired units a two-sided test at `alpha` needs to detect a mean difference `effect` with probability
    `power`, when the per-unit differences have standard deviation `sd` (the normal approximation):

        n = ⌈((z_{1−α/2} + z_power) · sd / effect)²⌉.

    What a protocol computes from development data before it registers its held-out units; the exact sign-flip test
    it then runs needs about as many (its efficiency against the t-test is close to 1 for smooth differences)."""
    if effect == 0 or sd <= 0 or not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(
            f"need a nonzero effect, sd > 0 and alpha, power in (0, 1), got {effect}, {sd}, {alpha}, {power}"
        )
    z = normal_critical(1 - alpha) + normal_critical(2 * power - 1)
    return math.ceil((z * sd / abs(effect)) ** 2)


def trajectory_entropy(action_sequences: Iterable[Sequence[Hashable]]) -> float:
    """Shannon entropy, in bits, of the empirical distribution of distinct action sequences on one instance.

    H = − Σ_τ p(τ) · log2 p(τ), with p(τ) = (number of runs whose whole action sequence equals τ) / (number of runs).
    0 means every run played the same trajectory; log2(R) means R runs, all different. It measures how much a
    player explores (or how noisy it is) on a fixed instance, not how well it does.
    """
    counts = np.array(list(Counter(tuple(seq) for seq in action_sequences).values()), dtype=float)
    if counts.size == 0:
        raise ValueError("no action sequences given")
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum() + 0.0)  # + 0.0 turns -0.0 into 0.0


def mean_trajectory_entropy(instances: Iterable[Iterable[Sequence[Hashable]]]) -> float:
    """Average of `trajectory_entropy` over instances: (1/|I|) · Σ_i H_i."""
    values = [trajectory_entropy(runs) for runs in instances]
    if not values:
        raise ValueError("no instances given")
    return float(np.mean(values))


def student_t_cdf_two_sided(t: float, df: int) -> float:
    """A(t | ν) = P(|T| ≤ t) for Student's t with integer ν degrees of freedom (Abramowitz & Stegun 26.7.3–4).

    With θ = arctan(t/√ν) and c = cos²θ:
      ν even: A = sinθ · Σ_{k=0..(ν−2)/2} a_k c^k,  a_0 = 1, a_k = a_{k−1} · (2k−1)/(2k);
      ν odd:  A = (2/π) · [θ + sinθ cosθ · Σ_{k=0..(ν−3)/2} b_k c^k],  b_0 = 1, b_k = b_{k−1} · 2k/(2k+1)
              (the sum is empty for ν = 1).
    """
    if not isinstance(df, int) or df < 1:
        raise ValueError(f"degrees of freedom must be a positive integer, got {df!r}")
    theta = math.atan(abs(t) / math.sqrt(df))
    c = math.cos(theta) ** 2
    if df % 2 == 0:
        k = np.arange(1, df // 2)
        coefficients = np.cumprod(np.concatenate([[1.0], (2 * k - 1) / (2 * k) * c]))
        return float(math.sin(theta) * coefficients.sum())
    k = np.arange(1, (df - 1) // 2)
    series = np.cumprod(np.concatenate([[1.0], 2 * k / (2 * k + 1) * c])).sum() if df > 1 else 0.0
    return float(2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * series))


def _critical(cdf_two_sided: Callable[[float], float], level: float) -> float:
    """The x* with cdf_two_sided(x*) = level, by bisection (the two-sided cdf grows monotonically in x ≥ 0)."""
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    low, high = 0.0, 1.0
    while cdf_two_sided(high) < level:
        low, high = high, 2 * high
    for _ in range(200):
        mid = (low + high) / 2
        if cdf_two_sided(mid) < level:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * high:
            break
    return (low + high) / 2


def student_t_critical(level: float, df: int) -> float:
    """The t* with P(|T| ≤ t*) = level for ν = df (`student_t_cdf_two_sided` inverted)."""
    return _critical(lambda t: student_t_cdf_two_sided(t, df), level)


def normal_critical(level: float) -> float:
    """The z* with P(|Z| ≤ z*) = erf(z*/√2) = level (1.95996… for 0.95)."""
    return _critical(lambda z: math.erf(z / math.sqrt(2)), level)


def wilson_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a success rate p̂ = successes / n:

        (p̂ + z²/2n ± z · √(p̂(1 − p̂)/n + z²/4n²)) / (1 + z²/n),   z = z*_level.

    Unlike p̂ ± z·√(p̂(1 − p̂)/n) it stays inside [0, 1] and is not empty at p̂ = 0 — the usual case for a small
    model on Sokoban, where 0 of 50 still allows a true rate up to 7 %.
    """
    if not (isinstance(successes, int) and isinstance(n, int)) or n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need integers n >= 1 and 0 <= successes <= n, got {successes!r}, {n!r}")
    z = normal_critical(level)
    p, z2 = successes / n, z * z
    center = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, center - half), min(1.0, center + half)


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Mean and the half-width of its Student-t confidence interval: x̄ ± t*_{level, n−1} · s / √n.

    s is the sample standard deviation (ddof = 1). t rather than normal because runs are often few (5 seeds:
    t* = 2.78 against 1.96); for large n the two agree. Assumes independent values — average dependent games per
    sequence first, or use the block bootstrap of `ttlearn.eval.rating`.
    """
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"need at least two values for a confidence interval, got {x.size}")
    if not np.isfinite(x).all():
        raise ValueError("values must be finite")
    half_width = student_t_critical(level, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean()), float(half_width)


def mbb_per_hand(bb_total: float, hands: int) -> float:
    """Poker win rate in milli-big-blinds per hand: mbb/hand = 1000 · (big blinds won) / hands."""
    if not isinstance(hands, int) or hands < 1:
        raise ValueError(f"hands must be a positive integer, got {hands!r}")
    return 1000.0 * bb_total / hands


@dataclass(frozen=True)
class ProtocolResult:
    last_epoch_success: float
    """Success rate in the final epoch: runtime learning."""
    best_validation_success: float | None
    """Best success rate over validation epochs (held-out tasks): transfer. None without validation epochs."""
    cumulative_success: float
    """Fraction of tasks solved in at least one epoch."""
    per_epoch: list[float]
    validation: list[float]
    """Success rate of each validation epoch that has tasks."""


def run_protocol(epochs: Sequence[Mapping[str, bool]], validation: Sequence[Mapping[str, bool]] = ()) -> ProtocolResult:
    """MemRL's protocol metrics from per-epoch success records {task id: solved} over the same task set.

    last = mean_t s_{E,t};  best validation = max_e mean_t v_{e,t};  cumulative = |{t : ∃e s_{e,t}}| / |T|.
    """
    if not epochs or any(not epoch for epoch in epochs):
        raise ValueError("run_protocol needs at least one epoch, each with at least one task")
    rates = [sum(map(bool, e.values())) / len(e) for e in epochs]
    held = [sum(map(bool, v.values())) / len(v) for v in validation if v]
    tasks = set().union(*epochs)
    solved = {t for e in epochs for t, ok in e.items() if ok}
    return ProtocolResult(rates[-1], max(held, default=None), len(solved) / len(tasks), rates, held)
