from __future__ import annotations

import pytest

from ttlearn.envs import make_env
from ttlearn.envs.sokoban import (
    Room,
    Sokoban,
    State,
    distances_to_solution,
    move_reward,
    solve,
)

SEEDS = range(30)

# Row 1 has a box left of a target; row 2 a box two cells left of a target. Optimal: push the first box (1 move),
# walk round to the second (2), push it twice (2) = 5 moves.
HAND_LEVEL = [
    "######",
    "#@$._#",
    "#_$_.#",
    "#____#",
    "#____#",
    "######",
]


def level_from_text(rows: list[str]) -> tuple[Room, State]:
    cells = {(r, c): ch for r, line in enumerate(rows) for c, ch in enumerate(line)}
    room = Room(
        len(rows),
        frozenset(p for p, ch in cells.items() if ch == "#"),
        frozenset(p for p, ch in cells.items() if ch in ".*+"),
    )
    player = next(p for p, ch in cells.items() if ch in "@+")
    return room, State(player, frozenset(p for p, ch in cells.items() if ch in "$*"))


@pytest.fixture
def hand_env() -> Sokoban:
    env = make_env("sokoban")
    env.load_level(*level_from_text(HAND_LEVEL))
    return env


def test_move_reward_matches_lamer_numbers():
    assert move_reward(0, 0, False) == pytest.approx(-0.1)  # plain or blocked move
    assert move_reward(0, 1, False) == pytest.approx(0.9)  # box onto a target
    assert move_reward(1, 0, False) == pytest.approx(-1.1)  # box off a target
    assert move_reward(1, 2, True) == pytest.approx(10.9)  # last box onto its target


def test_scripted_rewards_hand_computed(hand_env: Sokoban):
    assert hand_env.optimal_length == 5
    first = hand_env.step("right")  # box (1,2) onto the target at (1,3)
    assert first.reward == pytest.approx(0.9) and not first.done
    second = hand_env.step("up, left, down")  # wall above: blocked -0.1, then two plain moves
    assert second.reward == pytest.approx(-0.3)
    assert second.info["blocked"] == 1
    third = hand_env.step("right right left")  # push, push onto target -> solved; "left" never played
    assert third.reward == pytest.approx(-0.1 + 10.9)
    assert third.done and hand_env.success()
    assert hand_env.score() == pytest.approx(0.9 - 0.3 + 10.8)
    assert "Solved in 6 moves over 3 turns." in hand_env.transcript()
    with pytest.raises(ValueError, match="attempt is over"):
        hand_env.step("up")


def test_box_off_target_is_penalised_and_restart_restores_level(hand_env: Sokoban):
    initial = hand_env.restart().text
    result = hand_env.step("right, right")  # onto the target, then off it again
    assert result.reward == pytest.approx(0.9 - 1.1)
    assert hand_env.state.boxes == {(1, 4), (2, 2)}
    assert hand_env.restart().text == initial
    assert hand_env.state == hand_env.start and hand_env.turn == 0 and hand_env.score() == 0


def test_attempt_ends_after_the_turn_budget(hand_env: Sokoban):
    for _ in range(hand_env.turns):
        result = hand_env.step("down")
    assert result.done and not hand_env.success()
    assert hand_env.score() == pytest.approx(-0.1 * hand_env.turns)


@pytest.mark.parametrize("bad", ["", "jump", "up, up, up, up", "up; north"])
def test_malformed_actions_raise(hand_env: Sokoban, bad: str):
    with pytest.raises(ValueError):
        hand_env.step(bad)


def test_parse_action_extracts_up_to_three_moves(hand_env: Sokoban):
    legal = hand_env.legal_actions()
    assert hand_env.parse_action("Go Up, then LEFT.", legal) == "up, left"
    assert hand_env.parse_action("down down right left up", legal) == "down, down, right"
    assert hand_env.parse_action("I considered up. <action>right, down</action>", legal) == "right, down"
    assert hand_env.parse_action("upward leftist", legal) is None


def test_generated_levels_have_optimal_length_in_range_by_independent_search():
    env = make_env("sokoban")
    lengths = set()
    for seed in SEEDS:
        env.reset(seed)
        plan = solve(env.room, env.start)
        assert plan is not None and len(plan) == env.optimal_length
        assert 5 <= env.optimal_length <= 21
        lengths.add(env.optimal_length)
    assert len(lengths) >= 8  # lengths are spread over the range, not all short


def test_reverse_search_labels_match_forward_search_on_a_room():
    room, _ = level_from_text(HAND_LEVEL)
    labels = distances_to_solution(room)
    for state, length in list(labels.items())[::37]:
        assert len(solve(room, state)) == length  # type: ignore[arg-type]


def test_oracle_solves_every_level_within_the_turn_budget():
    env = make_env("sokoban")
    for seed in SEEDS:
        env.reset(seed)
        while not env.done:
            env.step(env.oracle_action(seed=seed))
        assert env.success(), seed
        assert env.moves_made == env.optimal_length
        assert env.turn == -(-env.optimal_length // env.actions_per_turn)


def test_oracle_plays_a_legal_move_from_a_deadlock(hand_env: Sokoban):
    hand_env.step("right, right")  # box pushed into the corner at (1,4): unsolvable
    assert solve(hand_env.room, hand_env.state) is None
    assert hand_env.oracle_action() in hand_env.legal_actions()


@pytest.mark.parametrize(
    "options",
    [
        {"size": 4},
        {"boxes": 0},
        {"size": 5, "boxes": 4},
        {"min_moves": 9, "max_moves": 8},
        {"turns": 0},
        {"actions_per_turn": 0},
    ],
)
def test_bad_options_raise(options):
    with pytest.raises(ValueError):
        make_env("sokoban", **options)


def test_observation_and_texts_show_numbers_and_legend():
    env = make_env("sokoban", seed=3)
    obs = env.restart()
    assert obs.text.splitlines()[0].split() == ["1", "2", "3", "4", "5", "6"]
    assert "Legend:" in obs.text and "Legend:" in env.task()
    assert obs.legal_actions == ("up", "down", "left", "right")
    assert env.config()["seed"] == 3


def test_invalid_reply_passes_the_turn_for_the_configured_penalty(hand_env: Sokoban):
    passed = hand_env.invalid_step("no idea")
    assert (passed.reward, passed.done, passed.info["invalid"]) == (pytest.approx(-0.1), False, True)
    assert (hand_env.turn, hand_env.moves_made, hand_env.state) == (1, 0, hand_env.start)
    harsh = make_env("sokoban", turns=1, invalid_reward=-2.0)
    harsh.load_level(*level_from_text(HAND_LEVEL))
    assert harsh.invalid_step("").done and harsh.score() == -2.0
    assert harsh.config()["invalid_reward"] == -2.0


def test_hidden_facts_stay_in_instance_stats(hand_env: Sokoban):
    hand_env.step("right")
    assert hand_env.instance_stats() == {"optimal_length": 5}
    seen = hand_env.transcript() + hand_env.restart().text + repr(hand_env.restart().data)
    assert "optimal" not in seen


def test_state_key_names_player_and_boxes_only(hand_env: Sokoban):
    start = hand_env.state_key()
    hand_env.step("up")  # into the wall: blocked, same state, but the turn counter and log change
    assert hand_env.state_key() == start == "player 1,1 boxes 1,2 2,2"
    hand_env.step("right")
    assert hand_env.state_key() == "player 1,2 boxes 1,3 2,2"
