"""A MariaDB server of our own, and model-written SQL on it, one task at a time.

`temporary_server()` starts a fresh `mariadbd` (Debian's `mariadb-server`) in a temporary folder: no network, a unix
socket in that folder, its own user (`mysql`, when we are root), no options file read, stopped and deleted at the end.
Its settings are MySQL 8's where they change what a query returns (`sql_mode` with ONLY_FULL_GROUP_BY, utf8mb4 with
an accent- and case-insensitive collation, `group_concat_max_len` 1024) and tight where hostile SQL could hurt
(`local_infile` off, `secure_file_priv` an empty folder, small packets and temporary tables, few connections).
Internal temporary tables live on disk (`tmp_memory_table_size` 0): in memory, a GROUP BY's rows are referred to by
their memory addresses, which break ties under an ORDER BY, so tied rows came back in another order from run to run
(4 of the 350 SELECT golds in 12 runs); on disk they come back in one order.

SQL a model wrote is hostile. `TaskDatabase` gives each task its own fresh database holding its one table and its own
user, with rights on that database only (SELECT, INSERT, UPDATE, DELETE: no FILE, no DROP or CREATE, nothing on
`mysql.*` or another task's database); every statement runs with the server's statement time limit for that user and a
watchdog of ours that kills the connection past it (a session may change its own limit), and what comes back is
refused past `max_rows` rows or `max_bytes` characters. Refusals carry their reason (`Outcome.refused`); the server's
own errors come back as the benchmark's client writes them ("1064 (42000): You have an error …"). Closing the task
drops its database and its user: nothing is left behind.
"""

from __future__ import annotations

import secrets
import signal
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from ttlearn.sandbox.dbserver import find_program, server_folder, user_missing

SERVER_USER = "mysql"
SERVER_PROGRAM = "mariadbd"
INSTALL_PROGRAM = "mariadb-install-db"
SEARCH_PATH = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")
START_TIMEOUT_S = 30.0
WATCHDOG_GRACE_S = 0.5
"""How long past a statement's time limit our watchdog waits for the server's own limit before killing the session."""
MYSQL8_SQL_MODE = (
    "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
    "NO_ENGINE_SUBSTITUTION"
)
"""MySQL 8's default `sql_mode`, the server the benchmark's golds were written for (MariaDB's lacks
ONLY_FULL_GROUP_BY, so it would answer queries MySQL refuses)."""
COLLATION = "utf8mb4_uca1400_ai_ci"
"""The nearest MariaDB 10.11 has to MySQL 8's default `utf8mb4_0900_ai_ci`: a Unicode collation, case- and
accent-insensitive ('alice' = 'Alice', as the benchmark's server compares)."""
SERVER_OPTIONS = (
    "--skip-networking",
    "--skip-name-resolve",
    "--local-infile=0",
    "--performance-schema=OFF",
    "--character-set-server=utf8mb4",
    f"--collation-server={COLLATION}",
    f"--sql-mode={MYSQL8_SQL_MODE}",
    "--group-concat-max-len=1024",
    "--max-connections=64",
    "--max-allowed-packet=4M",
    "--max-heap-table-size=16M",
    "--tmp-memory-table-size=0",
    "--tmp-disk-table-size=64M",
    "--innodb-buffer-pool-size=32M",
    "--innodb-log-file-size=8M",
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-doublewrite=0",
)
"""Every option the server runs with besides its folders (`--no-defaults`: no options file of the machine is read)."""
TASK_RIGHTS = "SELECT, INSERT, UPDATE, DELETE"
"""What a task's user may do, on its own database only: the benchmark's tasks read and change one table."""
REFUSALS = {
    1044: "access to that database is refused",
    1045: "access is refused",
    1142: "that command is refused on this table",
    1143: "that column is refused",
    1148: "LOAD DATA LOCAL is disabled",
    1227: "that needs a privilege this task does not have",
    1290: "the server's options forbid that statement",
    1317: "the statement was interrupted",
    1370: "that routine is refused",
    1969: "the statement ran past its time limit",
    4078: "that file operation is refused",
}
"""Server errors that mean the sandbox refused the statement (a right the task lacks, the time limit), not that the
SQL was wrong: the step is an invalid one with this reason."""


def server_missing() -> str | None:
    """Why `temporary_server` cannot start here, or None when it can."""
    for program in (SERVER_PROGRAM, INSTALL_PROGRAM):
        if find_program(program, SEARCH_PATH) is None:
            return f"MariaDB's {program} is not installed (apt-get install mariadb-server)"
    try:
        import pymysql  # noqa: F401
    except ImportError:
        return "the MariaDB client is not installed: pip install 'ttlearn[mariadb]'"
    return user_missing(SERVER_USER, "MariaDB")


@dataclass(frozen=True)
class Server:
    """A running server: where its socket is and how the administrator logs in (a random password, the socket in a
    folder only the server's user and we can enter)."""

    socket: str
    password: str

    def connect(self, user: str = "root", password: str | None = None, database: str | None = None, **options: Any):
        import pymysql

        return pymysql.connect(
            unix_socket=self.socket,
            user=user,
            password=self.password if password is None else password,
            database=database,
            autocommit=True,
            local_infile=False,
            charset="utf8mb4",
            **options,
        )


@contextmanager
def temporary_server(start_timeout_s: float = START_TIMEOUT_S) -> Iterator[Server]:
    """A fresh MariaDB on a unix socket in a temporary folder (`dbserver.server_folder`: as root, the mysql user's),
    stopped and deleted on exit. A server that fails to install, start or answer raises `DatabaseServerError`."""
    missing = server_missing()
    if missing:
        raise FileNotFoundError(missing)
    import pymysql

    with server_folder("ttlearn-mariadb-", SERVER_USER, "MariaDB") as folder:
        data, files, socket = folder.path / "data", folder.folder("no-files"), str(folder.path / "server.sock")
        folder.run(
            str(find_program(INSTALL_PROGRAM, SEARCH_PATH)), "--no-defaults", f"--datadir={data}", "--skip-test-db",
            "--auth-root-authentication-method=normal", "--innodb-log-file-size=8M", "--innodb-buffer-pool-size=32M",
        )  # fmt: skip

        def answers() -> bool:
            try:
                pymysql.connect(unix_socket=socket, user="root", password="").close()
                return True
            except pymysql.err.OperationalError:
                return False

        folder.start(
            [str(find_program(SERVER_PROGRAM, SEARCH_PATH)), "--no-defaults", f"--datadir={data}", f"--socket={socket}",
             f"--pid-file={folder.path / 'server.pid'}", f"--tmpdir={folder.path}", f"--secure-file-priv={files}",
             *SERVER_OPTIONS],
            answers, signal.SIGTERM, start_timeout_s,
        )  # fmt: skip
        password = secrets.token_hex(16)
        with pymysql.connect(unix_socket=socket, user="root", password="", autocommit=True) as admin:
            with admin.cursor() as cursor:
                cursor.execute("ALTER USER 'root'@'localhost' IDENTIFIED BY %s", (password,))
                cursor.execute("DROP USER IF EXISTS ''@'localhost'")
        yield Server(socket, password)


@dataclass(frozen=True)
class Outcome:
    """What a reply's statements did: the last one's rows (None for a statement that returns none), or the error
    text the benchmark's client shows; `refused` says why the sandbox stopped it (the step is then an invalid one);
    `changed`: whether any of them changed a row (a repeated statement on an unchanged table answers the same)."""

    rows: tuple[tuple, ...] | None = None
    error: str | None = None
    refused: str | None = None
    changed: bool = False


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
    `table_hash` is the benchmark's MD5 of the table; `close` drops the database and the user."""

    def __init__(
        self,
        server: Server,
        table: str,
        columns: Sequence[tuple[str, str]],
        rows: Sequence[Sequence[Any]],
        *,
        timeout_ms: int = 2000,
        max_rows: int = 1000,
        max_bytes: int = 64_000,
        database: str | None = None,
    ) -> None:
        self.server, self.table, self.columns = server, table, [name for name, _ in columns]
        self.database = database or table
        self.timeout_ms, self.max_rows, self.max_bytes = timeout_ms, max_rows, max_bytes
        self.user, self.password = f"task_{secrets.token_hex(6)}", secrets.token_hex(16)
        self.admin = server.connect()
        self._connection: Any = None
        created = False
        try:
            with self.admin.cursor() as cursor:
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
                limit = max(timeout_ms / 1000, 0.001)
                cursor.execute(
                    f"CREATE USER %s@'localhost' IDENTIFIED BY %s WITH MAX_STATEMENT_TIME {limit:.3f}",
                    (self.user, self.password),
                )
                cursor.execute(f"GRANT {TASK_RIGHTS} ON {_quoted(self.database)}.* TO %s@'localhost'", (self.user,))
        except BaseException:
            self._drop(created)
            raise

    def _connect(self) -> Any:
        if self._connection is None:
            self._connection = self.server.connect(
                self.user, self.password, self.database, read_timeout=self.timeout_ms / 1000 + 2 * WATCHDOG_GRACE_S
            )
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

        connection = self._connect()
        thread = connection.thread_id()
        killed = threading.Event()
        watchdog = threading.Timer(self.timeout_ms / 1000 + WATCHDOG_GRACE_S, self._kill, (thread, killed))
        watchdog.start()
        cursor = connection.cursor(SSCursor)
        try:
            cursor.execute(statement)
            if cursor.description is None:
                return Outcome(rows=None, changed=cursor.rowcount > 0)
            rows = cursor.fetchmany(self.max_rows + 1)
            if len(rows) > self.max_rows:  # the rest would stream on: end the session instead of reading it
                self._kill(thread, killed)
                return Outcome(error=f"the result has more than {self.max_rows:,} rows", refused="too many rows")
            cursor.close()
            if len(repr(list(rows))) > self.max_bytes:
                return Outcome(error=f"the result is longer than {self.max_bytes:,} characters", refused="too long")
            return Outcome(rows=tuple(tuple(row) for row in rows))
        except pymysql.err.MySQLError as exc:
            if killed.is_set():
                return Outcome(error=f"the statement ran past {self.timeout_ms} ms and was stopped", refused="time")
            errno = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            return Outcome(error=error_text(exc), refused=REFUSALS.get(errno) if errno is not None else None)
        finally:
            watchdog.cancel()
            if killed.is_set():
                self._connection = None  # its session was killed: the next statement opens a new one
                if cursor._result is not None:  # nothing more will come: do not drain a dead session on collection
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
        if self._connection is not None:
            try:
                self._connection.close()
            except Exception:  # noqa: BLE001
                pass
            self._connection = None
        try:
            with self.admin.cursor() as cursor:
                cursor.execute("DROP USER IF EXISTS %s@'localhost'", (self.user,))
                if created:
                    cursor.execute(f"DROP DATABASE IF EXISTS {_quoted(self.database)}")
        finally:
            self.admin.close()

    def __enter__(self) -> TaskDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
