"""Styled opponents for heads-up limit hold'em, the hand-strength measures they play by, and their style statistics.

A bot sees only what a player at the table sees (a `Situation`) and draws its randomness from the numpy Generator it
is handed, so the same situation and generator state always give the same action. That is what makes duplicate
self-play cancel exactly and a game replayable.

Hand strength comes from two cheap measures rather than Monte-Carlo equity (hundreds of hand rankings a decision):
- pre-flop: the Chen formula, turned into the share of the 1,326 starting hands at least as strong ("top 20 %");
- post-flop: a made-hand tier built on pokerkit's hand ranking (no pair / weak pair / top pair / two pair or better).

Style statistics, the standard tracker definitions (per player, over the hands where they had a pre-flop decision):
  VPIP = hands with a voluntary pre-flop call, bet or raise / hands with a pre-flop decision
  PFR  = hands with a pre-flop bet or raise / hands with a pre-flop decision
  AF   = post-flop (bets + raises) / post-flop calls
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from typing import Protocol

import numpy as np
from pokerkit import Card, StandardHighHand
from pokerkit.lookups import Entry, Label

RANKS = "23456789TJQKA"
SUITS = "cdhs"
DECK: tuple[str, ...] = tuple(rank + suit for rank in RANKS for suit in SUITS)

AGGRESSIVE = ("bet", "raise")


@dataclass(frozen=True)
class Situation:
    """A seat's view of the table when it must act: no hidden information.

    `street` is 0 pre-flop, 1 flop, 2 turn, 3 river; `legal` the exact action strings accepted now.
    """

    hole: tuple[str, str]
    board: tuple[str, ...]
    street: int
    button: bool
    legal: tuple[str, ...]


# ---------------------------------------------------------------- hand strength


def _rank(card: str) -> int:
    return RANKS.index(card[0])


_CARDS = {text: next(Card.parse(text)) for text in DECK}


@lru_cache(maxsize=1 << 15)
def hand_entry(hole: tuple[str, ...], board: tuple[str, ...]) -> Entry:
    """pokerkit's ranking entry of the best five-card hand in hole + board; a stronger hand has a greater entry.

    Takes the best lookup entry over the five-card subsets, as pokerkit's `StandardHighHand.from_game` does, without
    building a hand object per subset (4× faster); cached, since a duplicate deal is ranked twice.
    """
    cards = [_CARDS[c] for c in (*hole, *board)]
    return max(StandardHighHand.lookup.get_entry(five) for five in combinations(cards, 5))


def chen_score(hole: Sequence[str]) -> int:
    """Bill Chen's pre-flop score of two hole cards.

    score = ceil(high-card points, doubled for a pair (at least 5)
                 + 2 if suited − gap penalty (0, 1, 2, 4, 5 for gaps 0, 1, 2, 3, ≥4)
                 + 1 if the gap is ≤ 1 and both cards are below a queen)
    with high-card points A 10, K 8, Q 7, J 6, and half the face value below (T 5 … 2 1).
    """
    high, low = sorted((_rank(c) for c in hole), reverse=True)
    points = {12: 10.0, 11: 8.0, 10: 7.0, 9: 6.0}.get(high, (high + 2) / 2)
    if high == low:
        return math.ceil(max(2 * points, 5))
    gap = high - low - 1
    score = points - (0, 1, 2, 4)[gap] if gap < 4 else points - 5
    if hole[0][1] == hole[1][1]:
        score += 2
    if gap <= 1 and high < RANKS.index("Q"):
        score += 1
    return math.ceil(score)


def _top_fraction_table() -> dict[int, float]:
    """Chen score → share of the 1,326 starting hands scoring at least as much."""
    scores = sorted((chen_score(pair) for pair in combinations(DECK, 2)), reverse=True)
    return {s: sum(x >= s for x in scores) / len(scores) for s in set(scores)}


_TOP_FRACTION = _top_fraction_table()


def preflop_top_fraction(hole: Sequence[str]) -> float:
    """Where two hole cards rank among all starting hands: 0.005 for aces, 1.0 for the weakest ("top x %")."""
    return _TOP_FRACTION[chen_score(hole)]


NO_PAIR, WEAK_PAIR, TOP_PAIR, TWO_PAIR_PLUS = range(4)
TIER_NAMES = ("no pair", "weak pair", "top pair or overpair", "two pair or better")


def made_tier(hole: tuple[str, str], board: tuple[str, ...]) -> int:
    """How strong the made hand is *thanks to the hole cards*: NO_PAIR … TWO_PAIR_PLUS.

    pokerkit ranks the hand; the tier then discounts what the board makes on its own: a pair, trips or two pair on the
    board with no hole card in it is NO_PAIR, and so is any hand when the five board cards are the best hand. A pair
    that uses a hole card is TOP_PAIR when its rank is at least the board's highest card (top pair, overpair),
    WEAK_PAIR below; two pair with only one hole pair counts as that pair.
    """
    entry = hand_entry(hole, board)
    label = entry.label
    if label is Label.HIGH_CARD:
        return NO_PAIR
    if len(board) == 5 and entry == hand_entry((), board):
        return NO_PAIR
    if label in (Label.STRAIGHT, Label.FLUSH, Label.STRAIGHT_FLUSH):
        return TWO_PAIR_PLUS
    hole_ranks = [_rank(c) for c in hole]
    board_ranks = [_rank(c) for c in board]
    pocket_pair = hole_ranks[0] == hole_ranks[1]
    paired = {r for r in hole_ranks if r in board_ranks}
    own_pairs = len(paired) + pocket_pair
    if own_pairs == 0:
        return NO_PAIR
    if own_pairs == 1 and label in (Label.ONE_PAIR, Label.TWO_PAIR):
        pair_rank = hole_ranks[0] if pocket_pair else paired.pop()
        return TOP_PAIR if pair_rank >= max(board_ranks) else WEAK_PAIR
    return TWO_PAIR_PLUS


def hand_class(hole: tuple[str, str], board: tuple[str, ...]) -> str:
    """A card-free description of a holding ("strong suited hand", "top pair or overpair") for prompts and keys."""
    if board:
        return TIER_NAMES[made_tier(hole, board)]
    top = preflop_top_fraction(hole)
    strength = "premium" if top <= 0.1 else "strong" if top <= 0.3 else "playable" if top <= 0.6 else "weak"
    if hole[0][0] == hole[1][0]:
        return f"{strength} pocket pair"
    return f"{strength} {'suited' if hole[0][1] == hole[1][1] else 'offsuit'} hand"


# ---------------------------------------------------------------- bots


class Bot(Protocol):
    def act(self, situation: Situation, rng: np.random.Generator) -> str: ...


@dataclass(frozen=True)
class StyledBot:
    """A rule-based player whose style is five numbers.

    Pre-flop it raises with the top `raise_top` share of hands, plays (calls / completes) the top `play_top`, and
    otherwise checks when free or folds. Post-flop it bets or raises with a made tier ≥ `bet_tier` (or, with
    probability `bluff`, with anything), calls with a tier ≥ `call_tier`, and otherwise checks or folds.
    One uniform draw per decision keeps its random stream aligned however the hand goes.
    """

    play_top: float
    raise_top: float
    bet_tier: int
    call_tier: int
    bluff: float

    def act(self, situation: Situation, rng: np.random.Generator) -> str:
        bluffing = rng.random() < self.bluff
        legal = situation.legal
        if situation.street == 0:
            top = preflop_top_fraction(situation.hole)
            aggressive, continues = top <= self.raise_top or bluffing, top <= self.play_top
        else:
            tier = made_tier(situation.hole, situation.board)
            aggressive, continues = tier >= self.bet_tier or bluffing, tier >= self.call_tier
        raise_or_bet = next((a for a in AGGRESSIVE if a in legal), None)
        if aggressive and raise_or_bet:
            return raise_or_bet
        if "check" in legal:
            return "check"
        return "call" if continues or aggressive else "fold"


class RandomBot:
    """Uniform over the legal actions; fold is offered only when facing a bet, so it never folds a free check."""

    def act(self, situation: Situation, rng: np.random.Generator) -> str:
        return situation.legal[int(rng.integers(len(situation.legal)))]


@dataclass(frozen=True)
class Style:
    """A named opponent: its policy, what it is meant to be, and the statistics ranges it is built to land in.

    Ranges are (low, high) fractions for VPIP and PFR and a (low, high) aggression factor, measured over 2,000 hands
    against the `tight` bot with seats alternating (tests check them; the ranges hold over several seeds).
    """

    bot: Bot
    summary: str
    vpip: tuple[float, float]
    pfr: tuple[float, float]
    af: tuple[float, float]


STYLES: dict[str, Style] = {
    "tight-passive": Style(
        StyledBot(play_top=0.18, raise_top=0.045, bet_tier=TWO_PAIR_PLUS, call_tier=WEAK_PAIR, bluff=0.0),
        "plays the top 18 % of hands, raises the top 4 %, bets only two pair or better, calls any pair",
        vpip=(0.10, 0.30),
        pfr=(0.01, 0.10),
        af=(0.3, 1.5),
    ),
    "loose-aggressive": Style(
        StyledBot(play_top=0.68, raise_top=0.26, bet_tier=TOP_PAIR, call_tier=WEAK_PAIR, bluff=0.2),
        "plays the top 67 %, raises the top 25 %, bets top pair or better and bluffs one decision in five",
        vpip=(0.55, 0.85),
        pfr=(0.30, 0.55),
        af=(2.5, 7.0),
    ),
    "calling-station": Style(
        StyledBot(play_top=1.0, raise_top=0.0, bet_tier=TWO_PAIR_PLUS, call_tier=NO_PAIR, bluff=0.0),
        "never folds and never raises pre-flop; bets only two pair or better",
        vpip=(0.75, 1.0),
        pfr=(0.0, 0.05),
        af=(0.0, 0.8),
    ),
    "maniac": Style(
        StyledBot(play_top=1.0, raise_top=1.0, bet_tier=NO_PAIR, call_tier=NO_PAIR, bluff=1.0),
        "bets or raises whenever it may, calls only when the raises are capped, never folds",
        vpip=(0.90, 1.0),
        pfr=(0.80, 1.0),
        af=(4.0, math.inf),
    ),
    "tight": Style(
        StyledBot(play_top=0.44, raise_top=0.18, bet_tier=TOP_PAIR, call_tier=WEAK_PAIR, bluff=0.1),
        "a sensible regular: plays the top 43 %, raises the top 18 %, value-bets top pair, bluffs rarely",
        vpip=(0.35, 0.55),
        pfr=(0.15, 0.35),
        af=(1.5, 5.0),
    ),
    "random": Style(
        RandomBot(),
        "uniform over the legal actions",
        vpip=(0.50, 0.80),
        pfr=(0.25, 0.50),
        af=(2.0, 6.0),
    ),
}


STYLE_ADVICE = {
    "tight-passive": "steal: bet or raise when it checks, fold when it bets",
    "tight-aggressive": "call its raises only with strong hands, fold the rest, bet when it checks",
    "loose-passive": "it calls too much: never bluff, bet when it checks, fold when it bets",
    "loose-aggressive": "raise your strong hands, otherwise check and call it down",
}
"""The standard exploit of each quadrant of the style chart (tight / loose: how many hands it plays; passive /
aggressive: how often it bets rather than calls), as a note says it. A player that takes a note's last-named legal
action as its suggestion (`--note-at default`) is pointed at the right one of each situation: against a tight-passive
opponent `bet` when it may check or bet and `fold` when it bets; against a loose-aggressive one `check` or `call`."""


def get_bot(style: str) -> Bot:
    try:
        return STYLES[style].bot
    except KeyError:
        raise ValueError(f"unknown hold'em opponent {style!r}; choose one of: {', '.join(STYLES)}") from None


# ---------------------------------------------------------------- style statistics


@dataclass
class StyleStats:
    """Counts behind VPIP, PFR and AF (definitions in the module docstring), accumulated hand by hand."""

    hands: int = 0
    vpip_hands: int = 0
    pfr_hands: int = 0
    postflop_aggressive: int = 0
    postflop_calls: int = 0

    def add_hand(self, decisions: Iterable[tuple[int, str]]) -> None:
        """One hand's own decisions of one player, as (street, action); blind posts are not decisions."""
        decisions = list(decisions)
        preflop = [a for street, a in decisions if street == 0]
        postflop = [a for street, a in decisions if street > 0]
        if preflop:
            self.hands += 1
            self.vpip_hands += any(a in ("call", *AGGRESSIVE) for a in preflop)
            self.pfr_hands += any(a in AGGRESSIVE for a in preflop)
        self.postflop_aggressive += sum(a in AGGRESSIVE for a in postflop)
        self.postflop_calls += postflop.count("call")

    @property
    def vpip(self) -> float:
        return self.vpip_hands / self.hands if self.hands else math.nan

    @property
    def pfr(self) -> float:
        return self.pfr_hands / self.hands if self.hands else math.nan

    @property
    def af(self) -> float:
        if self.postflop_calls == 0:
            return math.inf if self.postflop_aggressive else math.nan
        return self.postflop_aggressive / self.postflop_calls
