"""Raw history: the transcripts of the last k episodes, verbatim. No LLM writes anything."""

from __future__ import annotations

from typing import Any

from ttlearn.llm.base import LLM
from ttlearn.memory.base import Memory
from ttlearn.memory.text import episode_log
from ttlearn.types import Episode


class HistoryMemory(Memory):
    def __init__(self, llm: LLM | None = None, k: int = 2) -> None:
        super().__init__(llm)
        if k < 1:
            raise ValueError("history memory needs k >= 1")
        self.k = k
        self.logs: list[str] = []

    def context(self, query: str) -> str:
        return "\n".join(self.logs[-self.k :])

    def observe(self, episode: Episode) -> None:
        self.logs = (self.logs + [episode_log(episode)])[-self.k :]

    def state(self) -> dict[str, Any]:
        return {"logs": list(self.logs)}

    def load(self, state: dict[str, Any]) -> None:
        self.logs = list(state.get("logs", []))
