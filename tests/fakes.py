"""Test aids shared by the test files: a deterministic stand-in LLM (never used outside tests)."""

from __future__ import annotations

from typing import Callable, Sequence

from ttlearn.llm.base import LLM, Message
from ttlearn.types import Completion


class FakeLLM(LLM):
    """A test aid: replies from a script (in order) or from `reply(last prompt)`; records every call."""

    spec = "fake"

    def __init__(self, replies: Sequence[str] | Callable[[str], str]) -> None:
        if callable(replies):
            self._reply = replies
        else:
            script = iter(replies)
            self._reply = lambda prompt: next(script)
        self.calls: list[dict] = []

    def complete(
        self, messages: Sequence[Message], *, max_tokens=128, temperature=0.0, seed=0, stop=(), choices=None
    ) -> Completion:
        self.calls.append(
            {"messages": list(messages), "max_tokens": max_tokens, "temperature": temperature, "seed": seed}
        )
        prompt = next(m["content"] for m in reversed(messages) if m["role"] != "assistant")  # past any prefill
        return Completion(self._reply(prompt))
