"""Heads-up limit hold'em: the rules on pokerkit, the environment contract, duplicate dealing and the styled bots."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ttlearn.envs import make_env
from ttlearn.envs.holdem import (
    BIG_BLIND_SEAT,
    BUTTON,
    HoldemEnv,
    LimitHand,
    hands_needed,
    mbb_per_hand,
    per_hand_sd,
)
from ttlearn.envs.holdem_bots import (
    NO_PAIR,
    STYLES,
    TOP_PAIR,
    TWO_PAIR_PLUS,
    WEAK_PAIR,
    StyleStats,
    chen_score,
    get_bot,
    hand_class,
    made_tier,
    preflop_top_fraction,
)

# button AsAh, big blind KdKc, a dry board: the button's aces win a showdown
ACES_VS_KINGS = ["As", "Ah", "Kd", "Kc", "2c", "7d", "9h", "Js", "3c"]


def play_env(env: HoldemEnv, style: str, seed: int = 0) -> list[float]:
    """Play a whole game with the bot `style` in the player's seat; the step rewards."""
    env.reset(seed)
    rewards, done = [], False
    while not done:
        result = env.step(env.bot_action(style))
        rewards.append(result.reward)
        done = result.done
    return rewards


# ---------------------------------------------------------------- formulas


def test_mbb_per_hand_and_hands_needed_match_hand_computed_values():
    assert mbb_per_hand(3.5, 20) == pytest.approx(175.0)
    assert mbb_per_hand(-1.0, 4) == pytest.approx(-250.0)
    assert mbb_per_hand(2.0, 0) == 0.0
    assert hands_needed(5.0) == pytest.approx(9604.0)  # (1.96 · 5 / 0.1)² = 98²
    assert hands_needed(2.0, margin_bb=0.05, z=2.0) == pytest.approx(6400.0)  # (2 · 2 / 0.05)² = 80²


def test_per_hand_sd_plain_and_duplicate_match_hand_computed_values():
    assert per_hand_sd([1, -1, 3, -3]) == pytest.approx(math.sqrt(20 / 3))  # mean 0, (1 + 1 + 9 + 9) / 3
    assert per_hand_sd([1, -1, 3, -3], duplicate=True) == 0.0  # every pair cancels
    assert per_hand_sd([2, 0, 0, 0], duplicate=True) == pytest.approx(1.0)  # √2 · SD(1, 0) = √2 · √0.5
    with pytest.raises(ValueError, match="pairs"):
        per_hand_sd([1, 2, 3], duplicate=True)


@pytest.mark.parametrize(
    ("hole", "score"),
    [
        (("Ah", "Ad"), 20),
        (("Ah", "Kh"), 12),
        (("Kh", "Qd"), 8),
        (("Jh", "Th"), 9),
        (("2c", "2d"), 5),
        (("5c", "5d"), 5),
        (("9c", "9d"), 9),
        (("7c", "2d"), -1),
        (("Ac", "5c"), 7),
    ],
)
def test_chen_score_matches_hand_computed_values(hole, score):
    # JTs: J 6 + suited 2 + connector below a queen 1 = 9; 72o: 3.5 − 5 (gap 4) → ceil(−1.5) = −1;
    # A5s: 10 + suited 2 − 5 (gap 8) = 7; 22: 2 · 1 raised to the pair minimum 5
    assert chen_score(hole) == score


def test_preflop_top_fraction_orders_hands():
    assert preflop_top_fraction(("Ah", "Ad")) == pytest.approx(6 / 1326)
    assert preflop_top_fraction(("7c", "2d")) == 1.0
    assert preflop_top_fraction(("Ah", "Kh")) < preflop_top_fraction(("Jh", "Th")) < preflop_top_fraction(("9c", "4d"))


@pytest.mark.parametrize(
    ("hole", "board", "tier"),
    [
        (("Ah", "Kd"), ("Ks", "7c", "2d"), TOP_PAIR),
        (("Ah", "Ad"), ("Ks", "9c", "2d"), TOP_PAIR),  # overpair
        (("7h", "7d"), ("Ks", "9c", "2d"), WEAK_PAIR),  # underpair
        (("Ah", "7d"), ("Ks", "Kc", "7c"), WEAK_PAIR),  # two pair, only the sevens are ours
        (("Ah", "5d"), ("Ks", "Kc", "2d"), NO_PAIR),  # the board's pair
        (("Ah", "5d"), ("Ks", "9c", "2d"), NO_PAIR),
        (("Kh", "9d"), ("Ks", "9c", "2d"), TWO_PAIR_PLUS),
        (("Ah", "2h"), ("Kh", "9h", "4h"), TWO_PAIR_PLUS),  # flush
        (("2h", "3d"), ("As", "Ks", "Qs", "Js", "Ts"), NO_PAIR),  # the board plays
    ],
)
def test_made_tier(hole, board, tier):
    assert made_tier(hole, board) == tier


def test_hand_class_names_the_holding_without_cards():
    assert hand_class(("Ah", "Ad"), ()) == "premium pocket pair"
    assert hand_class(("Jh", "Th"), ()) == "premium suited hand"
    assert hand_class(("7c", "2d"), ()) == "weak offsuit hand"
    assert hand_class(("Ah", "Kd"), ("Ks", "7c", "2d")) == "top pair or overpair"


def test_style_stats_match_hand_counted_values():
    stats = StyleStats()
    stats.add_hand([(0, "call"), (1, "bet"), (2, "call")])  # vpip
    stats.add_hand([(0, "raise"), (1, "raise"), (1, "call")])  # vpip, pfr
    stats.add_hand([(0, "fold")])  # a decision, no vpip
    stats.add_hand([])  # a walk: no decision, not counted
    assert (stats.hands, stats.vpip, stats.pfr) == (3, pytest.approx(2 / 3), pytest.approx(1 / 3))
    assert stats.af == pytest.approx((1 + 1) / (1 + 1))
    never_calls = StyleStats()
    never_calls.add_hand([(0, "raise"), (1, "bet")])
    assert never_calls.af == math.inf


# ---------------------------------------------------------------- rules


def test_blinds_are_posted_and_the_button_acts_first_pre_flop():
    hand = LimitHand(ACES_VS_KINGS)
    assert hand.put_in == {BUTTON: 1, BIG_BLIND_SEAT: 2}
    assert hand.actor == BUTTON
    assert hand.to_call == 1
    assert hand.legal_actions() == ("fold", "call", "raise")


def test_big_blind_has_the_option_and_acts_first_after_the_flop():
    hand = LimitHand(ACES_VS_KINGS)
    hand.apply("call")  # the button completes
    assert hand.actor == BIG_BLIND_SEAT and hand.legal_actions() == ("check", "raise")
    hand.apply("check")
    assert hand.board == ("2c", "7d", "9h") and hand.actor == BIG_BLIND_SEAT
    assert hand.legal_actions() == ("check", "bet")
    hand.apply("check")
    assert hand.actor == BUTTON
    hand.apply("check")
    assert hand.board[-1] == "Js" and hand.actor == BIG_BLIND_SEAT  # turn: big blind first again


def test_bet_sizes_per_street():
    hand = LimitHand(ACES_VS_KINGS)
    hand.apply("raise")
    assert hand.history[-1].amount == 4  # pre-flop raise to 2 + 2
    hand.apply("call")
    hand.apply("bet")
    assert hand.history[-1].amount == 2  # flop bet: small bet
    hand.apply("raise")
    assert hand.history[-1].amount == 4
    hand.apply("call")
    hand.apply("bet")
    assert hand.history[-1].amount == 4  # turn bet: big bet
    hand.apply("raise")
    assert hand.history[-1].amount == 8
    hand.apply("call")
    hand.apply("bet")
    assert hand.history[-1].amount == 4  # river bet: big bet
    assert hand.put_in == {BIG_BLIND_SEAT: 4 + 4 + 8 + 4, BUTTON: 4 + 4 + 8}  # the big blind bets first


def test_raise_cap_is_four_bets_per_round():
    hand = LimitHand(ACES_VS_KINGS)
    for _ in range(3):  # the big blind is bet 1; three raises make 4
        hand.apply("raise")
    assert hand.state.bets[BUTTON] == 8 or hand.state.bets[BIG_BLIND_SEAT] == 8
    assert hand.legal_actions() == ("fold", "call")
    hand.apply("call")
    hand.apply("bet")
    for _ in range(3):
        hand.apply("raise")
    assert hand.bets_this_round == 4 and hand.legal_actions() == ("fold", "call")


def test_showdown_winner_takes_the_losers_chips():
    hand = LimitHand(ACES_VS_KINGS)
    hand.apply("raise")
    hand.apply("call")
    for _ in range(6):
        hand.apply("check")
    assert hand.over and hand.showdown
    assert hand.net(BUTTON) == 4 and hand.net(BIG_BLIND_SEAT) == -4


def test_split_pot_and_fold():
    royal_board = ["As", "Ah", "Kd", "Kc", "Qh", "Jh", "Th", "9h", "8h"]  # a straight flush on board: both play it
    hand = LimitHand(royal_board)
    hand.apply("call")
    for _ in range(7):
        hand.apply("check")
    assert hand.net(BUTTON) == hand.net(BIG_BLIND_SEAT) == 0
    folded = LimitHand(ACES_VS_KINGS)
    folded.apply("raise")
    folded.apply("fold")
    assert folded.over and not folded.showdown and folded.net(BUTTON) == 2 and folded.net(BIG_BLIND_SEAT) == -2


def test_payoffs_sum_to_zero_over_random_play():
    rng = np.random.default_rng(7)
    bot = get_bot("random")
    deck = [r + s for r in "23456789TJQKA" for s in "cdhs"]
    for _ in range(300):
        hand = LimitHand(list(rng.permutation(deck)[:9]))
        while not hand.over:
            hand.apply(bot.act(hand.situation(hand.actor), rng))
        assert hand.net(BUTTON) + hand.net(BIG_BLIND_SEAT) == 0


def test_bad_input_raises_value_error():
    hand = LimitHand(ACES_VS_KINGS)
    with pytest.raises(ValueError, match="legal now: fold, call, raise"):
        hand.apply("check")
    with pytest.raises(ValueError, match="9 distinct cards"):
        LimitHand(["As"] * 9)
    with pytest.raises(ValueError, match="unknown hold'em opponent 'shark'"):
        HoldemEnv(opponent="shark")
    with pytest.raises(ValueError, match="hands must be"):
        HoldemEnv(hands=0)
    env = HoldemEnv(hands=1)
    with pytest.raises(ValueError, match="reset"):
        env.step("call")
    env.reset(0)
    with pytest.raises(ValueError, match="illegal"):
        env.step("check")  # the button faces the big blind
    with pytest.raises(ValueError, match="illegal"):
        env.step("banana")


# ---------------------------------------------------------------- environment


def test_environment_contract_and_observation_text():
    env = make_env("holdem", opponent="maniac", hands=4, seed=3)
    obs = env.reset(11)
    assert obs.text.startswith("Hand 1/4. You are the button")
    for part in (
        "Your cards:",
        "Board:",
        "Pot: 3 chips (you put in 1, the opponent 2)",
        "Betting: pre-flop",
        "Legal actions: fold, call, raise",
    ):
        assert part in obs.text
    assert obs.legal_actions == env.legal_actions() == ("fold", "call", "raise")
    assert "maniac" not in env.task() and "pre-flop" in env.task() and "button" in env.task()
    assert "Limit Texas Hold'em" in env.describe()
    rewards = play_env(env, "calling-station", seed=11)
    assert sum(rewards) == pytest.approx(env.score())
    assert len(env.records) == 4 and env.transcript().count("\n") == 3
    assert env.success() == (env.score() > 0)
    assert env.mbb_per_hand() == pytest.approx(1000 * env.score() / 4)


def test_player_seat_alternates_and_big_blind_sees_the_button_act_first():
    env = HoldemEnv(opponent="calling-station", hands=2)
    env.reset(0)
    env.step("call")  # button completes; the station checks its option
    assert env.task().startswith("Heads-up limit hold'em, flop, you are the button")
    while env.records == ():
        obs = env.step("check").observation
    assert obs.data["seat"] == "big blind" and obs.data["hand"] == 2
    assert "opponent calls 1" in obs.text  # the station completed before the player's first decision


def test_duplicate_deals_each_hand_twice_with_seats_swapped():
    env = HoldemEnv(opponent="calling-station", hands=10, duplicate=True)
    play_env(env, "calling-station")  # two stations always reach showdown: every hole card is shown
    records = env.records
    assert len(records) == 20
    for first, mirror in zip(records[0::2], records[1::2]):
        assert first.player_seat == BUTTON and mirror.player_seat == BIG_BLIND_SEAT
        assert (first.player_cards, first.board) == (mirror.opponent_cards, mirror.board)


@pytest.mark.parametrize("style", ["tight", "loose-aggressive", "random"])
def test_duplicate_self_play_scores_exactly_zero(style):
    env = HoldemEnv(opponent=style, hands=100, duplicate=True, seed=1)
    play_env(env, style)
    assert env.score() == 0
    assert any(r.player_net_chips for r in env.records)  # the hands themselves were not all zero


@pytest.mark.parametrize("style", list(STYLES))
def test_styled_opponents_play_inside_their_documented_ranges(style):
    """2,000 hands against the `tight` bot in the player's seat, as the ranges are documented."""
    env = HoldemEnv(opponent=style, hands=2000)
    play_env(env, "tight")
    stats = StyleStats()
    for record in env.records:
        stats.add_hand(record.decisions(1 - record.player_seat))
    spec = STYLES[style]
    assert spec.vpip[0] <= stats.vpip <= spec.vpip[1]
    assert spec.pfr[0] <= stats.pfr <= spec.pfr[1]
    assert spec.af[0] <= stats.af <= spec.af[1]
