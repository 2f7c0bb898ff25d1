"""Repeated RPS: the maths, the opponent suite's ceilings, the environment contract and the ideal learner."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ttlearn.envs import ENVS, make_env
from ttlearn.envs.rps import RPSEnv, move_counts
from ttlearn.envs.rps_bots import (
    BOTS,
    CYCLES,
    PAPER,
    ROCK,
    SCISSORS,
    best_responses,
    expected_payoffs,
    game_favourite,
    make_bot,
    markov_prediction,
    match_prediction,
    parse_pattern,
    payoff,
)
from ttlearn.players.base import PLAYERS, Player
from ttlearn.players.basic import OraclePlayer, RandomPlayer
from ttlearn.players.rps_learner import RPSLearner, kt_probabilities, mix


def play(env: RPSEnv, player: Player, games: int, first_seed: int = 0) -> list[list[float]]:
    """A tiny session loop: the rewards of each round of each game (the lead's session module may not exist yet)."""
    games_rewards = []
    for game in range(games):
        obs = env.reset(first_seed + game)
        player.begin_episode(env)
        rewards = []
        while obs.legal_actions:
            decision = player.act(env, obs, "", seed=10_000 * game + len(rewards))
            result = env.step(decision.action)
            obs = result.observation
            rewards.append(result.reward)
        end = getattr(player, "end_episode", None)
        if end is not None:
            end(env, obs)
        games_rewards.append(rewards)
    return games_rewards


# --- maths, against hand-computed numbers ---------------------------------------------------------------------------


def test_payoff_table():
    assert [payoff(PAPER, ROCK), payoff(ROCK, SCISSORS), payoff(SCISSORS, PAPER)] == [1, 1, 1]
    assert [payoff(ROCK, PAPER), payoff(SCISSORS, ROCK), payoff(PAPER, SCISSORS)] == [-1, -1, -1]
    assert [payoff(m, m) for m in range(3)] == [0, 0, 0]


def test_expected_payoffs_and_best_response():
    # vs 60/20/20: rock 0.2 − 0.2 = 0, paper 0.6 − 0.2 = 0.4, scissors 0.2 − 0.6 = −0.4
    assert np.allclose(expected_payoffs([0.6, 0.2, 0.2]), [0.0, 0.4, -0.4])
    # vs 50/50 rock-paper: paper 0.5 beats scissors 0 and rock −0.5
    assert best_responses([0.5, 0.5, 0.0]) == [PAPER]
    assert best_responses([1 / 3] * 3) == [ROCK, PAPER, SCISSORS]


def test_kt_and_mixture():
    assert np.allclose(kt_probabilities([2, 0, 0]), [2.5 / 3.5, 0.5 / 3.5, 0.5 / 3.5])
    assert np.allclose(kt_probabilities([0, 0, 0]), [1 / 3] * 3)
    # weights 3 : 1 on "rock" and "paper" experts
    assert np.allclose(mix(np.array([[1.0, 0, 0], [0, 1.0, 0]]), np.array([math.log(3), 0.0])), [0.75, 0.25, 0])


def test_bot_predictors():
    # R P R P R: R was followed by P twice, so both orders predict paper
    assert markov_prediction([0, 1, 0, 1, 0], order=1) == PAPER
    assert markov_prediction([0, 1, 0, 1, 0], order=2) == PAPER
    assert markov_prediction([2], order=2) == SCISSORS  # nothing to follow yet: plain frequency
    assert markov_prediction([], order=2) is None
    # the suffix (0, 1) occurred at positions 0–1, followed by 2
    assert match_prediction([0, 1, 2, 0, 1], [0, 1, 2, 0, 1]) == 2
    assert match_prediction([0], [1]) is None


@pytest.mark.parametrize("period", sorted(CYCLES))
def test_cycle_patterns_have_their_stated_period(period):
    pattern = parse_pattern(CYCLES[period])
    assert len(pattern) == period
    assert all(pattern != pattern[shift:] + pattern[:shift] for shift in range(1, period))


# --- the opponent suite ---------------------------------------------------------------------------------------------


def round_sd(bot_name: str) -> float:
    """Per-round SD of the best responder's score, √(P(win) + P(loss) − ceiling²), against the bot's first-round
    distribution: the same in every round for the stochastic bots, 0 for the deterministic ones (exact ceiling)."""
    bot = make_bot(bot_name, seed=0)
    dist = bot.distribution()
    move = best_responses(dist)[0]
    p_win, p_loss = dist[(move - 1) % 3], dist[(move + 1) % 3]
    return math.sqrt(max(p_win + p_loss - bot.ceiling**2, 0.0))


@pytest.mark.parametrize("name", list(BOTS))
def test_oracle_reaches_the_documented_ceiling(name):
    """Per-round mean over N rounds within 3·σ/√N of the ceiling, σ the binomial-style SD of one round (0.80 for
    60/20/20, 0.83 for 40/30/30, 0.76 for half-random, 0.82 for Nash): exact for the deterministic bots."""
    stochastic = round_sd(name) > 0
    games, rounds = (4, 400) if stochastic else (2, 60)
    env = make_env("rps", opponent=name, rounds=rounds, seed=7)
    rewards = np.concatenate(play(env, OraclePlayer(), games))
    tolerance = 3 * round_sd(name) / math.sqrt(rewards.size) + 1e-12
    assert abs(rewards.mean() - env.bot.ceiling) <= tolerance, (name, rewards.mean(), env.bot.ceiling, tolerance)


def test_documented_ceilings():
    assert {n: make_bot(n, 0).ceiling for n in ("constant", "biased", "biased-40", "half-random", "nash")} == (
        pytest.approx({"constant": 1.0, "biased": 0.4, "biased-40": 0.1, "half-random": 0.5, "nash": 0.0})
    )


@pytest.mark.parametrize("name", ["cycle3", "beat-last", "iocaine", "biased"])
def test_nash_random_scores_zero_within_the_noise_band(name):
    rounds = 1000
    env = make_env("rps", opponent=name, rounds=rounds, seed=1)
    (rewards,) = play(env, RandomPlayer(), 1)
    assert abs(sum(rewards)) <= 1.96 * 0.816 * math.sqrt(rounds)


SUITES = {
    "development": [
        *("biased", "biased-paper", "biased-scissors", "cycle-rrps", "cycle-ppsr", "cycle-ssrp"),
        *("switch-rock-paper", "switch-paper-scissors", "switch-scissors-rock"),
    ],
    "held-out": [
        *("biased-rock-50", "biased-paper-50", "biased-scissors-50", "cycle-rprsr", "cycle-psprp", "cycle-srsps"),
        *("switch-rock-scissors", "switch-paper-rock", "switch-scissors-paper"),
    ],
}
"""MemoPilot's opponent suites of issue 40 (docs/data-register.md): every move is some opponent's favourite."""


def constant_move_value(name: str, move: int, rounds: int = 6) -> float:
    """Expected per-round score of playing `move` all game against a bot whose distribution depends on the round
    only (every bot of the suites): Σ_t E[u(move) | p_t] / rounds."""
    bot = make_bot(name, seed=0)
    total = 0.0
    for _ in range(rounds):
        dist = bot.distribution()
        total += expected_payoffs(dist)[move]
        bot.observe(move, int(np.argmax(dist)))
    return total / rounds


@pytest.mark.parametrize("suite", sorted(SUITES))
def test_no_constant_note_beats_the_memopilot_suites(suite: str):
    """A note that always names one move scores 0 on average over each suite, while every opponent has a move that
    beats it all game (+0.25 to +0.5 per round over 6 rounds): only a note that reads the opponent can win."""
    names = SUITES[suite]
    for move in (ROCK, PAPER, SCISSORS):
        assert np.mean([constant_move_value(n, move) for n in names]) == pytest.approx(0.0, abs=1e-9)
    best = {n: max(constant_move_value(n, m) for m in range(3)) for n in names}
    assert min(best.values()) >= 0.25, best
    assert constant_move_value("cycle-rrps", PAPER) == pytest.approx(0.5)  # rock 4, paper 1, scissors 1 of 6
    assert constant_move_value("switch-rock-paper", PAPER) == pytest.approx(0.35)  # 3 × 0.7 + 3 × 0
    assert not set(SUITES["development"]) & set(SUITES["held-out"])


@pytest.mark.parametrize("name", ["constant", "biased", "cycle-rrps", "switch-rock-paper"])
def test_a_schedule_is_what_the_bot_plays_whatever_the_player_does(name: str):
    bot = make_bot(name, seed=0)
    schedule = bot.schedule(6)
    for played, expected in enumerate(schedule):
        assert bot.distribution() == pytest.approx(expected)
        bot.observe(played % 3, int(np.argmax(expected)))
    assert make_bot("beat-last", seed=0).schedule(6) is None  # it answers the player's moves: nothing to know ahead


def test_the_game_favourite_is_the_reading_whose_counter_scores_most():
    def favourite(name: str) -> int:
        return game_favourite(make_bot(name, seed=0).schedule(6))

    assert favourite("biased-paper") == PAPER
    assert favourite("cycle-rrps") == ROCK  # R R P S R R: rock 4 of 6, and paper scores +3
    assert favourite("cycle-ssrp") == SCISSORS
    # a switch pools to a tie (scissors 0.45, rock 0.45): the reading is the first lean, whose counter, rock, wins
    # rounds 1-3 (+0.7 each) and draws the second lean; naming rock (counter paper) would score 3 × −0.7 + 3 × 0.7 = 0
    assert favourite("switch-scissors-rock") == SCISSORS
    assert favourite("switch-rock-paper") == ROCK


def test_switch_bots_lean_one_way_then_the_other():
    bot = make_bot("switch-rock-paper", seed=0)
    seen = []
    for _ in range(6):
        seen.append(bot.distribution().tolist())
        bot.observe(ROCK, ROCK)
    assert seen[:3] == [pytest.approx([0.8, 0.1, 0.1])] * 3 and seen[3:] == [pytest.approx([0.1, 0.8, 0.1])] * 3
    assert bot.ceiling == pytest.approx(0.7)
    assert make_bot("biased-scissors", 0).distribution().tolist() == pytest.approx([0.2, 0.2, 0.6])
    assert make_bot("cycle-psprp", 0).distribution().tolist() == [0.0, 1.0, 0.0]


def test_probe_replays_one_string_per_env_seed():
    env = make_env("rps", opponent="probe", rounds=30, seed=5)
    play(env, RandomPlayer(), 1, first_seed=0)
    first = list(env.opp_moves)
    play(env, RandomPlayer(), 1, first_seed=99)
    assert env.opp_moves == first
    assert len(set(first)) == 3  # it uses every move: not a trivial constant
    other = make_env("rps", opponent="probe", rounds=30, seed=6)
    play(other, RandomPlayer(), 1)
    assert other.opp_moves != first


# --- the environment contract ---------------------------------------------------------------------------------------


def test_registered_and_configurable():
    env = make_env("rps", opponent="wsls", rounds=5, seed=3)
    assert ENVS.get("rps") is RPSEnv
    assert env.config() == {"opponent": "wsls", "rounds": 5, "seed": 3}
    assert RPSEnv(**env.config()).config() == env.config()


def test_bad_options_raise_clear_errors():
    with pytest.raises(ValueError, match="cycle3.*iocaine.*probe"):
        make_env("rps", opponent="shiny")
    with pytest.raises(ValueError, match="rounds"):
        make_env("rps", rounds=0)
    with pytest.raises(ValueError, match="accepts"):
        make_env("rps", players=2)
    env = make_env("rps", rounds=1)
    with pytest.raises(ValueError, match="reset"):
        env.restart()
    env.reset(0)
    with pytest.raises(ValueError, match="illegal"):
        env.step("lizard")
    env.step("rock")
    with pytest.raises(ValueError, match="illegal"):
        env.step("rock")


def test_one_game_scores_rewards_and_texts():
    env = make_env("rps", opponent="constant", rounds=3)
    obs = env.reset(0)
    assert obs.legal_actions == ("rock", "paper", "scissors")
    assert obs.text.startswith("Round 1 of 3.")
    assert [env.step(a).reward for a in ("paper", "rock", "scissors")] == [1.0, 0.0, -1.0]
    assert env.score() == 0.0 and env.success() is False
    assert env.transcript() == (
        "R1 you=paper opp=rock win; R2 you=rock opp=rock draw; R3 you=scissors opp=rock loss; final score +0"
    )
    assert env.legal_actions() == () and env.done
    with pytest.raises(ValueError):
        env.step("paper")
    listed = paper_rock_scissors_against_rock("by-player")
    assert listed.transcript() == (
        "the opponent played rock, rock, rock; you played paper, rock, scissors; final score +0"
    )
    assert listed.config()["transcript"] == "by-player" and "transcript" not in env.config()
    assert RPSEnv(**listed.config()).config() == listed.config()
    assert paper_rock_scissors_against_rock("tally").transcript() == (
        "the opponent played rock 3 times, paper 0 times, scissors 0 times (in order: rock, rock, rock); "
        "you played paper, rock, scissors; final score +0"
    )
    with pytest.raises(ValueError, match="by-player"):
        make_env("rps", transcript="table")
    obs = env.restart()
    assert obs.data == {"round": 1, "rounds": 3, "my_moves": [], "opp_moves": [], "score": 0}
    env.step("paper")
    assert env.success() is True


def test_observation_shows_recent_history_and_task_hides_the_bot():
    env = make_env("rps", opponent="iocaine", rounds=20)
    obs = env.reset(0)
    for _ in range(12):
        obs = env.step("rock").observation
    assert obs.data["round"] == 13 and len(obs.data["opp_moves"]) == 12
    assert "R12 you=rock" in obs.text and "R2 you=" not in obs.text  # the last 10 rounds only
    assert "round 13 of 20" in env.task() and "iocaine" not in env.task().lower()
    assert len(env.describe()) < 500


# --- the ideal learner ----------------------------------------------------------------------------------------------


def test_learner_is_registered():
    assert PLAYERS.get("learner") is RPSLearner


def test_learner_beats_cycle3_after_ten_rounds():
    (rewards,) = play(make_env("rps", opponent="cycle3", rounds=30), RPSLearner(), 1)
    assert np.mean(rewards[10:]) >= 0.8


def test_learner_beats_beat_last_within_a_game():
    (rewards,) = play(make_env("rps", opponent="beat-last", rounds=20), RPSLearner(), 1)
    assert sum(rewards) >= 10


def test_learner_learns_the_probe_across_games():
    scores = [sum(r) for r in play(make_env("rps", opponent="probe", rounds=20, seed=2), RPSLearner(), 3)]
    assert scores[2] >= scores[0] + 10 and scores[2] >= 15


def test_learner_state_round_trips_through_json():
    learner = RPSLearner()
    env = make_env("rps", opponent="cycle5", rounds=15)
    play(env, learner, 2)
    copy = RPSLearner()
    copy.load(json.loads(json.dumps(learner.state())))
    obs = env.reset(9)
    learner.begin_episode(env)
    copy.begin_episode(env)
    assert copy.act(env, obs, "", seed=1) == learner.act(env, obs, "", seed=1)
    with pytest.raises(ValueError, match="unknown experts"):
        copy.load({"counts": {"oracle": {}}})


def paper_rock_scissors_against_rock(transcript: str) -> RPSEnv:
    """A 3-round game against `constant` (always rock), played paper, rock, scissors, its transcript in `transcript`."""
    env = make_env("rps", opponent="constant", rounds=3, transcript=transcript)
    env.reset(0)
    for move in ("paper", "rock", "scissors"):
        env.step(move)
    return env


def test_move_counts_lists_the_most_frequent_first_and_breaks_ties_in_move_order():
    rock, paper, scissors = 0, 1, 2
    assert move_counts([scissors, paper, scissors, rock, scissors]) == "scissors 3 times, rock 1 times, paper 1 times"
    assert move_counts([paper, scissors]) == "paper 1 times, scissors 1 times, rock 0 times"
    assert move_counts([]) == "rock 0 times, paper 0 times, scissors 0 times"
