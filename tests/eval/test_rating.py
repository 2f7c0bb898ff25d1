import math

import numpy as np
import pytest

from ttlearn.eval.rating import (
    Battle,
    GameResult,
    battles_from_results,
    bootstrap_ci,
    bradley_terry,
    rank_with_ties,
    win_matrix,
)

ELO_TO_LOG_STRENGTH = math.log(10) / 400


def simulate(elos, n_sequences, games, seed, sequence_effect=0.0):
    """Paired results whose battles follow Bradley–Terry exactly: score = log-strength + Gumbel noise, because the
    difference of two Gumbels is logistic. `sequence_effect` adds a per-(sequence, method) N(0, sd) shift shared by
    all games of the sequence, making its battles dependent."""
    rng = np.random.default_rng(seed)
    results = []
    for s in range(n_sequences):
        shift = rng.normal(0.0, sequence_effect, len(elos)) if sequence_effect else np.zeros(len(elos))
        for g in range(games):
            noise = rng.gumbel(size=len(elos))
            for i, (method, elo) in enumerate(elos.items()):
                score = elo * ELO_TO_LOG_STRENGTH + shift[i] + noise[i]
                results.append(GameResult(method, "opp", s, g, score))
    return battles_from_results(results)


def half_widths(cis):
    return {m: (high - low) / 2 for m, (low, high) in cis.items()}


def test_battles_pair_methods_on_the_same_game_and_ties_count_half():
    records = [
        {"method": "a", "opponent": "o", "seed": 1, "game": 0, "score": 1.0},
        {"method": "b", "opponent": "o", "seed": 1, "game": 0, "score": 0.0},
        {"method": "c", "opponent": "o", "seed": 1, "game": 0, "score": 1.0},
        {"method": "a", "opponent": "o", "seed": 1, "game": 1, "score": 5.0},  # nobody else played game 1
        {"method": "b", "opponent": "o", "seed": 2, "game": 0, "score": 2.0},  # different seed: not paired with a
    ]
    assert sorted(battles_from_results(records), key=lambda x: (x.a, x.b)) == [
        Battle("a", "b", 1.0, ("o", 1)),
        Battle("a", "c", 0.5, ("o", 1)),
        Battle("b", "c", 0.0, ("o", 1)),
    ]
    with pytest.raises(ValueError, match="two results"):
        battles_from_results(records + [records[0]])


def test_ties_count_half_in_the_fit():
    battles = [Battle("a", "b", 1.0, 0), Battle("a", "b", 0.5, 1), Battle("a", "b", 0.5, 2)]
    # a scored 2 points, b 1 point: p_a / p_b = 2 → gap 400·log10(2); mean anchored at 1000
    r = bradley_terry(battles, prior=0)
    assert r["a"] - r["b"] == pytest.approx(400 * math.log10(2), abs=1e-6)
    assert (r["a"] + r["b"]) / 2 == pytest.approx(1000)
    # the prior adds 0.1 virtual ties per pair: 0.05 points each way
    shrunk = bradley_terry(battles, prior=0.1)
    assert shrunk["a"] - shrunk["b"] == pytest.approx(400 * math.log10(2.05 / 1.05), abs=1e-6)


def test_undefeated_method_stays_finite_with_the_prior_and_is_refused_without():
    battles = [Battle("a", "b", 1.0, i) for i in range(10)]
    r = bradley_terry(battles)
    assert r["a"] - r["b"] == pytest.approx(400 * math.log10(10.05 / 0.05), abs=1e-6)
    with pytest.raises(ValueError, match="diverge"):
        bradley_terry(battles, prior=0)


def test_disconnected_methods_are_refused():
    with pytest.raises(ValueError, match="disconnected"):
        bradley_terry([Battle("a", "b", 1.0, 0), Battle("c", "d", 0.5, 1)])


def test_anchor_method_and_scale():
    battles = [Battle("a", "b", 1.0, 0), Battle("a", "b", 0.5, 1), Battle("a", "b", 0.5, 2)]
    r = bradley_terry(battles, prior=0, anchor_method="b", anchor=1500, scale=100, base=math.e)
    assert r == pytest.approx({"a": 1500 + 100 * math.log(2), "b": 1500})
    with pytest.raises(ValueError, match="anchor_method"):
        bradley_terry(battles, anchor_method="zzz")


def test_bradley_terry_recovers_a_synthetic_tournament():
    true = {"a": 1000, "b": 1100, "c": 1300}
    r = bradley_terry(simulate(true, n_sequences=100, games=50, seed=1))  # 5,000 battles per pair
    assert list(r) == ["c", "b", "a"]
    assert r["b"] - r["a"] == pytest.approx(100, abs=15)
    assert r["c"] - r["a"] == pytest.approx(300, abs=15)
    assert np.mean(list(r.values())) == pytest.approx(1000)


def test_battle_bootstrap_matches_the_normal_approximation_for_equal_methods():
    # for near-equal methods the 95 % half-width of the gap ≈ 681/√n; with two mean-anchored methods each rating
    # moves by half
    rng = np.random.default_rng(3)
    battles = [Battle("a", "b", float(rng.integers(2)), i) for i in range(400)]
    widths = half_widths(bootstrap_ci(battles, n_boot=300, block="battle"))
    assert widths["a"] == pytest.approx(681 / 2 / math.sqrt(400), rel=0.25)


def test_bootstrap_intervals_shrink_with_more_sequences():
    # averaged over three data sets: with only 10 blocks a single width estimate varies by about ±25 %
    def mean_width(n_sequences):
        elos = {"a": 1000, "b": 1100}
        return np.mean(
            [
                half_widths(bootstrap_ci(simulate(elos, n_sequences, 20, seed=n_sequences + k), n_boot=200))["a"]
                for k in range(3)
            ]
        )

    assert mean_width(80) < 0.55 * mean_width(10)  # √(10/80) ≈ 0.35 expected


def test_block_bootstrap_is_wider_on_correlated_sequences():
    battles = simulate({"a": 1000, "b": 1100}, 40, 20, seed=5, sequence_effect=1.0)
    by_sequence = half_widths(bootstrap_ci(battles, n_boot=200, block="sequence"))["a"]
    by_battle = half_widths(bootstrap_ci(battles, n_boot=200, block="battle"))["a"]
    assert by_sequence > 1.5 * by_battle


def test_bootstrap_is_reproducible_and_brackets_the_fit():
    battles = simulate({"a": 1000, "b": 1100, "c": 1200}, 20, 10, seed=2)
    cis = bootstrap_ci(battles, n_boot=100, seed=7)
    assert cis == bootstrap_ci(battles, n_boot=100, seed=7)
    for method, rating in bradley_terry(battles).items():
        assert cis[method][0] < rating < cis[method][1]
    with pytest.raises(ValueError, match="block"):
        bootstrap_ci(battles, block="game")


def test_win_matrix():
    battles = [Battle("a", "b", 1.0, 0), Battle("a", "b", 0.5, 0), Battle("b", "c", 0.0, 1)]
    methods, rate, games = win_matrix(battles)
    assert methods == ["a", "b", "c"]
    np.testing.assert_array_equal(games, [[0, 2, 0], [2, 0, 1], [0, 1, 0]])
    np.testing.assert_allclose(rate, [[np.nan, 0.75, np.nan], [0.25, np.nan, 0.0], [np.nan, 1.0, np.nan]])


def test_rank_with_ties_counts_clearly_better_methods():
    ratings = {"a": 1200, "b": 1150, "c": 1000, "d": 990}
    cis = {"a": (1160, 1240), "b": (1100, 1170), "c": (950, 1050), "d": (960, 1020)}
    # a overlaps b; a and b are both clearly above c and d, which overlap each other
    assert rank_with_ties(ratings, cis) == {"a": 1, "b": 1, "c": 3, "d": 3}
    # chain: a ≫ c but b overlaps both
    chain = rank_with_ties({"a": 3, "b": 2, "c": 1}, {"a": (2.5, 3.5), "b": (1.5, 2.6), "c": (0.5, 1.6)})
    assert chain == {"a": 1, "b": 1, "c": 2}
