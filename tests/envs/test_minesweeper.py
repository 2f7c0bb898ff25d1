from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest

from ttlearn.envs import make_env
from ttlearn.envs.minesweeper import (
    Board,
    Minesweeper,
    best_reveal,
    min_reveals,
    odds,
    reveal_reward,
    solvable_without_guessing,
)

SEEDS = range(30)

# 3x6, mines at (0,3) and (2,3); the first click (0,0) opens columns 1-3. Left hidden: the "2" at (1,3) between the
# mines, and columns 5-6, which one click on the 0 at (0,5) opens whole. Fewest reveals: 2.
#   . . 1 * 1 .
#   . . 2 2 2 .
#   . . 1 * 1 .
WALL_BOARD = Board(3, 6, frozenset({(0, 3), (2, 3)}))

# 3x5, mines at (0,0) and (0,3), first click (2,0): row 1 reads 1 1 1 1 1, so (0,2) is safe but says 1 again, and
# the rest of row 0 is a coin flip between {(0,0), (0,3)} and {(0,1), (0,4)}.
FIFTY_FIFTY = Board(3, 5, frozenset({(0, 0), (0, 3)}))


@pytest.fixture
def wall_env() -> Minesweeper:
    env = make_env("minesweeper", rows=3, cols=6, mines=2)
    env.load_board(WALL_BOARD, (0, 0))
    return env


def test_reveal_reward_matches_lamer_numbers():
    assert reveal_reward(True, False, 0, False) == -1.0
    assert reveal_reward(False, True, 0, False) == -0.1
    assert reveal_reward(False, False, 1, False) == 0.5
    assert reveal_reward(False, False, 6, False) == 2.0
    assert reveal_reward(False, False, 1, True) == 10.5


def test_scripted_game_rewards_hand_computed(wall_env: Minesweeper):
    assert len(wall_env.revealed) == 9 and wall_env.min_reveals == 2 and wall_env.no_guess
    first = wall_env.step("reveal 1 1")  # already open: ineffective
    assert (first.reward, first.done) == (-1.0, False)
    second = wall_env.step("reveal 1 6")  # the 0 at (0,5) opens columns 5-6: six cells
    assert second.reward == 2.0 and second.info["opened"] == 6 and not second.done
    third = wall_env.step("reveal 2 4")  # the last safe cell, a single one: +0.5 +10
    assert third.reward == 10.5 and third.done and wall_env.success()
    assert wall_env.score() == pytest.approx(11.5)
    assert "Won in 3 reveals" in wall_env.transcript()
    with pytest.raises(ValueError, match="attempt is over"):
        wall_env.step("reveal 3 5")


def test_mine_ends_the_attempt_and_restart_restores_the_board(wall_env: Minesweeper):
    initial = wall_env.restart()
    hit = wall_env.step("reveal 1 4")
    assert hit.reward == pytest.approx(-0.1) and hit.done and not wall_env.success()
    assert "X" in hit.observation.text
    again = wall_env.restart()
    assert again.text == initial.text and again.legal_actions == initial.legal_actions
    assert wall_env.revealed == set(wall_env.start) and wall_env.score() == 0 and wall_env.turn == 0


def test_attempt_ends_after_the_turn_budget():
    env = make_env("minesweeper", rows=3, cols=6, mines=2, turns=2)
    env.load_board(WALL_BOARD, (0, 0))
    env.step("reveal 1 1")
    assert env.step("reveal 1 1").done and not env.success()


@pytest.mark.parametrize("bad", ["reveal 0 1", "reveal 4 1", "open 1 1", "reveal 1"])
def test_malformed_or_off_board_actions_raise(wall_env: Minesweeper, bad: str):
    with pytest.raises(ValueError):
        wall_env.step(bad)


def test_parse_action_reads_free_text(wall_env: Minesweeper):
    legal = wall_env.legal_actions()
    assert wall_env.parse_action("I pick (3, 5).", legal) == "reveal 3 5"
    assert wall_env.parse_action("reveal row 2 col 4", legal) == "reveal 2 4"
    assert wall_env.parse_action("Row 1, column 6 looks safe", legal) == "reveal 1 6"
    assert wall_env.parse_action("not 1 1 ... <answer>reveal 2 6</answer>", legal) == "reveal 2 6"
    assert wall_env.parse_action("reveal 9 9", legal) is None
    assert wall_env.parse_action("no idea", legal) is None


def _brute_force(board: Board, revealed: set) -> tuple[dict, dict]:
    """P(mine) and P(cell and its hidden neighbours safe) by listing every consistent layout."""
    hidden = [c for c in board.cells() if c not in revealed]
    layouts = [
        set(m)
        for m in itertools.combinations(hidden, len(board.mines))
        if all(Board(board.rows, board.cols, frozenset(m)).count(c) == board.count(c) for c in revealed)
    ]
    mine = {c: Fraction(sum(c in m for m in layouts), len(layouts)) for c in hidden}
    opening = {
        c: Fraction(
            sum(not ({c, *board.neighbours(c)} - revealed) & m for m in layouts),
            len(layouts),
        )
        for c in hidden
    }
    return mine, opening


def test_odds_equal_brute_force_enumeration():
    rng = random.Random(5)
    for trial in range(12):
        board = Board(4, 5, frozenset(rng.sample([(r, c) for r in range(4) for c in range(5)], 3)))
        safe = [c for c in board.cells() if c not in board.mines]
        revealed = set()
        for cell in rng.sample(safe, rng.randint(1, 5)):
            revealed |= board.opened_by(cell)
        found = odds(4, 5, 3, {c: board.count(c) for c in revealed})
        mine, opening = _brute_force(board, revealed)
        assert found.mine == mine, trial
        assert found.opening == opening, trial


def test_fifty_fifty_board_needs_a_guess_and_the_oracle_takes_the_safe_cell_first():
    assert not solvable_without_guessing(FIFTY_FIFTY, (2, 0))
    env = make_env("minesweeper", rows=3, cols=5, mines=2)
    env.load_board(FIFTY_FIFTY, (2, 0))
    assert not env.no_guess
    assert env.oracle_action() == "reveal 1 3"  # (0,2): safe in both layouts
    env.step("reveal 1 3")
    known = {c: FIFTY_FIFTY.count(c) for c in env.revealed}
    assert min(odds(3, 5, 2, known).mine.values()) == Fraction(1, 2)


def test_min_reveals_is_a_lower_bound_no_one_beats():
    """Boards needing more than 7 reveals with full knowledge are never won in 7 turns, even by the oracle."""
    env = make_env("minesweeper")
    for seed in SEEDS:
        env.reset(seed)
        assert 1 <= env.min_reveals
        while not env.done:
            env.step(env.oracle_action(seed=seed))
        if env.success():
            assert env.turn >= env.min_reveals
        if env.min_reveals > env.turns:
            assert not env.success()


def test_oracle_wins_every_no_guess_board_given_enough_turns():
    """Without a turn limit (turns = cells) the oracle never guesses on a no-guess board, so it always wins."""
    env = make_env("minesweeper", turns=36)
    no_guess = 0
    for seed in SEEDS:
        env.reset(seed)
        while not env.done:
            env.step(env.oracle_action(seed=seed))
        if env.no_guess:
            no_guess += 1
            assert env.success(), seed
    assert no_guess >= 25


def test_best_reveal_prefers_a_sure_cascade(wall_env: Minesweeper):
    known = {c: WALL_BOARD.count(c) for c in wall_env.revealed}
    found = odds(3, 6, 2, known)
    assert found.safe() == [(0, 4), (0, 5), (1, 3), (1, 4), (1, 5), (2, 4), (2, 5)]
    assert best_reveal(found) == (0, 5) and found.opening[(0, 5)] == 1
    assert min_reveals(WALL_BOARD, wall_env.revealed) == 2


def test_first_click_cascades_and_leaves_work_to_do():
    env = make_env("minesweeper")
    for seed in SEEDS:
        env.reset(seed)
        assert env.board.count(env.first_click) == 0 and env.first_click not in env.board.mines
        assert not env.done and env.legal_actions()


@pytest.mark.parametrize(
    "options", [{"rows": 2}, {"cols": 17}, {"mines": 0}, {"rows": 3, "cols": 3, "mines": 1}, {"turns": 0}]
)
def test_bad_options_raise(options):
    with pytest.raises(ValueError):
        make_env("minesweeper", **options)


def test_rendering_has_numbers_and_every_cell_is_a_legal_action(wall_env: Minesweeper):
    obs = wall_env.restart()
    lines = obs.text.splitlines()
    assert lines[0].split() == ["1", "2", "3", "4", "5", "6"]
    assert lines[2].split() == ["2", ".", ".", "2", "?", "?", "?"]
    # all 18 cells: the 9 revealed ones too, so a choice-scoring player can earn LaMer's −1 for an ineffective reveal
    assert len(obs.legal_actions) == 18 and {"reveal 2 4", "reveal 1 1"} <= set(obs.legal_actions)


def test_invalid_reply_passes_the_turn_for_the_configured_penalty(wall_env: Minesweeper):
    passed = wall_env.invalid_step("I am not sure")
    assert (passed.reward, passed.done, passed.info["invalid"]) == (-0.1, False, True)
    assert wall_env.turn == 1 and len(wall_env.revealed) == 9  # the turn is spent, nothing opened
    harsh = make_env("minesweeper", rows=3, cols=6, mines=2, turns=1, invalid_reward=-0.5)
    harsh.load_board(WALL_BOARD, (0, 0))
    last = harsh.invalid_step("")
    assert (last.reward, last.done, harsh.score()) == (-0.5, True, -0.5)
    with pytest.raises(ValueError, match="attempt is over"):
        harsh.invalid_step("")


def test_hidden_facts_stay_in_instance_stats(wall_env: Minesweeper):
    wall_env.step("reveal 1 6")
    assert wall_env.instance_stats() == {"min_reveals": 2, "no_guess": True}
    seen = wall_env.transcript() + wall_env.restart().text + repr(wall_env.restart().data)
    assert "fewest" not in seen and "logic" not in seen and "min_reveals" not in seen and "no_guess" not in seen


def test_state_key_names_the_board_only(wall_env: Minesweeper):
    start = wall_env.state_key()
    wall_env.step("reveal 1 1")  # ineffective: same board, later turn, another log line
    assert wall_env.state_key() == start
    wall_env.step("reveal 1 6")
    assert wall_env.state_key() != start
    assert wall_env.restart() and wall_env.state_key() == start


def test_load_board_refuses_a_board_of_other_dimensions_or_an_unsafe_first_click():
    env = make_env("minesweeper")
    with pytest.raises(ValueError, match="3x6"):
        env.load_board(WALL_BOARD, (0, 0))
    small = make_env("minesweeper", rows=3, cols=6, mines=2)
    with pytest.raises(ValueError, match="safe"):
        small.load_board(WALL_BOARD, (0, 3))
