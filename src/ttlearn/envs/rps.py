"""Repeated rock-paper-scissors against one scripted opponent: the MemoPilot testbed with known ceilings.

One episode is one game of `rounds` rounds; each step is one round, rewarded +1 / 0 / −1. The opponent (see
`rps_bots`) is reset every game, so what a player learns about it carries over to the next game only through its
memory. Randomness comes from one Generator per game, seeded by (constructor seed, game seed): a game replays exactly
under `restart()` and the same player moves.
"""

from __future__ import annotations

import random

import numpy as np

from ttlearn.envs.base import Env
from ttlearn.envs.rps_bots import MOVES, beats, best_responses, make_bot, payoff
from ttlearn.types import Observation, StepResult

SHOWN_ROUNDS = 10
"""Rounds listed in the observation: enough to show a whole period of the longest cycle bot (8) and then some."""

RESULTS = {1: "win", 0: "draw", -1: "loss"}

TRANSCRIPTS = ("rounds", "by-player", "tally")
"""How a finished game is written for the memories: one line per round (`rounds`), each player's moves listed in
turn (`by-player`), from which SmolLM2-135M names the opponent's most frequent move twice as often, though still
not its counter, or that list opened by the opponent's counts, most frequent first (`tally`), which makes reading the
favourite a copy yet does not make the small writers name it more often (`benchmarks/memopilot_writer_probe.py`,
docs/memopilot.md)."""


def move_counts(moves: list[int]) -> str:
    """'rock 4 times, paper 2 times, scissors 0 times': how often each move was played, most frequent first (ties in
    the order rock, paper, scissors)."""
    counts = sorted(((moves.count(m), -m) for m in range(len(MOVES))), reverse=True)
    return ", ".join(f"{MOVES[-negative]} {count} times" for count, negative in counts)


def round_line(index: int, mine: int, theirs: int) -> str:
    """'R3 you=rock opp=paper loss': one round, as the observation and the transcript both write it."""
    return f"R{index} you={MOVES[mine]} opp={MOVES[theirs]} {RESULTS[payoff(mine, theirs)]}"


class RPSEnv(Env):
    """Repeated rock-paper-scissors. Options: `opponent` (a name from `rps_bots.BOTS`), `rounds` per game, `seed`
    (the opponent's randomness, and the probe's fixed string), `transcript` (one of `TRANSCRIPTS`)."""

    readings = MOVES
    rounds_option = "rounds"

    def __init__(self, opponent: str = "cycle3", rounds: int = 20, seed: int = 0, transcript: str = "rounds") -> None:
        if rounds < 1:
            raise ValueError(f"rounds must be at least 1, got {rounds}")
        if transcript not in TRANSCRIPTS:
            raise ValueError(f"transcript must be one of {', '.join(TRANSCRIPTS)}, got {transcript!r}")
        self.bot = make_bot(opponent, seed)
        self.opponent, self.rounds, self.seed, self.transcript_form = opponent, rounds, seed, transcript
        self._game_seed: int | None = None
        self.my_moves: list[int] = []
        self.opp_moves: list[int] = []

    def describe(self) -> str:
        return (
            f"You play rock-paper-scissors against the same opponent for {self.rounds} rounds. Each round both "
            "players pick rock, paper or scissors at the same time. Paper beats rock, rock beats scissors, scissors "
            "beats paper. Win +1, draw 0, loss -1. The opponent may follow patterns: find them and beat them. "
            "Answer with one word: rock, paper or scissors."
        )

    # --- game state -------------------------------------------------------------------------------------------------

    def reset(self, seed: int) -> Observation:
        self._game_seed = seed
        self._rng = np.random.default_rng([self.seed % 2**64, seed % 2**64])
        self.bot.reset()
        self.my_moves, self.opp_moves = [], []
        return self._observation()

    def restart(self) -> Observation:
        if self._game_seed is None:
            raise ValueError("restart() needs a game: call reset(seed) first")
        return self.reset(self._game_seed)

    @property
    def done(self) -> bool:
        return len(self.my_moves) >= self.rounds

    def legal_actions(self) -> tuple[str, ...]:
        return () if self.done or self._game_seed is None else MOVES

    def step(self, action: str) -> StepResult:
        if action not in self.legal_actions():
            raise ValueError(f"illegal RPS action {action!r} now; legal: {', '.join(self.legal_actions()) or 'none'}")
        mine = MOVES.index(action)
        cumulative = np.cumsum(self.bot.distribution())
        theirs = min(int(np.searchsorted(cumulative, self._rng.random(), side="right")), 2)
        self.bot.observe(mine, theirs)
        self.my_moves.append(mine)
        self.opp_moves.append(theirs)
        reward = payoff(mine, theirs)
        info = {"opponent_move": MOVES[theirs], "result": RESULTS[reward]}
        return StepResult(self._observation(), float(reward), self.done, info)

    def score(self) -> float:
        return float(sum(payoff(m, o) for m, o in zip(self.my_moves, self.opp_moves)))

    def success(self) -> bool:
        return self.score() > 0

    def advice(self, reading: str) -> str:
        """'play paper' for 'rock': the move that beats the opponent's favourite."""
        if reading not in MOVES:
            raise ValueError(f"an RPS reading is one of {', '.join(MOVES)}, got {reading!r}")
        return f"play {MOVES[beats(MOVES.index(reading))]}"

    def oracle_action(self, seed: int) -> str:
        """Best response to the bot's next-move distribution; a tie between equally good moves is broken by `seed`."""
        return MOVES[random.Random(seed).choice(best_responses(self.bot.distribution()))]

    # --- text -------------------------------------------------------------------------------------------------------

    def _lines(self, first: int = 0) -> list[str]:
        rounds = list(zip(self.my_moves, self.opp_moves))[first:]
        return [round_line(first + i + 1, mine, theirs) for i, (mine, theirs) in enumerate(rounds)]

    def _observation(self) -> Observation:
        """Text: round, score, the last SHOWN_ROUNDS rounds. `data`: `round` (the next one, 1-based; rounds + 1 when
        over), `rounds`, `my_moves` / `opp_moves` (move names, whole game) and `score`."""
        played = len(self.my_moves)
        results = [payoff(m, o) for m, o in zip(self.my_moves, self.opp_moves)]
        tally = f"{results.count(1)} wins, {results.count(0)} draws, {results.count(-1)} losses"
        head = f"Game over after {played} rounds." if self.done else f"Round {played + 1} of {self.rounds}."
        text = f"{head} Your score: {sum(results):+d} ({tally})."
        if played:
            shown = max(0, played - SHOWN_ROUNDS)
            text += "\nLast rounds:\n" + "\n".join(self._lines(shown))
        data = {
            "round": played + 1,
            "rounds": self.rounds,
            "my_moves": [MOVES[m] for m in self.my_moves],
            "opp_moves": [MOVES[o] for o in self.opp_moves],
            "score": sum(results),
        }
        return Observation(text, self.legal_actions(), data)

    def task(self) -> str:
        """Retrieval query for memories: the situation a note could help with, never the bot's name.

        It names the round and the opponent's last three moves (what most bot patterns key on), e.g.
        "Rock-paper-scissors vs an unknown opponent; round 5 of 20; opponent's last moves: rock paper scissors".
        """
        recent = " ".join(MOVES[o] for o in self.opp_moves[-3:]) or "none yet"
        played = len(self.my_moves)
        return (
            f"Rock-paper-scissors vs an unknown opponent; round {min(played + 1, self.rounds)} of {self.rounds}; "
            f"opponent's last moves: {recent}"
        )

    def transcript(self) -> str:
        """The game so far: 'R1 you=rock opp=paper loss; R2 you=rock opp=rock draw; final score -1' (`rounds`),
        'the opponent played paper, rock; you played rock, rock; final score -1' (`by-player`) or 'the opponent
        played paper 1 times, rock 1 times, scissors 0 times (in order: paper, rock); you played …' (`tally`)."""
        if not self.my_moves:
            return "no rounds played"
        if self.transcript_form != "rounds":
            theirs, mine = (", ".join(MOVES[m] for m in moves) for moves in (self.opp_moves, self.my_moves))
            if self.transcript_form == "tally":
                theirs = f"{move_counts(self.opp_moves)} (in order: {theirs})"
            body = f"the opponent played {theirs}; you played {mine}"
        else:
            body = "; ".join(self._lines())
        return f"{body}; final score {self.score():+.0f}"
