"""What Q did in a run, from its logged retrievals: counted by hand on four logs."""

from __future__ import annotations

from ttlearn.eval.retrievals import q_effect


def cand(item: int, sim: float, score: float | None) -> dict:
    return {"id": item, "sim": sim, "q": 0.0, "score": score}


def test_q_effect_counts_by_hand() -> None:
    logs = [
        ([], [], False),  # nothing above δ
        ([cand(1, 0.95, 1.0), cand(2, 0.91, 0.2)], [1], False),  # Q agrees with similarity
        ([cand(1, 0.95, None), cand(2, 0.91, 0.2)], [2], False),  # the filter hid the most similar item
        ([cand(3, 0.93, -0.4), cand(4, 0.92, 0.9)], [4], False),  # Q outranked similarity
        ([cand(7, 0.94, -0.4), cand(8, 0.94, 0.3)], [8], False),  # Q chose between two items of one key
        ([cand(5, 0.99, 0.1), cand(6, 0.90, 0.0)], [6], True),  # an ε-random pick: neither ranking decided
    ]
    assert q_effect(logs) == {
        "retrievals": 6,
        "with_candidates": 5,
        "filtered": 1,
        "less_similar": 2,
        "tie_broken": 1,
        "explored": 1,
    }
