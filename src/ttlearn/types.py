"""Plain data shared by every room of the house: environments, LLMs, memories, sessions, evaluation.

Everything here is a frozen dataclass that serialises to JSON with `asdict`, so a run directory can be replayed and
re-evaluated without importing the code that produced it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


class MemoryText(str):
    """What a memory shows, as text (records, the notes in the system prompt), that may also carry `exchanges`:
    (task, answer) pairs a player can show as earlier user/assistant turns instead of notes. A plain `str` is a
    memory text without exchanges, so every memory that returns text keeps working."""

    exchanges: tuple[tuple[str, str], ...]

    def __new__(cls, text: str, exchanges: tuple[tuple[str, str], ...] = ()) -> MemoryText:
        made = super().__new__(cls, text)
        made.exchanges = tuple(exchanges)
        return made


@dataclass(frozen=True)
class Observation:
    """What the player sees before acting.

    `text` is the prompt-ready description; `legal_actions` the exact strings `Env.step` accepts; `data` holds the
    same facts as structured values for scripted players and memories that need no parsing.
    """

    text: str
    legal_actions: tuple[str, ...]
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepResult:
    observation: Observation
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Completion:
    """One LLM answer. `choice_logprobs` is set when the back end scored a fixed list of choices."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    choice_logprobs: dict[str, float] | None = None
    cached: bool = False


@dataclass(frozen=True)
class Step:
    """One decision of an episode: what was seen, what was done, and how it went."""

    observation: str
    action: str
    reward: float
    valid: bool = True
    raw: str = ""
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Episode:
    """A finished game / attempt. `score` is the environment's headline number for it."""

    index: int
    seed: int
    task: str
    steps: tuple[Step, ...]
    score: float
    success: bool | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def invalid_actions(self) -> int:
        return sum(not s.valid for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Episode:
        steps = tuple(Step(**s) for s in data["steps"])
        return cls(**{**data, "steps": steps})
