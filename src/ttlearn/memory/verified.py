"""Verified moves: what earlier attempts at the same instance showed to work, as a move list the player can replay.

The ceiling table (docs/ceiling.md) found that the small players execute a verified move sequence when each move is
offered as the suggested action (`--note-at default`: the k-th line at the k-th decision), and describe-only notes
they ignore. Between attempts at one instance (LaMer's setting) the environment itself verifies moves: a move that
earned a positive reward (a Minesweeper reveal that opened cells) is safe to play again from the same start. This
memory keeps those moves, in order — all of a solved attempt's — and no LLM writes anything.
"""

from __future__ import annotations

from typing import Any

from ttlearn.llm.base import LLM
from ttlearn.memory.base import Memory
from ttlearn.types import Episode


def verified_moves(episode: Episode) -> list[str]:
    """The moves of `episode` worth replaying: every valid move of a solved attempt, else those with a positive
    reward (progress the environment confirmed), in the order played."""
    if episode.success:
        return [step.action for step in episode.steps if step.valid]
    return [step.action for step in episode.steps if step.valid and step.reward > 0]


class VerifiedMovesMemory(Memory):
    """The latest attempt's verified moves, one per line (an earlier attempt's when the latest verified none)."""

    needs_trials = True

    def __init__(self, llm: LLM | None = None) -> None:
        super().__init__(llm)
        self.moves: list[str] = []

    def context(self, query: str) -> str:
        return "\n".join(self.moves)

    def observe(self, episode: Episode) -> None:
        self.moves = verified_moves(episode) or self.moves

    def state(self) -> dict[str, Any]:
        return {"moves": list(self.moves)}

    def load(self, state: dict[str, Any]) -> None:
        self.moves = list(state.get("moves", []))
