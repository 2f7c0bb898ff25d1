"""db_bench's `sqlite` engine: each task's table in a SQLite file of its own, every reply's statements in a sandboxed
child on a copy, which sends the changed file back (`sandbox.sqlite.run_statements`); this process never opens a file
the statements wrote."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

from ttlearn.data.db_bench import Task
from ttlearn.envs._llb_verdict import table_hash
from ttlearn.errors import BenchmarkDataError
from ttlearn.sandbox.sqlite import run_query, run_statements
from ttlearn.sandbox.statements import Outcome, Refusal, StatementLimits

OUTGROWN = (Refusal.ROWS, Refusal.SIZE, Refusal.TIME)
"""Why reading a table for its hash may stop when the task grew it: past the rows or characters one read returns,
or its time. The task then fails; any other failure to read it is the data's or the sandbox's."""


class SQLiteEngine:
    """Tasks' tables as SQLite files (see the module docstring)."""

    name = "sqlite"
    deterministic = True

    def __init__(self, limits: StatementLimits) -> None:
        self.limits = limits

    def open_table(self, task: Task) -> SQLiteTable:
        return SQLiteTable(task, self.limits)

    def close(self) -> None:
        """Nothing to release: each table deletes its own file."""


class SQLiteTable:
    """A task's table in a SQLite file of its own, in a folder the sandbox's user can read."""

    def __init__(self, task: Task, limits: StatementLimits) -> None:
        self.task, self.limits = task, limits
        self.folder = Path(tempfile.mkdtemp(prefix="ttlearn-db-bench-"))
        self.folder.chmod(0o755)
        self.path = self.folder / "task.sqlite"
        names = ", ".join(_name(name) for name, _ in task.columns)
        declared = ", ".join(f"{_name(name)} {kind}" for name, kind in task.columns)
        marks = ", ".join("?" * len(task.columns))
        try:
            with closing(sqlite3.connect(self.path)) as connection, connection:
                connection.execute(f"CREATE TABLE {_name(task.table)} ({declared})")
                # every value as a quoted string, as the benchmark inserts them (the column's affinity converts)
                rows = [tuple(None if v is None else str(v) for v in row) for row in task.rows]
                connection.executemany(f"INSERT INTO {_name(task.table)} ({names}) VALUES ({marks})", rows)
        except sqlite3.Error as exc:
            self.close()
            raise BenchmarkDataError(f"the table of db_bench task {task.id} cannot be built on SQLite: {exc}") from None
        self.path.chmod(0o644)

    def execute(self, statements: Sequence[str]) -> Outcome:
        result, changed = run_statements(self.path, list(statements), self.limits)
        if changed is not None:
            self.path.write_bytes(changed)
        touched = changed is not None
        if not result.ok:
            return Outcome(error=result.error, refused=result.refused, changed=touched)
        return Outcome(rows=result.rows if result.columns else None, changed=touched)

    def table_hash(self) -> str | None:
        result = run_query(self.path, f"SELECT * FROM {_name(self.task.table)}", self.limits.timeout_ms)
        if result.ok:
            return table_hash(result.rows)
        if result.refused in OUTGROWN:
            return None
        raise BenchmarkDataError(f"the table of db_bench task {self.task.id} cannot be read: {result.error}")

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
