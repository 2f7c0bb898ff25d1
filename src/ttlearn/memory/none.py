"""No memory: every episode is played fresh. The control for every comparison."""

from __future__ import annotations

from typing import Any

from ttlearn.memory.base import Memory
from ttlearn.types import Episode


class NoMemory(Memory):
    carries_over = False

    def context(self, query: str) -> str:
        return ""

    def observe(self, episode: Episode) -> None:
        pass

    def state(self) -> dict[str, Any]:
        return {}

    def load(self, state: dict[str, Any]) -> None:
        pass
