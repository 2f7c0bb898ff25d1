"""Run one model-written SQL query against a SQLite file in a locked-down child process.

The query is hostile input. The child (this file run as a script with `python -I -S`, standard library only) opens
the database with a read-only URI and `PRAGMA query_only`, installs an authorizer that allows reading and nothing
else (no writes, ATTACH, PRAGMA, VACUUM INTO or transactions), interrupts the statement at a deadline through the
progress handler, and runs under resource limits: address space, CPU seconds, and a zero file-size limit so no file
can grow. It starts in an empty temporary directory. The parent kills it if it outlives its wall-clock budget and
turns every way it can end into a `QueryResult`; nothing the query does raises in the caller.
"""

from __future__ import annotations

import json
import resource
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

MAX_ROWS = 10_000
"""Rows fetched for comparison; a query returning more is reported as too large (no gold answer comes near it)."""
MAX_OUTPUT_BYTES = 8_000_000
"""The child's reply is refused past this size, so a query building huge strings cannot flood the parent."""
MEMORY_BYTES = 1 << 30
STARTUP_SECONDS = 10.0
"""Wall-clock allowance on top of the statement timeout for starting the interpreter on a loaded machine."""

ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
"""The authorizer's whitelist: reading tables and calling functions; everything else is denied."""
READ_ONLY_HINT = "only read-only queries run here (one SELECT or WITH statement)"


@dataclass(frozen=True)
class QueryResult:
    """What a query returned: its columns and rows (values as JSON gives them: int, float, str, None; a BLOB as
    "x'hex'"), or an error message for the agent."""

    columns: tuple[str, ...] = ()
    rows: tuple[tuple, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def run_query(db_path: Path, sql: str, timeout_ms: int) -> QueryResult:
    """Run `sql` read-only on `db_path` in a child process; every failure comes back as `QueryResult.error`."""
    request = json.dumps({"db": str(db_path), "sql": sql, "timeout_ms": timeout_ms})
    with tempfile.TemporaryDirectory(prefix="ttlearn-sql-") as workdir:
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-S", __file__],
                input=request,
                capture_output=True,
                text=True,
                cwd=workdir,
                timeout=timeout_ms / 1000 + STARTUP_SECONDS,
            )
        except subprocess.TimeoutExpired:
            return QueryResult(error=f"timed out after {timeout_ms} ms")
    if done.returncode != 0:
        return QueryResult(error="the query was stopped: it used too much time or memory")
    reply = json.loads(done.stdout)
    if "error" in reply:
        return QueryResult(error=reply["error"])
    return QueryResult(tuple(reply["columns"]), tuple(tuple(row) for row in reply["rows"]))


# ---- the child ---------------------------------------------------------------------------------------------------


def _limit_resources(timeout_ms: int) -> None:
    cpu_seconds = timeout_ms // 1000 + 2
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG instead of killing


def _json_value(value: object) -> object:
    return f"x'{value.hex()}'" if isinstance(value, bytes) else value


def execute(db: str, sql: str, timeout_ms: int) -> dict:
    """The child's work: `{"columns", "rows"}` or `{"error"}`. Exposed for the parent's tests of the lock-down."""
    connection = sqlite3.connect(f"file:{quote(db)}?mode=ro", uri=True, isolation_level=None)
    connection.execute("PRAGMA query_only = ON")
    connection.execute("PRAGMA temp_store = MEMORY")
    refused: list[int] = []

    def authorize(action: int, *_: object) -> int:
        if action in ALLOWED_ACTIONS:
            return sqlite3.SQLITE_OK
        refused.append(action)
        return sqlite3.SQLITE_DENY

    connection.set_authorizer(authorize)
    deadline = time.monotonic() + timeout_ms / 1000
    connection.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
    try:
        cursor = connection.execute(sql)
        if cursor.description is None:
            return {"error": f"the statement returned no rows: {READ_ONLY_HINT}"}
        rows = cursor.fetchmany(MAX_ROWS + 1)
    except (sqlite3.Error, sqlite3.Warning) as exc:  # Warning: "You can only execute one statement at a time."
        if refused:
            return {"error": f"refused: {READ_ONLY_HINT}"}
        if time.monotonic() > deadline:
            return {"error": f"timed out after {timeout_ms} ms"}
        return {"error": f"{type(exc).__name__}: {exc}"}
    if len(rows) > MAX_ROWS:
        return {"error": f"the query returned more than {MAX_ROWS:,} rows"}
    return {
        "columns": [column[0] for column in cursor.description],
        "rows": [[_json_value(value) for value in row] for row in rows],
    }


def main() -> None:
    request = json.load(sys.stdin)
    _limit_resources(request["timeout_ms"])
    reply = json.dumps(execute(request["db"], request["sql"], request["timeout_ms"]))
    if len(reply) > MAX_OUTPUT_BYTES:
        reply = json.dumps({"error": f"the result is larger than {MAX_OUTPUT_BYTES:,} bytes"})
    sys.stdout.write(reply)


if __name__ == "__main__":
    main()
