"""A task's statements on any engine, in the same terms: the limits one reply's statements run under, what they did,
and why the sandbox stopped one.

Both of db_bench's engines (SQLite in a sandboxed child, `sandbox.sqlite`; a MariaDB server of our own,
`sandbox.mariadb`) return an `Outcome`, and name a refusal with one `Refusal`, so the environment reads them alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Refusal(StrEnum):
    """Why the sandbox stopped a statement (the step is then an invalid one): the same words on every engine."""

    RIGHT = "a right the task does not have"
    TIME = "the time limit"
    ROWS = "the row cap"
    SIZE = "the size cap"
    CRASH = "the sandbox's process failed"


@dataclass(frozen=True)
class StatementLimits:
    """What one reply's statements may cost: their time, and the rows and characters of the answer they return
    (counted as the rows stream in, so an answer past the cap is never held whole)."""

    timeout_ms: int = 2000
    max_rows: int = 1000
    max_bytes: int = 64_000


@dataclass(frozen=True)
class Outcome:
    """What a reply's statements did: the last one's rows (None for a statement that returns none), or the error
    text the agent sees; `refused` says why the sandbox stopped it; `changed`: whether any of them changed a row (a
    repeated statement on an unchanged table answers the same)."""

    rows: tuple[tuple, ...] | None = None
    error: str | None = None
    refused: Refusal | None = None
    changed: bool = False


def answer_chars(row: tuple) -> int:
    """The characters one row adds to the answer as the client writes it (`[(1, 'a'), (2, 'b')]`): its tuple and a
    separator."""
    return len(repr(row)) + 2
