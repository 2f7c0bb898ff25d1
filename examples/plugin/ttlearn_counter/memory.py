"""`tally`: shows the player how its last games ended."""

from __future__ import annotations

from typing import Any

from ttlearn.memory.base import Memory
from ttlearn.types import Episode


class Tally(Memory):  # named by its entry point
    def __init__(self, keep: int = 3, llm: Any = None) -> None:
        super().__init__(llm)
        self.keep, self.scores = keep, []

    def context(self, query: str) -> str:
        return f"Your last scores: {', '.join(map(str, self.scores))}." if self.scores else ""

    def observe(self, episode: Episode) -> None:
        self.scores = [*self.scores, episode.score][-self.keep :]

    def state(self) -> dict[str, Any]:
        return {"scores": list(self.scores)}

    def load(self, state: dict[str, Any]) -> None:
        self.scores = list(state["scores"])
