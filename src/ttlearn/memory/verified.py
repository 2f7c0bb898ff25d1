"""Verified moves: what earlier attempts at the same instance showed to work, as a move list the player can replay,
and what they showed to fail, as moves to leave out.

The ceiling table (docs/ceiling.md) found that the small players execute a verified move sequence when each move is
offered as the suggested action (`--note-at default`: the k-th line at the k-th decision), and describe-only notes
they ignore. Between attempts at one instance (LaMer's setting) the environment itself verifies moves: a move that
earned a positive reward (a Minesweeper reveal that opened cells) is safe to play again from the same start, and one
that cost reward (a mine, a cell already open) is not worth playing again. Replaying the first alone would bring a
greedy player back to the state where it failed, to fail the same way; ruling out the second makes it try another
move there. No LLM writes anything. Moves must name the same thing from any state (Minesweeper's cells), not be
relative to it (Sokoban's directions).
"""

from __future__ import annotations

from typing import Any

from ttlearn.llm.base import LLM
from ttlearn.memory.base import Memory
from ttlearn.types import MOVE_SEQUENCE, RULED_OUT, Episode


def verified_moves(episode: Episode) -> list[str]:
    """The moves of `episode` worth replaying: every valid move of a solved attempt, else those with a positive
    reward (progress the environment confirmed), in the order played."""
    if episode.success:
        return [step.action for step in episode.steps if step.valid]
    return [step.action for step in episode.steps if step.valid and step.reward > 0]


def failed_moves(episode: Episode) -> list[str]:
    """The valid moves of `episode` that cost reward (an unsolved attempt's mine, a reveal of an open cell)."""
    return [step.action for step in episode.steps if step.valid and step.reward < 0]


class VerifiedMovesMemory(Memory):
    """The latest attempt's verified moves (an earlier attempt's when the latest verified none) under the
    `MOVE_SEQUENCE` line, one per line, then one `Avoid:` line with every attempt's failed moves (a cell opened and
    then chosen again is both: suggested at its turn, left out at the others)."""

    needs_trials = True

    def __init__(self, llm: LLM | None = None) -> None:
        super().__init__(llm)
        self.moves: list[str] = []
        self.avoid: list[str] = []

    def context(self, query: str) -> str:
        moves = [MOVE_SEQUENCE, *self.moves] if self.moves else []
        avoid = [f"{RULED_OUT} {', '.join(self.avoid)}"] if self.avoid else []
        return "\n".join([*moves, *avoid])

    def observe(self, episode: Episode) -> None:
        self.moves = verified_moves(episode) or self.moves
        self.avoid += [move for move in dict.fromkeys(failed_moves(episode)) if move not in self.avoid]

    def state(self) -> dict[str, Any]:
        return {"moves": list(self.moves), "avoid": list(self.avoid)}

    def load(self, state: dict[str, Any]) -> None:
        self.moves = list(state.get("moves", []))
        self.avoid = list(state.get("avoid", []))
