"""`first`: a stand-in back end that answers the first choice it is offered (the player shuffles them by seed)."""

from __future__ import annotations

from collections.abc import Sequence

from ttlearn.llm.base import LLM, Message
from ttlearn.types import Completion


class FirstChoice(LLM):
    supports_choices = True

    def __init__(self, spec: str) -> None:
        self.spec = spec

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 128,
        temperature: float = 0.0,
        seed: int = 0,
        stop: Sequence[str] = (),
        choices: Sequence[str] | None = None,
    ) -> Completion:
        return Completion(choices[0] if choices else "add 1", prompt_tokens=len(messages[-1]["content"]) // 4)


def first(arg: str) -> FirstChoice:
    """The factory of the `first` scheme: `--llm first` (no argument)."""
    return FirstChoice("first" + (f":{arg}" if arg else ""))
