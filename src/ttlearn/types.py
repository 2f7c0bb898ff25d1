"""Plain data shared by every room of the house: environments, LLMs, memories, runs, evaluation.

Everything here is a frozen dataclass that serialises to JSON with `asdict`, so a run directory can be replayed and
re-evaluated without importing the code that produced it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

NoteAt = Literal["system", "exchange", "advice", "default"]
"""Where a player shows a memory's text (`ttlearn.players.llm.NOTE_AT` says what each means); a run's and a trainer's
config both name it."""

MOVE_SEQUENCE = "Moves in order, one per decision:"
"""A memory's note that starts with this line is a move sequence even when it holds one move (a note of one action line
is otherwise a fact that names the same action at every decision)."""
RULED_OUT = "Avoid:"
"""A memory's note line that starts with this names actions an earlier attempt showed to be bad, comma-separated (a
`note_at="default"` player leaves them off the actions it lists)."""


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
    """What one `Env.step` did. `rejected` is the simulator's reason when it refused the command ("No known action
    matches that input"): the step still happened (the environment answered it) but counts as an invalid one."""

    observation: Observation
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)
    rejected: str | None = None


@dataclass(frozen=True)
class Completion:
    """One LLM answer. `choice_logprobs` is set when the back end scored a fixed list of choices."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    choice_logprobs: dict[str, float] | None = None
    cached: bool = False


UNPARSEABLE, REJECTED, OVERFLOW = "unparseable", "rejected", "overflow"
"""Why a step is invalid: the reply named no action; the simulator refused the command (its reason in the step's
info under "rejected"); the prompt did not fit the model's context (the reason is the step's `raw`)."""
NO_REPLY = "[no reply: "
"""How the reply of a step whose prompt overflowed begins (`[no reply: prompt of N tokens exceeds …]`)."""


@dataclass(frozen=True)
class Step:
    """One decision of an episode: what was seen, what was done, and how it went; `cause` says why an invalid one is
    invalid (`UNPARSEABLE`, `REJECTED`, `OVERFLOW`)."""

    observation: str
    action: str
    reward: float
    valid: bool = True
    raw: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    cause: str = ""

    @property
    def invalid_cause(self) -> str | None:
        """None for a valid step; else its cause, read for records written before causes were (an overflow's reply
        was then the only sign of it)."""
        if self.valid:
            return None
        return self.cause or (OVERFLOW if self.raw.startswith(NO_REPLY) else UNPARSEABLE)

    def to_json(self) -> dict[str, Any]:
        """Its record; `cause` is written only where there is one, so records of valid play stay as they were
        before causes were recorded."""
        data = asdict(self)
        if not self.cause:
            del data["cause"]
        return data


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

    @property
    def invalid_causes(self) -> dict[str, int]:
        """How many of its steps are invalid, by cause (only the causes that occur)."""
        return count_causes(self.steps)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "steps": [step.to_json() for step in self.steps]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Episode:
        steps = tuple(Step(**s) for s in data["steps"])
        return cls(**{**data, "steps": steps})


def count_causes(steps: Iterable[Step]) -> dict[str, int]:
    """Invalid steps by cause, in the order `UNPARSEABLE, REJECTED, OVERFLOW` (then any other), zeros left out."""
    return add_causes([{step.invalid_cause: 1} for step in steps if step.invalid_cause is not None])


def add_causes(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    """Several counts of invalid steps by cause added up, in `count_causes`'s order."""
    total: dict[str, int] = {}
    for each in counts:
        for cause, count in each.items():
            total[cause] = total.get(cause, 0) + count
    order = [UNPARSEABLE, REJECTED, OVERFLOW]
    return dict(sorted(total.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)))
