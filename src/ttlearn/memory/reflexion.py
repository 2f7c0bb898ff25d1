"""Reflexion (Shinn et al. 2023): after each episode the LLM writes a short self-reflection; the last 3 are shown.

The original reflects after failures only; in repeated games every game is informative, so by default we reflect
after every game (`only_failures=True` restores the original rule).
"""

from __future__ import annotations

from typing import Any

from ttlearn.llm.base import LLM
from ttlearn.memory.base import Memory
from ttlearn.memory.text import episode_log, game_number
from ttlearn.types import Episode

PROMPT = (
    "You just played this game.\n{log}\n\n"
    "In one or two sentences, say what the opponent tends to do and which move you should play next game. "
    "Be concrete."
)


class ReflexionMemory(Memory):
    needs_llm = True

    def __init__(self, llm: LLM | None = None, keep: int = 3, max_tokens: int = 64, only_failures: bool = False):
        super().__init__(llm)
        if keep < 1 or max_tokens < 8:
            raise ValueError("reflexion needs keep >= 1 and max_tokens >= 8")
        self.keep, self.max_tokens, self.only_failures = keep, max_tokens, only_failures
        self.reflections: list[str] = []

    def context(self, query: str) -> str:
        return "\n".join(f"- {r}" for r in self.reflections[-self.keep :])

    def observe(self, episode: Episode) -> None:
        if self.only_failures and episode.success:
            return
        assert self.llm is not None
        messages = [
            {"role": "system", "content": episode.info.get("rules", episode.task)},
            {"role": "user", "content": PROMPT.format(log=episode_log(episode))},
        ]
        reply = self.llm.complete(messages, max_tokens=self.max_tokens, temperature=0.0, seed=episode.seed)
        text = " ".join(reply.text.split())
        if text:
            self.reflections = (self.reflections + [f"After game {game_number(episode)}: {text}"])[-self.keep :]

    def state(self) -> dict[str, Any]:
        return {"reflections": list(self.reflections)}

    def load(self, state: dict[str, Any]) -> None:
        self.reflections = list(state.get("reflections", []))
