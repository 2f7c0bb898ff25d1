"""db_bench's `mariadb` engine: each task's table in a database of its own, as a user of its own, on a MariaDB server
(`sandbox.task_database`). The server is the one the engine was given (whoever started it stops it), or one the
engine starts at its first table and stops when it is closed (or collected, or at exit): its lifetime is the
engine's, and so the environment's, never the process's."""

from __future__ import annotations

import secrets
import weakref
from contextlib import ExitStack

from ttlearn.data.db_bench import Task
from ttlearn.errors import BenchmarkDataError, DatabaseServerError
from ttlearn.sandbox.mariadb import Server, temporary_server
from ttlearn.sandbox.statements import StatementLimits
from ttlearn.sandbox.task_database import TaskDatabase, error_text

DATABASE_EXISTS = 1007


class MariaDBEngine:
    """Tasks' tables as databases on a MariaDB server (see the module docstring)."""

    name = "mariadb"
    deterministic = False

    def __init__(self, limits: StatementLimits, server: Server | None = None) -> None:
        self.limits = limits
        self._given = server
        self._started: Server | None = None
        self._stop: weakref.finalize | None = None

    @property
    def server(self) -> Server | None:
        """The server tables open on: the one given, else the one this engine started (None before its first table
        and after `close`)."""
        return self._given or self._started

    def open_table(self, task: Task) -> TaskDatabase:
        """The task's database, named after its table as the benchmark names it (another name when a task playing
        beside it on the same server holds that one). A server that cannot be reached raises
        `DatabaseServerError`; a table the server will not build from the shipped rows, `BenchmarkDataError`."""
        import pymysql

        server = self.server or self._start()
        try:
            try:
                return TaskDatabase(server, task.table, task.columns, task.rows, limits=self.limits)
            except pymysql.err.ProgrammingError as exc:
                if exc.args[0] != DATABASE_EXISTS:
                    raise
            name = f"{task.table}_{secrets.token_hex(3)}"
            return TaskDatabase(server, task.table, task.columns, task.rows, limits=self.limits, database=name)
        except pymysql.err.OperationalError as exc:
            raise DatabaseServerError(f"the MariaDB server of db_bench does not answer: {error_text(exc)}") from None
        except pymysql.err.MySQLError as exc:
            why = error_text(exc)
            raise BenchmarkDataError(
                f"the table of db_bench task {task.id} cannot be built on MariaDB: {why}"
            ) from None

    def _start(self) -> Server:
        """A server of the engine's own, stopped by `close`, or when the engine is collected or the process exits."""
        stack = ExitStack()
        self._started = stack.enter_context(temporary_server())
        self._stop = weakref.finalize(self, stack.close)
        return self._started

    def close(self) -> None:
        """Stop the server the engine started (a server it was given is its owner's)."""
        if self._stop is not None:
            self._stop()
        self._started, self._stop = None, None
