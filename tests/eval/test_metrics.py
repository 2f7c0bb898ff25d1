import math

import numpy as np
import pytest

from ttlearn.eval.metrics import (
    cumulative_performance,
    mbb_per_hand,
    mcnemar_exact,
    mcnemar_power,
    mean_ci,
    mean_pass_at_k,
    mean_trajectory_entropy,
    normal_critical,
    paired_sample_size,
    paired_sign_flip_p,
    pass_at_k,
    student_t_critical,
    success_at_k,
    trajectory_entropy,
    wilson_interval,
)


def test_cumulative_performance_is_the_running_mean():
    np.testing.assert_allclose(cumulative_performance([1, 0, 1, 1, -1]), [1, 0.5, 2 / 3, 0.75, 0.4])


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (10, 3, 1, 0.3),
        (10, 3, 5, 1 - 21 / 252),  # 1 − C(7,5)/C(10,5)
        (10, 0, 4, 0.0),
        (10, 10, 1, 1.0),
        (10, 8, 3, 1.0),  # n − c < k: every 3-subset holds a success
    ],
)
def test_pass_at_k_known_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_the_binomial_form():
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_stays_finite_for_large_n():
    assert pass_at_k(2000, 1, 1) == pytest.approx(0.0005)
    assert 0 < pass_at_k(5000, 3, 100) < 1


@pytest.mark.parametrize("n, c, k", [(0, 0, 1), (5, 6, 1), (5, 2, 0), (5, 2, 6), (5.0, 2, 1)])
def test_pass_at_k_rejects_bad_input(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_averages_tasks():
    assert mean_pass_at_k([(10, 3), (5, 0)], k=1) == pytest.approx(0.15)
    with pytest.raises(ValueError):
        mean_pass_at_k([], k=1)


def test_success_at_k_counts_first_successes_within_k():
    np.testing.assert_allclose(success_at_k([1, 3, None, 0, 2], k_max=4), [0.2, 0.4, 0.6, 0.6])
    with pytest.raises(ValueError):
        success_at_k([1, -1], k_max=2)


def test_trajectory_entropy_hand_examples():
    assert trajectory_entropy([["a"], ["a"], ["b"], ["b"]]) == pytest.approx(1.0)
    # distinct whole sequences with frequencies 1/2, 1/4, 1/4 → 1.5 bits
    assert trajectory_entropy([["r", "p"], ["r", "p"], ["r", "s"], ["p", "p"]]) == pytest.approx(1.5)
    assert trajectory_entropy([["a", "b"]] * 5) == 0.0
    assert mean_trajectory_entropy([[["a"], ["b"]], [["a"], ["a"]]]) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "df, expected", [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (30, 2.0423), (100000, 1.9600)]
)
def test_student_t_critical_matches_tables(df, expected):
    assert student_t_critical(0.95, df) == pytest.approx(expected, abs=1e-4)


def test_mcnemar_exact_by_hand():
    assert mcnemar_exact(0, 0) == 1.0 and mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(5, 0) == pytest.approx(2 / 32)  # all 5 discordant tasks favour A: 2 · (1/2)^5
    assert mcnemar_exact(1, 7) == pytest.approx(2 * (1 + 8) / 256)
    assert mcnemar_exact(7, 1) == mcnemar_exact(1, 7)
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_paired_sample_size_by_hand():
    # z_0.975 = 1.959964, z_0.8 = 0.841621: (2.801585)² = 7.84888 per (sd / effect)²
    assert paired_sample_size(1.0, 1.0) == 8
    assert paired_sample_size(0.33, 2.0) == 289  # 7.84888 · (2 / 0.33)² = 288.3
    assert paired_sample_size(-0.5, 1.0) == 32  # 31.4: the sign does not matter
    assert paired_sample_size(1.0, 1.0, power=0.9) == 11  # (1.959964 + 1.281552)² = 10.51
    with pytest.raises(ValueError, match="nonzero effect"):
        paired_sample_size(0.0, 1.0)


def test_mcnemar_power_by_hand():
    # n = 6, every discordant task favours A (p_a = 0.5, p_b = 0): only D = 6 gives p = 2/64 < 0.05, P(D = 6) = 1/64
    assert mcnemar_power(6, 0.5, 0.0) == pytest.approx(1 / 64)
    # n = 5 can never reach p < 0.05 (the best is 2/32); n = 6 with every task discordant for A always does
    assert mcnemar_power(5, 1.0, 0.0) == 0.0 and mcnemar_power(6, 1.0, 0.0) == pytest.approx(1.0)
    # n = 7, p_a = 1/2, p_b = 1/2: D = 7 always; a confirmation needs b = 7 (p = 2/128) — b = 6 gives 16/128
    assert mcnemar_power(7, 0.5, 0.5) == pytest.approx(1 / 128)
    assert mcnemar_power(10, 0.0, 0.0) == 0.0
    with pytest.raises(ValueError):
        mcnemar_power(10, 0.7, 0.5)


def test_normal_critical_matches_tables():
    assert normal_critical(0.95) == pytest.approx(1.959964, abs=1e-6)
    assert normal_critical(0.99) == pytest.approx(2.575829, abs=1e-6)
    with pytest.raises(ValueError):
        normal_critical(1.0)


@pytest.mark.parametrize(
    "successes, n, expected",
    [(81, 263, (0.2553, 0.3662)), (15, 148, (0.0624, 0.1605)), (0, 20, (0.0, 0.1611))],  # Newcombe (1998), Table II
)
def test_wilson_interval_matches_newcombe(successes, n, expected):
    assert wilson_interval(successes, n) == pytest.approx(expected, abs=1e-4)


def test_wilson_interval_is_symmetric_and_rejects_bad_counts():
    low, high = wilson_interval(3, 10)
    assert wilson_interval(7, 10) == pytest.approx((1 - high, 1 - low))
    assert wilson_interval(10, 10)[1] == 1.0
    for bad in [(-1, 5), (6, 5), (0, 0)]:
        with pytest.raises(ValueError):
            wilson_interval(*bad)


def test_mean_ci_uses_student_t():
    mean, half = mean_ci([1, 2, 3, 4, 5])
    assert mean == 3.0
    assert half == pytest.approx(2.776445 * math.sqrt(2.5) / math.sqrt(5), rel=1e-6)
    with pytest.raises(ValueError):
        mean_ci([1.0])


def test_mbb_per_hand():
    assert mbb_per_hand(-12.5, 500) == pytest.approx(-25.0)
    with pytest.raises(ValueError):
        mbb_per_hand(1.0, 0)


def test_paired_sign_flip_p_by_hand():
    # ±1 ±2 ±3 takes the sums 6, 4, 2, 0, 0, −2, −4, −6: only ±6 are as extreme as the observed 6 → 2 / 8
    assert paired_sign_flip_p([1, 2, 3]) == pytest.approx(2 / 8)
    assert paired_sign_flip_p([1, -2, 3]) == pytest.approx(6 / 8)  # observed |2|: all but the two zeros
    assert paired_sign_flip_p([0.5, 0.5, 0.5, 0.5, 0.5]) == pytest.approx(2 / 32)  # like McNemar's 5 of 5
    assert paired_sign_flip_p([0, 0, 2]) == pytest.approx(1.0)  # zeros carry nothing: one difference, p = 2 / 2
    assert paired_sign_flip_p([]) == 1.0 and paired_sign_flip_p([0, 0]) == 1.0
    assert paired_sign_flip_p([0.1, 0.2, -0.3]) == pytest.approx(1.0)  # sum 0 (in floats 5.5e-17): every flip counts
    with pytest.raises(ValueError, match="finite"):
        paired_sign_flip_p([1, float("nan")])


def test_success_by_skill_counts_a_unit_once_for_each_of_its_skills():
    from ttlearn.eval.summary import success_by_skill

    table = success_by_skill([(["select", "limit_only"], True), (["select"], False), (["insert"], False)])
    assert table == {
        "insert": {"tasks": 1, "solved": 0, "success": 0.0},
        "limit_only": {"tasks": 1, "solved": 1, "success": 1.0},
        "select": {"tasks": 2, "solved": 1, "success": 0.5},
    }
