"""The verified-moves memory: the moves the environment confirmed, in order, for the next attempt to replay."""

from __future__ import annotations

from ttlearn.memory.verified import VerifiedMovesMemory, verified_moves
from ttlearn.players.llm import suggested_action
from ttlearn.types import Episode, Step


def attempt(index: int, moves: list[tuple[str, float, bool]], success: bool) -> Episode:
    steps = tuple(Step(f"turn {k}", action, reward, valid=valid) for k, (action, reward, valid) in enumerate(moves))
    return Episode(index, 7, "minesweeper", steps, sum(s.reward for s in steps), success, {})


def test_a_failed_attempt_keeps_the_moves_the_environment_rewarded_and_a_solved_one_all():
    failed = attempt(
        1,
        [("reveal 1 1", 0.5, True), ("reveal 1 1", -1.0, True), ("dance", -0.1, False), ("reveal 2 4", 0.25, True),
         ("reveal 5 5", -0.1, True)],  # an opened cascade, an ineffective repeat, an unparseable reply, a mine
        success=False,
    )
    assert verified_moves(failed) == ["reveal 1 1", "reveal 2 4"]
    solved = attempt(2, [("reveal 1 1", 0.5, True), ("reveal 3 3", 0.0, True), ("nonsense", -0.1, False)], True)
    assert verified_moves(solved) == ["reveal 1 1", "reveal 3 3"]


def test_the_next_attempt_is_offered_the_moves_one_per_decision_and_keeps_them_when_it_verifies_none():
    memory = VerifiedMovesMemory()
    assert memory.context("board") == ""
    first = [("reveal 1 1", 0.5, True), ("reveal 2 4", 0.25, True), ("reveal 5 5", -0.1, True)]
    memory.observe(attempt(1, first, False))
    legal = ("reveal 1 1", "reveal 2 4", "reveal 5 5", "reveal 6 6")
    note = memory.context("board")
    assert [suggested_action(note, legal, k) for k in range(3)] == ["reveal 1 1", "reveal 2 4", None]
    memory.observe(attempt(2, [("reveal 5 5", -0.1, True)], False))  # verified nothing: the earlier moves stay
    assert memory.context("board") == note
    copy = VerifiedMovesMemory()
    copy.load(memory.state())
    assert copy.context("board") == note
