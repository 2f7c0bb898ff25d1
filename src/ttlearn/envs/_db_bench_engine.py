"""What db_bench needs of a database engine, written down: it opens a task's table, runs a reply's statements on it,
hashes it as the benchmark does, and closes it; the engine itself is closed when the environment is.

Two engines keep this protocol: `sqlite` (`_db_bench_sqlite`: a file per task, every reply's statements in a sandboxed
child) and `mariadb` (`_db_bench_mariadb`: a database per task on a server the engine owns, or one it is given). Both
answer with `sandbox.statements.Outcome` and name refusals with its `Refusal`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ttlearn.data.db_bench import Task
from ttlearn.sandbox.statements import Outcome, StatementLimits


class Table(Protocol):
    """One task's table, ready for the model's statements."""

    def execute(self, statements: Sequence[str]) -> Outcome:
        """The statements in order, each committed, up to the first error: the last one's outcome."""
        ...

    def table_hash(self) -> str | None:
        """The benchmark's hash of the table now (`_llb_verdict.table_hash`); None when the task grew it past what can
        be read, which fails the task."""
        ...

    def close(self) -> None:
        """End what the task left open and delete the table: the next task starts clean."""
        ...


class Engine(Protocol):
    """Where tasks' tables live. `deterministic`: whether a query answers the same from run to run (MariaDB returns
    rows an ORDER BY leaves tied in no fixed order)."""

    name: str
    deterministic: bool
    limits: StatementLimits

    def open_table(self, task: Task) -> Table:
        """The task's table with its rows, as the benchmark names it; a server the engine needs starts here."""
        ...

    def close(self) -> None:
        """Release what the engine started (its server)."""
        ...


def open_engine(name: str, limits: StatementLimits) -> Engine:
    """The engine called `name` (`data.db_bench.ENGINES`), its statements run under `limits`."""
    from ttlearn.envs._db_bench_mariadb import MariaDBEngine
    from ttlearn.envs._db_bench_sqlite import SQLiteEngine

    engines: dict[str, type[Engine]] = {"sqlite": SQLiteEngine, "mariadb": MariaDBEngine}
    return engines[name](limits)
