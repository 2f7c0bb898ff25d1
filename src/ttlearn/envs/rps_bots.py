"""Rock-paper-scissors maths and the opponent suite of the `rps` environment.

Moves are ints, 0 = rock, 1 = paper, 2 = scissors, so move m is beaten by (m + 1) mod 3. A bot sees the history it
was shown through `observe` and exposes its next-move *distribution* without consuming randomness: the environment
samples from it with its own per-game Generator and the oracle best-responds to it. That is why every adaptive bot here
is deterministic (ties broken towards the lower move): only the bots whose point is noise draw any.

Each bot's `ceiling` is the expected score per round of a best responder that knows the bot (the tiers follow the usual
RPS-bot taxonomy: stationary, sequences, reactive, adaptive, meta). For the deterministic bots that is +1 however clever
they are; their docstrings also say what a player who must *learn* them can hope for, which is the number that matters
for test-time learning. The tiers T0–T4 and the cross-game probe are this project's construction, not MemoPilot's:
its paper reports Elo ratings (LHE 1762, RPS 1590) and zero-shot transfer to a larger player.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

MOVES = ("rock", "paper", "scissors")
ROCK, PAPER, SCISSORS = range(3)


def beats(move: int) -> int:
    """The move that beats `move`: (m + 1) mod 3."""
    return (move + 1) % 3


def payoff(mine: int, theirs: int) -> int:
    """Score of one round for the player of `mine`: u(a, b) = ((a − b + 1) mod 3) − 1, i.e. +1 win, 0 draw, −1 loss."""
    return (mine - theirs + 1) % 3 - 1


def expected_payoffs(dist: Sequence[float]) -> np.ndarray:
    """Expected score of each move against an opponent distribution p: E[u(a)] = p[a − 1] − p[a + 1] (indices mod 3).

    A move wins against the one below it and loses to the one above it; the best response's value, max_a E[u(a)], is
    the per-round ceiling against a bot that plays p.
    """
    p = np.asarray(dist, dtype=float)
    return np.roll(p, 1) - np.roll(p, -1)


def best_responses(dist: Sequence[float], tol: float = 1e-9) -> list[int]:
    """The moves whose expected score against `dist` is within `tol` of the best (several when it is indifferent)."""
    values = expected_payoffs(dist)
    return [move for move in range(3) if values[move] >= values.max() - tol]


def game_favourite(schedule: Sequence[Sequence[float]]) -> int:
    """The reading a one-line note should name for a game of these per-round distributions: the move whose counter,
    kept all game, scores most (the lower counter on ties). For a stationary bot that is its most frequent move; for a
    switch it is the first lean when the second beats it (the pooled moves tie, and only this counter wins)."""
    totals = sum(expected_payoffs(dist) for dist in schedule)
    return (int(np.argmax(totals)) - 1) % 3


def one_hot(move: int) -> np.ndarray:
    dist = np.zeros(3)
    dist[move] = 1.0
    return dist


UNIFORM = np.full(3, 1 / 3)


def lean(move: int, strength: float) -> np.ndarray:
    """A distribution that plays `move` with probability `strength` and each other move with (1 − strength) / 2."""
    dist = np.full(3, (1 - strength) / 2)
    dist[move] = strength
    return dist


def parse_pattern(letters: str) -> tuple[int, ...]:
    """'RPS' → (0, 1, 2): cycle patterns are written with move initials so they read at a glance."""
    return tuple("RPS".index(letter) for letter in letters)


class Bot(ABC):
    """An opponent. The environment calls `reset()` before each game, `distribution()` before each round and
    `observe(player_move, own_move)` after it; `player` and `own` hold the game's moves so far."""

    tier: ClassVar[str]
    ceiling: float

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.player: list[int] = []
        self.own: list[int] = []

    def observe(self, player_move: int, own_move: int) -> None:
        self.player.append(player_move)
        self.own.append(own_move)

    @abstractmethod
    def distribution(self) -> np.ndarray:
        """Probabilities of rock, paper, scissors for the next round, given what was observed so far."""

    def schedule(self, rounds: int) -> list[np.ndarray] | None:
        """The distributions of a whole game's `rounds` rounds, known before it is played, or None (the default) for a
        bot whose play depends on the player's moves: what an oracle knows of the next game
        (benchmarks/memopilot_ceiling.py)."""
        return None


class ConstantBot(Bot):
    """T0 stationary: always rock. Ceiling +1 (always paper)."""

    tier, ceiling = "T0", 1.0

    def distribution(self) -> np.ndarray:
        return one_hot(ROCK)

    def schedule(self, rounds: int) -> list[np.ndarray]:
        return [one_hot(ROCK)] * rounds


class BiasedBot(Bot):
    """T0 stationary: i.i.d. moves from fixed probabilities. Ceiling p[a−1] − p[a+1] for the best a:
    60/20/20 → +0.4, 40/30/30 → +0.1 (both by always playing paper). A learner needs many rounds to tell 40/30/30
    from uniform: the per-round SD of the score is ≈ 0.83."""

    tier = "T0"

    def __init__(self, probs: Sequence[float]) -> None:
        super().__init__()
        self.probs = np.asarray(probs, dtype=float)
        self.ceiling = float(expected_payoffs(self.probs).max())

    def distribution(self) -> np.ndarray:
        return self.probs

    def schedule(self, rounds: int) -> list[np.ndarray]:
        return [self.probs] * rounds


class CycleBot(Bot):
    """T1 sequence: replays a fixed pattern from its start every game. Ceiling +1; an ideal learner needs about one
    period at chance, then wins every round."""

    tier, ceiling = "T1", 1.0

    def __init__(self, pattern: Sequence[int]) -> None:
        super().__init__()
        self.pattern = tuple(pattern)

    def distribution(self) -> np.ndarray:
        return one_hot(self.pattern[len(self.own) % len(self.pattern)])

    def schedule(self, rounds: int) -> list[np.ndarray]:
        return [one_hot(self.pattern[r % len(self.pattern)]) for r in range(rounds)]


class SwitchBot(Bot):
    """T1 sequence: leans towards `first` for the first `after` rounds of every game, then towards `second` (each with
    probability `strength`, the other moves sharing the rest). Ceiling strength − (1 − strength) / 2 (+0.7 at 0.8).
    A player that keeps one move all game does best with the move that beats one of the two and draws the other
    (+0.35 per round over 6 rounds at 0.8, switching after 3): the best response to the game's pooled moves, which
    is the counter of `first` when `second` beats `first`, and `second` itself when `first` beats `second`."""

    tier = "T1"

    def __init__(self, first: int, second: int, after: int = 3, strength: float = 0.8) -> None:
        super().__init__()
        self.first, self.second, self.after, self.strength = first, second, after, strength
        self.ceiling = float(expected_payoffs(lean(first, strength)).max())

    def distribution(self) -> np.ndarray:
        return lean(self.first if len(self.own) < self.after else self.second, self.strength)

    def schedule(self, rounds: int) -> list[np.ndarray]:
        return [lean(self.first if r < self.after else self.second, self.strength) for r in range(rounds)]


class HalfRandomBot(Bot):
    """T1 sequence: each round plays the rock-paper-scissors cycle with probability 1/2, else uniform at random.
    The cycle move then has probability 2/3 and the others 1/6, so the ceiling is 2/3 − 1/6 = +0.5."""

    tier, ceiling = "T1", 0.5

    def distribution(self) -> np.ndarray:
        return 0.5 * one_hot(len(self.own) % 3) + 0.5 * UNIFORM


class BeatLastBot(Bot):
    """T2 reactive: plays what beats your last move (rock in round 1). Ceiling +1: play what loses to your last."""

    tier, ceiling = "T2", 1.0

    def distribution(self) -> np.ndarray:
        return one_hot(beats(self.player[-1]) if self.player else ROCK)


class CopyLastBot(Bot):
    """T2 reactive: copies your last move (rock in round 1). Ceiling +1: play what beats your own last move."""

    tier, ceiling = "T2", 1.0

    def distribution(self) -> np.ndarray:
        return one_hot(self.player[-1] if self.player else ROCK)


class WinStayLoseShiftBot(Bot):
    """T2 reactive: after a win repeats its move; after a draw or loss switches to what beats your last move (rock in
    round 1). Ceiling +1; its 1-step rule depends on both players' last moves."""

    tier, ceiling = "T2", 1.0

    def distribution(self) -> np.ndarray:
        if not self.player:
            return one_hot(ROCK)
        won = payoff(self.own[-1], self.player[-1]) > 0
        return one_hot(self.own[-1] if won else beats(self.player[-1]))


def most_common(moves: Sequence[int]) -> int | None:
    """The most frequent move (the lower one on ties), or None for no moves."""
    if not moves:
        return None
    return int(np.argmax(np.bincount(moves, minlength=3)))


def markov_prediction(moves: Sequence[int], order: int) -> int | None:
    """The move that most often followed the last `order` moves earlier in `moves`, backing off to shorter contexts
    (down to plain frequency) while the context was never seen; None for no moves."""
    for length in range(min(order, len(moves) - 1), 0, -1):
        context = list(moves[-length:])
        followers = [moves[i] for i in range(length, len(moves)) if list(moves[i - length : i]) == context]
        if followers:
            return most_common(followers)
    return most_common(moves)


class MarkovBot(Bot):
    """T3 adaptive: predicts your next move from your last `order` moves (counts of what followed them before), and
    plays what beats the prediction; rock when it knows nothing. Deterministic, so a knowing responder scores +1;
    a learner scores what its own predictability allows (a uniform-random player scores 0)."""

    tier, ceiling = "T3", 1.0

    def __init__(self, order: int = 2) -> None:
        super().__init__()
        self.order = order

    def distribution(self) -> np.ndarray:
        guess = markov_prediction(self.player, self.order)
        return one_hot(ROCK if guess is None else beats(guess))


class FrequencyBot(MarkovBot):
    """T3 adaptive: counts your moves and plays what beats your most frequent one (the order-0 Markov bot).
    Ceiling +1 for a knowing responder; a learner must keep its move counts balanced while exploiting it."""

    def __init__(self) -> None:
        super().__init__(order=0)


MATCH_WINDOW = 100
MATCH_MAX = 8


def match_prediction(key: Sequence[int], target: Sequence[int]) -> int | None:
    """History matching: find the earlier position where the longest suffix of `key` (at most MATCH_MAX long, within
    the last MATCH_WINDOW positions; the most recent on ties) last occurred, and return what `target` did next.

    `key` and `target` are aligned per round; the bounds keep a round's cost constant in long games."""
    n = len(key)
    best_len, best_end = 0, -1
    for end in range(n - 2, max(-1, n - 2 - MATCH_WINDOW), -1):
        length = 0
        while length < MATCH_MAX and length <= end and key[end - length] == key[n - 1 - length]:
            length += 1
        if length > best_len:
            best_len, best_end = length, end
    return target[best_end + 1] if best_len else None


class IocaineBot(Bot):
    """T4 meta-strategist in the style of Iocaine Powder.

    Four predictors (frequency; history matching on your moves, on its own moves, on both) guess your next move x,
    and, from your point of view, its own next move y. Each guess yields three "Sicilian" meta-strategies: play
    beats(x) rotated by 0, 1 or 2 steps (assume you are naive, second-guessing, third-guessing), and likewise
    beats(beats(y)) rotated (assume you predict it). Every strategy is scored each round by what it would have won,
    with exponential decay; the bot plays the best one's move (rock when none applies yet). Deterministic: a knowing
    responder scores +1, but a learner without its source should expect ≈ 0 or worse within a game;
    across games it can win a little, because the bot forgets everything at each reset.
    """

    tier, ceiling = "T4", 1.0
    decay = 0.9

    def reset(self) -> None:
        super().reset()
        self.scores: dict[int, float] = {}

    def _candidates(self) -> list[int | None]:
        """Move suggested by each strategy for the next round (None where its predictor has no data yet)."""
        joint = [3 * p + o for p, o in zip(self.player, self.own)]
        guesses = []
        for target, other in ((self.player, self.own), (self.own, self.player)):
            guesses += [
                most_common(target),
                match_prediction(target, target),
                match_prediction(other, target),
                match_prediction(joint, target),
            ]
        moves: list[int | None] = []
        for index, guess in enumerate(guesses):
            predicts_player = index < len(guesses) // 2
            counter = None if guess is None else beats(guess) if predicts_player else beats(beats(guess))
            moves += [None if counter is None else (counter + shift) % 3 for shift in range(3)]
        return moves

    def observe(self, player_move: int, own_move: int) -> None:
        for index, move in enumerate(self._candidates()):
            old = self.decay * self.scores.get(index, 0.0)
            self.scores[index] = old if move is None else old + payoff(move, player_move)
        super().observe(player_move, own_move)

    def distribution(self) -> np.ndarray:
        options = [(self.scores.get(i, 0.0), -i, move) for i, move in enumerate(self._candidates()) if move is not None]
        return one_hot(max(options)[2] if options else ROCK)


class NashBot(Bot):
    """Uniform random, the Nash equilibrium: every strategy scores 0 in expectation against it. Ceiling 0."""

    tier, ceiling = "Nash", 0.0

    def distribution(self) -> np.ndarray:
        return UNIFORM


class ProbeBot(Bot):
    """Cross-game probe: a fixed pseudo-random string derived from the environment's seed, replayed identically every
    game. Unpredictable within a game, 100 % learnable across games; ceiling +1. `reset` keeps the string."""

    tier, ceiling = "probe", 1.0

    def __init__(self, seed: int) -> None:
        super().__init__()
        self._source = np.random.default_rng([seed % 2**64, 0x9B0BE])
        self.string: list[int] = []

    def distribution(self) -> np.ndarray:
        while len(self.string) <= len(self.own):  # drawn one at a time, so the string never depends on game length
            self.string.append(int(self._source.integers(3)))
        return one_hot(self.string[len(self.own)])


CYCLES = {3: "RPS", 4: "RRPS", 5: "RPSSP", 6: "RRPPSS", 7: "RPRSPSS", 8: "RSPPRSSP"}
LEANING_CYCLES = ("RRPS", "PPSR", "SSRP", "RPRSR", "PSPRP", "SRSPS")
"""Cycles with a most frequent move, one per move for each shape: a player keeping one move all game does best with
the counter of that move (RRPS over 6 rounds: rock 4, paper 1, scissors 1, so paper scores +0.5 per round, rock 0,
scissors −0.5), and a note that always names the same move scores 0 on average over the three."""
SWITCHES = {f"{MOVES[a]}-{MOVES[b]}": (a, b) for a in range(3) for b in range(3) if a != b}
"""`switch-FIRST-SECOND` opponents (`SwitchBot`): every ordered pair of distinct moves."""


def _cycle_factory(letters: str) -> Callable[[int], Bot]:
    pattern = parse_pattern(letters)
    return lambda seed: CycleBot(pattern)


BOTS: dict[str, Callable[[int], Bot]] = {
    "constant": lambda seed: ConstantBot(),
    "biased": lambda seed: BiasedBot((0.6, 0.2, 0.2)),
    "biased-40": lambda seed: BiasedBot((0.4, 0.3, 0.3)),
    **{f"biased-{MOVES[m]}": (lambda seed, m=m: BiasedBot(lean(m, 0.6))) for m in (PAPER, SCISSORS)},
    **{f"biased-{MOVES[m]}-50": (lambda seed, m=m: BiasedBot(lean(m, 0.5))) for m in range(3)},
    **{f"cycle{period}": _cycle_factory(letters) for period, letters in CYCLES.items()},
    **{f"cycle-{letters.lower()}": _cycle_factory(letters) for letters in LEANING_CYCLES},
    **{f"switch-{pair}": (lambda seed, pair=pair: SwitchBot(*SWITCHES[pair])) for pair in SWITCHES},
    "half-random": lambda seed: HalfRandomBot(),
    "beat-last": lambda seed: BeatLastBot(),
    "copy-last": lambda seed: CopyLastBot(),
    "wsls": lambda seed: WinStayLoseShiftBot(),
    "frequency": lambda seed: FrequencyBot(),
    "markov": lambda seed: MarkovBot(order=2),
    "iocaine": lambda seed: IocaineBot(),
    "nash": lambda seed: NashBot(),
    "probe": ProbeBot,
}
"""Opponent name → factory of the environment's seed (only the probe uses it)."""


def make_bot(name: str, seed: int) -> Bot:
    if name not in BOTS:
        raise ValueError(f"unknown RPS opponent {name!r}; choose one of: {', '.join(BOTS)}")
    return BOTS[name](seed)
