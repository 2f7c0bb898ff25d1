"""Heads-up Limit Texas Hold'em against a styled bot, with optional duplicate dealing.

pokerkit runs the rules (blinds, fixed bet sizes, turn order) and ranks the hands. This module deals the cards from
its own seeded deck (so a game replays exactly and a deal can be mirrored), caps every round at 4 bets (pokerkit
allows a fifth pre-flop), settles showdowns itself with pokerkit's ranking (its automatic showdown ranks seven-card
hands 14 times per hand, we need 2), and writes the text an LLM reads.

Duplicate dealing: deal d is played twice, first with the player on the button, then with seats swapped, and the
cards and the random stream stay with the *seat*. A bot playing a copy of itself therefore replays the first hand in
mirror and the pair nets exactly zero; against another player, card luck cancels out of the pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from pokerkit import Automation, FixedLimitTexasHoldem

from ttlearn.envs.base import Env
from ttlearn.envs.holdem_bots import DECK, STYLE_ADVICE, Situation, get_bot, hand_class, hand_entry
from ttlearn.types import Observation, StepResult

SMALL_BLIND, BIG_BLIND = 1, 2  # chips; 1 big blind = 2 chips
SMALL_BET, BIG_BET = 2, 4  # pre-flop and flop / turn and river
MAX_BETS = 4  # a bet and three raises per round; the big blind is the first pre-flop bet
STACK = 400  # 200 big blinds, reset every hand: never binds in limit play
STREETS = ("pre-flop", "flop", "turn", "river")

# pokerkit seats heads-up players by index: 0 posts the big blind, 1 the small blind and holds the button.
BUTTON, BIG_BLIND_SEAT = 1, 0
SEAT_NAMES = {BUTTON: "button", BIG_BLIND_SEAT: "big blind"}

_AUTOMATIONS = (
    Automation.ANTE_POSTING,
    Automation.BET_COLLECTION,
    Automation.BLIND_OR_STRADDLE_POSTING,
    Automation.HAND_KILLING,
    Automation.CHIPS_PUSHING,
    Automation.CHIPS_PULLING,
)


def mbb_per_hand(net_bb: float, hands: int) -> float:
    """Win rate in milli-big-blinds per hand: 1000 · net_bb / hands (0 before any hand)."""
    return 1000.0 * net_bb / hands if hands else 0.0


def hands_needed(sd_bb: float, margin_bb: float = 0.1, z: float = 1.96) -> float:
    """Hands for a CI half-width of `margin_bb` per hand: n = (z · SD / margin)², SD the per-hand SD in bb."""
    return (z * sd_bb / margin_bb) ** 2


def per_hand_sd(nets_bb: Sequence[float], duplicate: bool = False) -> float:
    """The per-hand standard deviation that sets how many hands a win rate needs (sample SD, ddof = 1).

    Plain dealing: SD of the hand results h_i. Duplicate dealing, hands in mirrored pairs (h_2d, h_2d+1):
    SD_hand = √2 · SD((h_2d + h_2d+1) / 2), the SD one hand would need to give the same precision per hand played.
    """
    nets = np.asarray(nets_bb, dtype=float)
    if duplicate:
        if len(nets) % 2:
            raise ValueError(f"duplicate results come in pairs, got {len(nets)} hands")
        return float(np.sqrt(2) * nets.reshape(-1, 2).mean(axis=1).std(ddof=1))
    return float(nets.std(ddof=1))


class Act(NamedTuple):
    """One betting action; `amount`: the chips a call puts in, the round's raise-to total of a bet or raise, else 0."""

    street: int
    seat: int
    action: str
    amount: int


class LimitHand:
    """One heads-up fixed-limit hand on pokerkit, dealt from fixed cards.

    `cards` = button's 2 hole cards, big blind's 2, then the 5 board cards (revealed as the streets come).
    """

    def __init__(self, cards: Sequence[str]) -> None:
        if len(cards) != 9 or len(set(cards)) != 9 or not set(cards) <= set(DECK):
            raise ValueError(f"a hand needs 9 distinct cards like 'As' (4 hole, 5 board), got {list(cards)}")
        self.holes = {BUTTON: tuple(cards[0:2]), BIG_BLIND_SEAT: tuple(cards[2:4])}
        self._board = tuple(cards[4:9])
        self.state = FixedLimitTexasHoldem.create_state(
            _AUTOMATIONS, True, 0, (SMALL_BLIND, BIG_BLIND), SMALL_BET, BIG_BET, STACK, 2
        )
        self.state.deal_hole("".join(self.holes[BIG_BLIND_SEAT]), BIG_BLIND_SEAT)
        self.state.deal_hole("".join(self.holes[BUTTON]), BUTTON)
        self.put_in = {BUTTON: SMALL_BLIND, BIG_BLIND_SEAT: BIG_BLIND}
        self.history: list[Act] = []
        self.folded: int | None = None
        self._refresh()

    @property
    def street(self) -> int:
        return {0: 0, 3: 1, 4: 2, 5: 3}[len(self.state.board_cards)]

    @property
    def board(self) -> tuple[str, ...]:
        return self._board[: len(self.state.board_cards)]

    @property
    def actor(self) -> int | None:
        """The seat to act, None once the hand is over (fold or showdown)."""
        return self.state.actor_index

    @property
    def over(self) -> bool:
        return self.actor is None

    @property
    def bet_size(self) -> int:
        return SMALL_BET if self.street < 2 else BIG_BET

    @property
    def bets_this_round(self) -> int:
        """Bets made this round, the big blind counting as the first pre-flop one."""
        return max(self.state.bets) // self.bet_size

    def legal_actions(self) -> tuple[str, ...]:
        return self._legal

    def _refresh(self) -> None:
        """Ask pokerkit once per state what it costs to call and what is legal: its move checks are the slowest
        part of a hand, and prompts, bots and validation all need the answers."""
        if self.over:
            self.to_call, self._legal = 0, ()
            return
        self.to_call = self.state.checking_or_calling_amount
        actions = ["fold", "call"] if self.to_call else ["check"]
        if self.state.can_complete_bet_or_raise_to() and self.bets_this_round < MAX_BETS:
            actions.append("raise" if max(self.state.bets) else "bet")
        self._legal = tuple(actions)

    def situation(self, seat: int) -> Situation:
        return Situation(self.holes[seat], self.board, self.street, seat == BUTTON, self.legal_actions())

    def apply(self, action: str) -> None:
        legal = self.legal_actions()
        if action not in legal:
            raise ValueError(f"illegal hold'em action {action!r}; legal now: {', '.join(legal) or 'none'}")
        seat, street = self.actor, self.street
        assert seat is not None
        if action == "fold":
            self.state.fold()
            self.folded, amount = seat, 0
        elif action in ("check", "call"):
            amount = self.state.check_or_call().amount
            self.put_in[seat] += amount
        else:
            already = self.state.bets[seat]
            amount = self.state.complete_bet_or_raise_to().amount
            self.put_in[seat] += amount - already
        self.history.append(Act(street, seat, action, amount))
        self._deal_pending_board()
        self._refresh()

    def _deal_pending_board(self) -> None:
        while self.state.actor_index is None and self.state.status:
            if self.state.can_burn_card():
                self.state.burn_card("??")  # burnt cards are never seen: an unknown card keeps our deck order
            elif self.state.can_deal_board():
                shown = len(self.state.board_cards)
                self.state.deal_board("".join(self._board[shown : shown + self.state.board_dealing_count]))
            else:
                return  # river betting closed: showdown, settled by `net`

    @property
    def showdown(self) -> bool:
        return self.over and self.folded is None

    def net(self, seat: int) -> int:
        """Chips won (+) or lost (−) by `seat` in the finished hand; the two seats' nets sum to zero."""
        if not self.over:
            raise ValueError("the hand is not over yet")
        other = 1 - seat
        if self.folded is not None:
            return -self.put_in[seat] if self.folded == seat else self.put_in[other]
        mine, theirs = (hand_entry(self.holes[s], self._board) for s in (seat, other))
        return self.put_in[other] if mine > theirs else -self.put_in[seat] if mine < theirs else 0


@dataclass(frozen=True)
class HandRecord:
    """A finished hand from the player's side; opponent cards are known only if the hand reached showdown."""

    number: int
    player_seat: int
    player_cards: tuple[str, ...]
    opponent_cards: tuple[str, ...] | None
    board: tuple[str, ...]
    history: tuple[Act, ...]
    player_net_chips: int

    @property
    def player_net_bb(self) -> float:
        return self.player_net_chips / BIG_BLIND

    def decisions(self, seat: int) -> list[tuple[int, str]]:
        """One seat's own actions as (street, action), the input of `StyleStats.add_hand`."""
        return [(a.street, a.action) for a in self.history if a.seat == seat]


def _says(seat: int, player_seat: int, verb: str) -> str:
    """ "you raise" / "opponent raises": the subject and the verb agreeing."""
    return f"you {verb}" if seat == player_seat else f"opponent {verb}s"


def _describe_act(act: Act, player_seat: int) -> str:
    said = _says(act.seat, player_seat, act.action)
    if act.action == "raise":
        return f"{said} to {act.amount}"
    return f"{said} {act.amount}" if act.action in ("bet", "call") else said


def betting_text(history: Sequence[Act], player_seat: int, board: Sequence[str]) -> str:
    """The hand's betting so far, street by street, from the player's side ("you" / "opponent")."""

    def said(street: int) -> list[str]:
        return [_describe_act(a, player_seat) for a in history if a.street == street]

    blinds = [
        f"{_says(BUTTON, player_seat, 'post')} small blind {SMALL_BLIND}",
        f"{_says(BIG_BLIND_SEAT, player_seat, 'post')} big blind {BIG_BLIND}",
    ]
    parts = [f"pre-flop: {', '.join(blinds + said(0))}"]
    for street, cards in ((1, board[:3]), (2, board[3:4]), (3, board[4:5])):
        if cards:
            parts.append(f"{STREETS[street]} ({' '.join(cards)}): {', '.join(said(street)) or '-'}")
    return " | ".join(parts)


class HoldemEnv(Env):
    """A game of `hands` heads-up limit hold'em hands against one styled bot; the player's seat alternates."""

    readings = tuple(STYLE_ADVICE)
    rounds_option = "hands"

    def __init__(
        self, opponent: str = "calling-station", hands: int = 20, duplicate: bool = False, seed: int = 0
    ) -> None:
        self._bot = get_bot(opponent)
        if not isinstance(hands, int) or hands < 1:
            raise ValueError(f"hands must be a positive integer, got {hands!r}")
        if not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.opponent, self.hands, self.duplicate, self.seed = opponent, hands, bool(duplicate), seed
        self._game_seed: int | None = None
        self._hand: LimitHand | None = None  # None before reset and after the last hand
        self._number = 0  # 0-based index of the current hand
        self._player_seat = BUTTON
        self._rngs: dict[int, np.random.Generator] = {}  # each seat's random stream for the current hand
        self._records: list[HandRecord] = []
        self._net_chips = 0

    # ------------------------------------------------------------ protocol

    @property
    def total_hands(self) -> int:
        return 2 * self.hands if self.duplicate else self.hands

    def describe(self) -> str:
        dealing = (
            " Every deal is played twice with the seats swapped (duplicate dealing), so card luck cancels."
            if self.duplicate
            else ""
        )
        return (
            f"Heads-up Limit Texas Hold'em: {self.total_hands} hands against one opponent; you switch seats every "
            f"hand.{dealing} Blinds are {SMALL_BLIND} and {BIG_BLIND} chips (1 big blind = {BIG_BLIND} chips). The "
            "button posts the small blind, acts first before the flop and last after it. Bets and raises are fixed: "
            f"{SMALL_BET} chips pre-flop and on the flop, {BIG_BET} on the turn and river, at most {MAX_BETS} bets per "
            "round (the big blind counts as the first pre-flop bet). At showdown the best five-card hand from your two "
            "cards and the five board cards wins the pot. Answer with exactly one of the legal actions listed "
            "(fold, check, call, bet, raise). Your score is your net chips over the game, in big blinds."
        )

    def reset(self, seed: int) -> Observation:
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self._game_seed = int(seed)
        return self.restart()

    def restart(self) -> Observation:
        if self._game_seed is None:
            raise ValueError("call reset(seed) before restart()")
        self._records = []
        self._net_chips = 0
        self._start_hand(0)
        self._play_until_player()
        return self._observation()

    def step(self, action: str) -> StepResult:
        if self._hand is None:
            raise ValueError("the game is over (or not started); call reset(seed)")
        ended_before = len(self._records)
        self._hand.apply(action)
        self._play_until_player()
        reward = sum(r.player_net_bb for r in self._records[ended_before:])
        info = {
            "hand": min(len(self._records) + 1, self.total_hands),
            "hands_played": len(self._records),
            "net_bb": self.score(),
            "mbb_per_hand": self.mbb_per_hand(),
        }
        return StepResult(self._observation(), reward, self._hand is None, info)

    def legal_actions(self) -> tuple[str, ...]:
        return self._hand.legal_actions() if self._hand else ()

    def score(self) -> float:
        return self._net_chips / BIG_BLIND

    def success(self) -> bool | None:
        return self.score() > 0

    def advice(self, reading: str) -> str:
        """The adjustment to an opponent of style `reading` (`holdem_bots.STYLE_ADVICE`)."""
        if reading not in STYLE_ADVICE:
            raise ValueError(f"a hold'em reading is one of {', '.join(STYLE_ADVICE)}, got {reading!r}")
        return STYLE_ADVICE[reading]

    def mbb_per_hand(self) -> float:
        return mbb_per_hand(self.score(), len(self._records))

    def task(self) -> str:
        if self._hand is None:
            return f"Heads-up limit hold'em, game over after {len(self._records)} hands."
        hole = self._hand.holes[self._player_seat]
        return (
            f"Heads-up limit hold'em, {STREETS[self._hand.street]}, you are the {SEAT_NAMES[self._player_seat]}, "
            f"holding {hand_class(hole, self._hand.board)}."
        )

    def transcript(self) -> str:
        return "\n".join(self._record_text(r) for r in self._records)

    # ------------------------------------------------------------ extras

    @property
    def records(self) -> tuple[HandRecord, ...]:
        """The finished hands of the current game, in order."""
        return tuple(self._records)

    def bot_action(self, style: str) -> str:
        """What the styled bot `style` would do now in the player's seat, drawing on that seat's random stream.

        Baselines, tests and duplicate self-play use it; a bot in the player's seat plays exactly as it would in
        the opponent's.
        """
        if self._hand is None:
            raise ValueError("the game is over (or not started); call reset(seed)")
        return get_bot(style).act(self._hand.situation(self._player_seat), self._rngs[self._player_seat])

    # ------------------------------------------------------------ internals

    def _start_hand(self, number: int) -> None:
        """Deal hand `number` (0-based). The player has the button in even hands; duplicate pairs share a deal."""
        deal = number // 2 if self.duplicate else number
        key = [self.seed, self._game_seed, deal]
        cards = [DECK[i] for i in np.random.default_rng([*key, 0]).permutation(len(DECK))[:9]]
        self._hand = LimitHand(cards)
        self._number = number
        self._player_seat = BUTTON if number % 2 == 0 else BIG_BLIND_SEAT
        self._rngs = {seat: np.random.default_rng([*key, 1 + seat]) for seat in (BUTTON, BIG_BLIND_SEAT)}

    def _play_until_player(self) -> None:
        """Apply the bot's actions, finishing hands and dealing new ones, until the player must act or the game ends."""
        while self._hand is not None:
            hand = self._hand
            if hand.over:
                self._records.append(self._record(hand))
                self._net_chips += self._records[-1].player_net_chips
                self._hand = None
                if self._number + 1 < self.total_hands:
                    self._start_hand(self._number + 1)
            elif hand.actor == self._player_seat:
                return
            else:
                seat = 1 - self._player_seat
                hand.apply(self._bot.act(hand.situation(seat), self._rngs[seat]))

    def _record(self, hand: LimitHand) -> HandRecord:
        seat = self._player_seat
        return HandRecord(
            number=self._number + 1,
            player_seat=seat,
            player_cards=hand.holes[seat],
            opponent_cards=hand.holes[1 - seat] if hand.showdown else None,
            board=hand.board,
            history=tuple(hand.history),
            player_net_chips=hand.net(seat),
        )

    def _record_text(self, r: HandRecord) -> str:
        showdown = ""
        if r.opponent_cards is not None:
            yours, theirs = (
                hand_entry(cards, r.board).label.value.lower() for cards in (r.player_cards, r.opponent_cards)
            )
            showdown = f"; showdown: opponent shows {' '.join(r.opponent_cards)} ({theirs}) vs your {yours}"
        return (
            f"Hand {r.number} ({SEAT_NAMES[r.player_seat]}), you hold {' '.join(r.player_cards)}, "
            f"board {' '.join(r.board) or '-'}: {betting_text(r.history, r.player_seat, r.board)}{showdown}; "
            f"you {r.player_net_bb:+g} bb"
        )

    def _observation(self) -> Observation:
        played = len(self._records)
        so_far = f"Your net so far: {self.score():+g} bb after {played} hand{'s' * (played != 1)}."
        last = f" Last hand: {self._record_text(self._records[-1])}." if self._records else ""
        if self._hand is None:
            text = f"The game is over. {so_far}{last}"
            return Observation(text, (), {"done": True, "net_bb": self.score(), "hands_played": played})
        hand, seat = self._hand, self._player_seat
        other = 1 - seat
        order = (
            "first before the flop and last after it" if seat == BUTTON else "last before the flop and first after it"
        )
        legal = hand.legal_actions()
        text = "\n".join(
            [
                f"Hand {self._number + 1}/{self.total_hands}. You are the {SEAT_NAMES[seat]}: you act {order}.",
                f"Your cards: {' '.join(hand.holes[seat])}",
                f"Board: {' '.join(hand.board) or '(none yet)'} — {STREETS[hand.street]}",
                (
                    f"Pot: {hand.put_in[seat] + hand.put_in[other]} chips (you put in {hand.put_in[seat]}, the "
                    f"opponent {hand.put_in[other]}). To call: {hand.to_call}. Bets this round: "
                    f"{hand.bets_this_round} of {MAX_BETS}."
                ),
                f"Betting: {betting_text(hand.history, seat, hand.board)}",
                f"{so_far}{last}",
                f"Legal actions: {', '.join(legal)}",
            ]
        )
        data = {
            "hand": self._number + 1,
            "hands_total": self.total_hands,
            "seat": SEAT_NAMES[seat],
            "hole": list(hand.holes[seat]),
            "board": list(hand.board),
            "street": STREETS[hand.street],
            "pot": hand.put_in[seat] + hand.put_in[other],
            "put_in": {"you": hand.put_in[seat], "opponent": hand.put_in[other]},
            "to_call": hand.to_call,
            "net_bb": self.score(),
        }
        return Observation(text, legal, data)
