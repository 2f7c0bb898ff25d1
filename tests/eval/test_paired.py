"""Two arms paired on the same instances, by hand: success@k with the discordant tasks and McNemar's p, and the
score of each attempt with the paired sign-flip p."""

from __future__ import annotations

import pytest

from ttlearn.eval.metrics import mcnemar_exact
from ttlearn.eval.paired import compare_trials


def test_paired_comparison_counts_discordant_tasks_by_seed() -> None:
    def runs(firsts: list[int | None], seeds: list[int]) -> list[dict]:
        return [{"epoch": 1, "seed": s, "first_success": f} for f, s in zip(firsts, seeds)]

    a = runs([1, 2, None, 3, 2], [10, 11, 12, 13, 14])
    b = runs([1, None, None, None, 3, 1], [10, 11, 12, 13, 14, 99])  # task 99 is not in A: left out
    rows = compare_trials(a, b, attempts=3).rows
    assert compare_trials(a, b, attempts=3).tasks == 5
    assert [(r.a, r.b, r.only_a, r.only_b) for r in rows] == [
        (0.2, 0.2, 0, 0),
        (0.6, 0.2, 2, 0),
        (0.8, 0.4, 2, 0),
    ]
    assert rows[2].p_value == mcnemar_exact(2, 0) == 0.5
    with pytest.raises(ValueError, match="share no finished task"):
        compare_trials(a, runs([1], [42]), attempts=3)


def test_paired_comparison_of_attempt_scores_by_hand() -> None:
    def task(seed: int, scores: list[float], first: int | None) -> dict:
        return {"epoch": 1, "seed": seed, "first_success": first, "attempts": [{"score": x} for x in scores]}

    a = [task(1, [-2.5, 0.5, 0.5], None), task(2, [-5.1, -7.0, -4.1], None), task(3, [1.0, 12.0], 2)]
    b = [task(1, [-2.5, -2.5, -2.5], None), task(2, [-5.1, -5.1, -5.1], None), task(3, [1.0, 1.0, 1.0], None)]
    comparison = compare_trials(a, b, attempts=3)
    third = comparison.scores[2]  # task 3 was solved at attempt 2: its 12.0 stands for attempt 3
    assert (third.a, third.b) == pytest.approx(((0.5 - 4.1 + 12.0) / 3, (-2.5 - 5.1 + 1.0) / 3))
    assert (third.a_higher, third.b_higher) == (3, 0)
    # differences 3.0, 1.0, 11.0: only the all-positive and all-negative of the 8 sign patterns reach |15.0|
    assert third.p_value == pytest.approx(2 / 8)
    # differences 3.0, -1.9, 11.0: |±3 ±1.9 ±11| >= 12.1 for ±(3, -1.9, 11), ±(3, 1.9, 11)
    second = comparison.scores[1]
    assert (second.a_higher, second.b_higher, second.p_value) == (2, 1, pytest.approx(4 / 8))
    assert comparison.scores[0].p_value == 1.0  # the first attempts are the same
    assert compare_trials([{"epoch": 1, "seed": 1, "first_success": 1}], b, attempts=3).scores is None
