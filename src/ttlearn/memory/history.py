"""Raw history: the transcripts of the last k episodes, verbatim. No LLM writes anything."""

from __future__ import annotations

from typing import Any

from ttlearn.llm.base import LLM
from ttlearn.memory.base import MEMORIES, Memory
from ttlearn.types import Episode


def episode_log(episode: Episode) -> str:
    """One episode as the memory methods show it: index, score and the environment's transcript."""
    transcript = episode.info.get("transcript") or "; ".join(f"{s.action}→{s.reward:+g}" for s in episode.steps)
    return f"Game {episode.index} (score {episode.score:+g}): {transcript}"


@MEMORIES.register("history")
class HistoryMemory(Memory):
    name = "history"

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
