"""The verified-moves memory: the moves the environment confirmed, in order, for the next attempt to replay."""

from __future__ import annotations

from ttlearn.memory.verified import VerifiedMovesMemory, failed_moves, verified_moves
from ttlearn.players.llm import ruled_out, suggested_action
from ttlearn.types import MOVE_SEQUENCE, Episode, Step


def attempt(index: int, moves: list[tuple[str, float, bool]], success: bool) -> Episode:
    steps = tuple(Step(f"turn {k}", action, reward, valid=valid) for k, (action, reward, valid) in enumerate(moves))
    return Episode(index, 7, "minesweeper", steps, sum(s.reward for s in steps), success, {})


def test_a_failed_attempt_keeps_the_moves_the_environment_rewarded_and_a_solved_one_all():
    failed = attempt(
        1,
        [
            ("reveal 1 1", 0.5, True),
            ("reveal 1 1", -1.0, True),
            ("dance", -0.1, False),
            ("reveal 2 4", 0.25, True),
            ("reveal 5 5", -0.1, True),
        ],  # an opened cascade, an ineffective repeat, an unparseable reply, a mine
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


def test_failed_moves_are_ruled_out_for_every_later_attempt():
    memory = VerifiedMovesMemory()
    memory.observe(
        attempt(1, [("reveal 2 4", 0.5, True), ("reveal 1 1", -1.0, True), ("reveal 3 2", -0.1, True)], False)
    )
    assert memory.context("board") == f"{MOVE_SEQUENCE}\nreveal 2 4\nAvoid: reveal 1 1, reveal 3 2"
    legal = ("reveal 1 1", "reveal 2 4", "reveal 3 2", "reveal 5 5")
    assert ruled_out(memory.context("board"), legal) == {"reveal 1 1", "reveal 3 2"}
    assert [suggested_action(memory.context("board"), legal, k) for k in range(2)] == ["reveal 2 4", None]
    memory.observe(attempt(2, [("reveal 2 4", 0.5, True), ("reveal 5 5", -0.1, True), ("x", -0.1, False)], False))
    assert memory.context("board").endswith("\nreveal 2 4\nAvoid: reveal 1 1, reveal 3 2, reveal 5 5")
    copy = VerifiedMovesMemory()
    copy.load(memory.state())
    assert copy.context("board") == memory.context("board")


def test_the_player_replays_the_verified_moves_and_tries_other_cells_where_it_failed():
    """Minesweeper, a chooser that takes the suggested cell, else the first listed in reading order: each attempt
    replays the last one's rewarded reveals, then plays none of the cells that cost reward before (a cell it opened
    and then chose again is both: suggested once, left out after)."""
    from fakes import FakeLLM

    from ttlearn.envs import make_env
    from ttlearn.players.llm import LLMPlayer
    from ttlearn.types import Completion

    class FirstListed(FakeLLM):
        supports_choices = True

        def complete(self, messages, *, choices=None, **kwargs):
            suggested = "Suggested action" in messages[-1]["content"]
            return Completion(choices[0] if suggested else min(choices, key=lambda a: [int(n) for n in a.split()[1:]]))

    env = make_env("minesweeper", mines=8)
    memory, player = VerifiedMovesMemory(), LLMPlayer(FirstListed([]), note_at="default")
    attempts = []
    for k in range(3):
        obs, steps, done = env.reset(4), [], False
        player.begin_episode(env)
        while not done:
            action = player.act(env, obs, memory.context(obs.text), seed=k).action
            result = env.step(action)
            steps.append(Step(obs.text, action, result.reward))
            obs, done = result.observation, result.done
        attempts.append(Episode(k, 4, "minesweeper", tuple(steps), sum(s.reward for s in steps), env.won, {}))
        memory.observe(attempts[-1])
    for earlier, later in zip(attempts, attempts[1:]):
        replayed = verified_moves(earlier)
        assert [s.action for s in later.steps[: len(replayed)]] == replayed
        assert not set(failed_moves(earlier)) & {s.action for s in later.steps[len(replayed) :]}
    assert failed_moves(attempts[0]) and attempts[2].score > attempts[0].score
