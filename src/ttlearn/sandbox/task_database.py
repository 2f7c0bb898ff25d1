"""Model-written SQL on a MariaDB server of our own (`sandbox.mariadb`), one task at a time.

SQL a model wrote is hostile. `TaskDatabase` gives each task its own fresh database holding its one table and its own
user, with rights on that database only (SELECT, INSERT, UPDATE, DELETE: no FILE, no DROP or CREATE, nothing on
`mysql.*` or another task's database; the database's name is escaped in the GRANT, where `_` and `%` are wildcards).
Every statement runs with the server's statement time limit for that user and a watchdog of ours that kills the
session past it (a session may change its own limit); its rows stream in one at a time and are refused past
`max_rows` rows or `max_bytes` characters, the session killed rather than the rest read. Refusals name their cause
(`Outcome.refused`, the same words as the SQLite engine's); the server's own errors come back as the benchmark's
client writes them ("1064 (42000): You have an error …").

A reply can end its own task, never the others: a new session first sets the user's password again (a reply may have
changed it), and closing the task ends whatever it left open, whatever the reply did. Its sessions are killed (an
open transaction rolls back), its prepared XA transactions, which outlive a session and hold their locks, are rolled
back, and its user and database are dropped, each wait for a lock bounded by `CLEANUP_LOCK_WAIT_S`.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ttlearn.sandbox.mariadb import Server
from ttlearn.sandbox.statements import Outcome, Refusal, StatementLimits, answer_chars

TASK_RIGHTS = "SELECT, INSERT, UPDATE, DELETE"
"""What a task's user may do, on its own database only: the benchmark's tasks read and change one table."""
WATCHDOG_GRACE_S = 0.5
"""How long past a statement's time limit our watchdog waits for the server's own limit before killing the session."""
CLEANUP_LOCK_WAIT_S = 10
"""The longest the administrator's clean-up waits for a lock (the server's default is a day)."""
SESSION_END_S = 5.0
"""How long the clean-up waits for the task's killed sessions to end before it rolls back what they prepared."""
REFUSED_ERRORS = {
    1044: Refusal.RIGHT,  # access to a database
    1045: Refusal.RIGHT,  # access denied
    1142: Refusal.RIGHT,  # a command on a table
    1143: Refusal.RIGHT,  # a column
    1148: Refusal.RIGHT,  # LOAD DATA LOCAL
    1227: Refusal.RIGHT,  # a privilege such as FILE or SUPER
    1290: Refusal.RIGHT,  # the server's options forbid it
    1370: Refusal.RIGHT,  # a routine
    4078: Refusal.RIGHT,  # a file operation
    1317: Refusal.TIME,  # interrupted
    1969: Refusal.TIME,  # max_statement_time
}
"""Server errors that mean the sandbox refused the statement, not that the SQL was wrong: the step is an invalid one
for this cause."""


def error_text(exc: Exception) -> str:
    """A server error as MySQL's own Python client writes it: "errno (SQLSTATE): message"."""
    args = getattr(exc, "args", ())
    if len(args) >= 2 and isinstance(args[0], int):
        state = getattr(exc, "sqlstate", None)
        return f"{args[0]} ({state}): {args[1]}" if state else f"{args[0]}: {args[1]}"
    return str(exc)


class TaskDatabase:
    """One task's own database on `server`, named like the benchmark names it (after its table), with its table and
    rows, and a user of its own with `TASK_RIGHTS` on it alone. `execute` runs the model's statements as that user;
    `table_hash` is the benchmark's MD5 of the table; `close` ends what the task left open and drops the database
    and the user."""

    def __init__(
        self,
        server: Server,
        table: str,
        columns: Sequence[tuple[str, str]],
        rows: Sequence[Sequence[Any]],
        *,
        limits: StatementLimits = StatementLimits(),
        database: str | None = None,
    ) -> None:
        self.server, self.table, self.columns = server, table, [name for name, _ in columns]
        self.database = database or table
        self.limits = limits
        self.user, self.password = f"task_{secrets.token_hex(6)}", secrets.token_hex(16)
        self.admin = server.connect()
        self._connection: Any = None
        created = False
        try:
            with self.admin.cursor() as cursor:
                cursor.execute("SET SESSION lock_wait_timeout = %s", (CLEANUP_LOCK_WAIT_S,))
                cursor.execute(f"CREATE DATABASE {_quoted(self.database)}")
                created = True
                cursor.execute(f"USE {_quoted(self.database)}")
                declared = ", ".join(f"{_quoted(name)} {kind}" for name, kind in columns)
                cursor.execute(f"CREATE TABLE {_quoted(table)} ({declared})")
                if rows:
                    names = ", ".join(_quoted(name) for name, _ in columns)
                    marks = ", ".join(["%s"] * len(columns))
                    # every value as a quoted string, as the benchmark inserts them (the server converts)
                    values = [tuple(None if v is None else str(v) for v in row) for row in rows]
                    cursor.executemany(f"INSERT INTO {_quoted(table)} ({names}) VALUES ({marks})", values)
                limit = max(limits.timeout_ms / 1000, 0.001)
                cursor.execute(
                    f"CREATE USER %s@'localhost' IDENTIFIED BY %s WITH MAX_STATEMENT_TIME {limit:.3f}",
                    (self.user, self.password),
                )
                granted = _quoted(_grant_pattern(self.database))
                cursor.execute(f"GRANT {TASK_RIGHTS} ON {granted}.* TO %s@'localhost'", (self.user,))
        except BaseException:
            self._drop(created)
            raise

    def _session(self) -> Any:
        """The task's session, opened anew after one was killed: its password set again first, since a reply may
        have changed it (SET PASSWORD needs no right)."""
        if self._connection is None:
            with self.admin.cursor() as cursor:
                cursor.execute("SET PASSWORD FOR %s@'localhost' = PASSWORD(%s)", (self.user, self.password))
            read_timeout = self.limits.timeout_ms / 1000 + 2 * WATCHDOG_GRACE_S
            self._connection = self.server.connect(self.user, self.password, self.database, read_timeout=read_timeout)
        return self._connection

    def execute(self, statements: Sequence[str]) -> Outcome:
        """The statements in order, each committed, as the benchmark's container runs a reply's SQL (split on ';'):
        the last one's outcome, or the first error (the statements before it stay done)."""
        outcome, changed = Outcome(rows=()), False
        for statement in statements:
            outcome = self._one(statement)
            changed = changed or outcome.changed
            if outcome.error is not None:
                break
        return replace(outcome, changed=changed)

    def _one(self, statement: str) -> Outcome:
        import pymysql
        from pymysql.cursors import SSCursor

        killed = threading.Event()
        watchdog: threading.Timer | None = None
        cursor: Any = None
        try:
            connection = self._session()
            thread = connection.thread_id()
            watchdog = threading.Timer(self.limits.timeout_ms / 1000 + WATCHDOG_GRACE_S, self._kill, (thread, killed))
            watchdog.start()
            cursor = connection.cursor(SSCursor)
            cursor.execute(statement)
            if cursor.description is None:
                return Outcome(rows=None, changed=cursor.rowcount > 0)
            rows: list[tuple] = []
            chars = 0
            for row in iter(cursor.fetchone, None):  # one row off the socket at a time: nothing is held past a cap
                chars += answer_chars(row)
                if len(rows) == self.limits.max_rows or chars > self.limits.max_bytes:
                    self._kill(thread, killed)  # the rest would stream on: end the session instead of reading it
                    if len(rows) == self.limits.max_rows:
                        return Outcome(error=f"the result has more than {self.limits.max_rows:,} rows",
                                       refused=Refusal.ROWS)  # fmt: skip
                    return Outcome(error=f"the result is longer than {self.limits.max_bytes:,} characters",
                                   refused=Refusal.SIZE)  # fmt: skip
                rows.append(row)
            cursor.close()
            return Outcome(rows=tuple(rows))
        except pymysql.err.MySQLError as exc:
            if killed.is_set():
                return Outcome(error=f"the statement ran past {self.limits.timeout_ms} ms and was stopped",
                               refused=Refusal.TIME)  # fmt: skip
            errno = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            return Outcome(error=error_text(exc), refused=REFUSED_ERRORS.get(errno) if errno is not None else None)
        finally:
            if watchdog is not None:
                watchdog.cancel()
            if killed.is_set():
                self._connection = None  # its session was killed: the next statement opens a new one
                if cursor is not None and cursor._result is not None:  # do not drain a dead session on collection
                    cursor._result.unbuffered_active = False

    def _kill(self, thread: int, killed: threading.Event) -> None:
        """End the task's session `thread` from the administrator's side: a statement past its time (the session may
        have raised its own limit), or a result past its cap that would otherwise stream on."""
        killed.set()
        try:
            with self.server.connect() as admin, admin.cursor() as cursor:
                cursor.execute(f"KILL {int(thread)}")
        except Exception:  # noqa: BLE001 - the session may be gone already
            pass

    def table_hash(self) -> str:
        """The benchmark's hash of the table (`md5(group_concat(rowhash order by rowhash))` over the first five hex
        digits of each row's `md5(concat_ws(',', columns))`), as its client shows it: "None" for an empty table."""
        names = ",".join(_quoted(name) for name in self.columns)
        query = (
            "SELECT md5(group_concat(rowhash ORDER BY rowhash)) AS hash FROM ("
            f"SELECT substring(md5(concat_ws(',', {names})), 1, 5) AS rowhash FROM {_quoted(self.table)}) AS sub"
        )
        with self.admin.cursor() as cursor:
            cursor.execute(f"USE {_quoted(self.database)}")
            cursor.execute(query)
            (value,) = cursor.fetchone()
        return str(value)

    def close(self) -> None:
        self._drop(True)

    def _drop(self, created: bool) -> None:
        """End what the task left open (module docstring), then drop its user and, when it was made, its database."""
        if self._connection is not None:
            try:
                self._connection.close()
            except Exception:  # noqa: BLE001 - a killed session
                pass
            self._connection = None
        try:
            with self.admin.cursor() as cursor:
                self._end_sessions(cursor)
                cursor.execute("DROP USER IF EXISTS %s@'localhost'", (self.user,))
                _roll_back_prepared(cursor)
                if created:
                    cursor.execute(f"DROP DATABASE IF EXISTS {_quoted(self.database)}")
        finally:
            self.admin.close()

    def _end_sessions(self, cursor: Any) -> None:
        """Kill every session of the task's user and wait (at most `SESSION_END_S`) until they are gone: a session's
        prepared XA transaction can be rolled back only once the session has let it go."""
        deadline = time.monotonic() + SESSION_END_S
        while True:
            cursor.execute("SELECT id FROM information_schema.processlist WHERE user = %s", (self.user,))
            sessions = [thread for (thread,) in cursor.fetchall()]
            if not sessions or time.monotonic() > deadline:
                return
            for thread in sessions:
                try:
                    cursor.execute(f"KILL {int(thread)}")
                except Exception:  # noqa: BLE001 - it ended meanwhile
                    pass
            time.sleep(0.02)

    def __enter__(self) -> TaskDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _roll_back_prepared(cursor: Any) -> None:
    """Roll back every prepared XA transaction on the server: none is ever legitimate here (the tasks' SQL never
    needs one), and one outlives its session with its locks, so the task's DROP DATABASE would wait on it."""
    cursor.execute("XA RECOVER FORMAT='SQL'")
    for row in cursor.fetchall():
        try:
            cursor.execute(f"XA ROLLBACK {row[3]}")
        except Exception:  # noqa: BLE001 - another clean-up rolled it back first
            pass


def _grant_pattern(database: str) -> str:
    """A database name as a GRANT reads it literally: `_` and `%` are wildcards there, so `staff_schedules` would
    also grant `staffXschedules`."""
    return database.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%")


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
