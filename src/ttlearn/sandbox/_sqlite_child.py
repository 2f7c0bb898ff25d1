"""The child of `ttlearn.sandbox.sqlite`: run one query read-only (or, in writable mode, a task's statements on a
copy of its database) and print the reply as JSON.

Standard library only: the sandbox runs this file as its program under a bare interpreter. `execute` is also imported
by the parent (gold answers are trusted and run in-process).
"""

from __future__ import annotations

import base64
import json
import shutil
import signal
import sqlite3
import sys
import time
from urllib.parse import quote

MAX_ROWS = 10_000
"""Rows fetched for comparison; a query returning more is reported as too large (no gold answer comes near it)."""
MAX_OUTPUT_BYTES = 8_000_000
"""The child's reply is refused past this size, so a query building huge strings cannot flood the parent; a read-only
query's answer is cut at this many characters as its rows stream in."""
MAX_VALUE_BYTES = 1_000_000
"""The longest string or blob one expression may build (SQLITE_LIMIT_LENGTH; SQLite's own default is 10^9)."""
HEAP_BYTES = 256 * 2**20
"""SQLite's hard heap limit: past it a query fails with "out of memory" instead of growing until it is killed."""
ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
"""The authorizer's whitelist: reading tables and calling functions; everything else is denied."""
REFUSED_FUNCTIONS = frozenset({"fts3_tokenizer", "load_extension", "readfile", "writefile", "edit"})
"""Functions no read-only question needs and some builds enable (the two-argument `fts3_tokenizer` registers a
tokenizer from a raw pointer): the authorizer denies them by name."""
WRITE_ACTIONS = frozenset({sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE})
"""What writable mode adds: changing the rows of the database's own tables (never SQLite's `sqlite_*` tables)."""
READ_ONLY_HINT = "only read-only queries run here (one SELECT or WITH statement)"
WRITABLE_HINT = "only SELECT, INSERT, UPDATE and DELETE on this task's table run here"
WORK_COPY = "work.sqlite"
RIGHT, TIME, ROWS, SIZE = "RIGHT", "TIME", "ROWS", "SIZE"
"""Why the sandbox stopped a statement, as the reply's "refused" names it (`sandbox.statements.Refusal`'s names)."""


def _json_value(value: object) -> object:
    return f"x'{value.hex()}'" if isinstance(value, bytes) else value


def _connect(db: str, timeout_ms: int, writable: bool) -> tuple[sqlite3.Connection, list[str], float]:
    """A connection bounded in time, in the length of any one value and in SQLite's heap, behind an authorizer that
    allows reading and calling functions (and, `writable`, changing rows of the database's own tables); the refusals
    it made land in the list; the deadline is the third value."""
    mode = "rw" if writable else "ro"
    connection = sqlite3.connect(f"file:{quote(db)}?mode={mode}", uri=True, isolation_level=None)
    if not writable:
        connection.execute("PRAGMA query_only = ON")
    connection.execute("PRAGMA temp_store = MEMORY")
    connection.execute(f"PRAGMA hard_heap_limit = {HEAP_BYTES}")
    connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    refused: list[str] = []
    hint = WRITABLE_HINT if writable else READ_ONLY_HINT

    def authorize(action: int, table: object, name: object, *__: object) -> int:
        if action == sqlite3.SQLITE_FUNCTION and str(name).lower() in REFUSED_FUNCTIONS:
            refused.append(f"refused: the function {name}() is not available here")
        elif action in ALLOWED_ACTIONS:
            return sqlite3.SQLITE_OK
        elif writable and action in WRITE_ACTIONS and not str(table).lower().startswith("sqlite_"):
            return sqlite3.SQLITE_OK
        else:
            refused.append(f"refused: {hint}")
        return sqlite3.SQLITE_DENY

    connection.set_authorizer(authorize)
    deadline = time.monotonic() + timeout_ms / 1000
    connection.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
    return connection, refused, deadline


def _run(
    connection: sqlite3.Connection,
    refused: list[str],
    deadline: float,
    sql: str,
    timeout_ms: int,
    max_rows: int,
    max_bytes: int,
    writable: bool,
) -> dict:
    """One statement: `{"columns", "rows"}` (both empty for a statement that returns no rows, in writable mode) or
    `{"error"}`, with "refused" naming why when the sandbox stopped it rather than SQLite finding it wrong. Rows are
    fetched one at a time and counted in rows and in the characters of the answer as the client writes it, so a
    result past either cap stops there instead of being held whole."""
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as exc:
        return {"error": f"the query is not valid UTF-8 text: {exc.reason} at character {exc.start}"}
    try:
        cursor = connection.execute(sql)
        if cursor.description is None:
            if writable:
                return {"columns": [], "rows": []}
            return {"error": f"the statement returned no rows: {READ_ONLY_HINT}", "refused": RIGHT}
        rows, chars = [], 0
        for row in cursor:
            values = [_json_value(value) for value in row]
            chars += len(repr(tuple(values))) + 2
            if len(rows) == max_rows:
                return {"error": f"the query returned more than {max_rows:,} rows", "refused": ROWS}
            if chars > max_bytes:
                return {"error": f"the result is longer than {max_bytes:,} characters", "refused": SIZE}
            rows.append(values)
    except (sqlite3.Error, sqlite3.Warning) as exc:  # Warning: "You can only execute one statement at a time."
        if refused:
            return {"error": refused[0], "refused": RIGHT}
        if time.monotonic() > deadline:
            return {"error": f"timed out after {timeout_ms} ms", "refused": TIME}
        if isinstance(exc, sqlite3.DataError) or "too big" in str(exc) or "out of memory" in str(exc):
            return {"error": f"{type(exc).__name__}: {exc}", "refused": SIZE}
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"columns": [column[0] for column in cursor.description], "rows": rows}


def execute(db: str, sql: str, timeout_ms: int) -> dict:
    """`{"columns", "rows"}` or `{"error"}`: `sql` on the database file `db`, read-only, bounded in time, in the
    length of any one value and in SQLite's heap."""
    connection, refused, deadline = _connect(db, timeout_ms, writable=False)
    return _run(connection, refused, deadline, sql, timeout_ms, MAX_ROWS, MAX_OUTPUT_BYTES, writable=False)


def execute_writable(db: str, statements: list[str], timeout_ms: int, max_rows: int, max_bytes: int) -> dict:
    """Writable mode: `statements` in order on a copy of `db` in this directory (the original is a read-only file),
    each committed, up to the first error, as a MySQL client runs a reply's SQL; the last outcome, and the changed
    database's bytes (base64) under "database" when a statement changed a row."""
    shutil.copyfile(db, WORK_COPY)
    connection, refused, deadline = _connect(WORK_COPY, timeout_ms, writable=True)
    reply: dict = {"columns": [], "rows": []}
    for statement in statements:
        reply = _run(connection, refused, deadline, statement, timeout_ms, max_rows, max_bytes, writable=True)
        if "error" in reply:
            break
    changed = connection.total_changes > 0
    connection.close()
    if changed:
        with open(WORK_COPY, "rb") as copy:
            reply["database"] = base64.b64encode(copy.read()).decode("ascii")
    return reply


def main() -> None:
    """Request on stdin: the database file's name, the query (or, writable, the statements and the caps on rows and
    characters), the timeout."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the (zero) file-size limit fails instead of killing
    request = json.load(sys.stdin)
    if "statements" in request:
        done = execute_writable(
            request["db"], request["statements"], request["timeout_ms"], request["max_rows"], request["max_bytes"]
        )
    else:
        done = execute(request["db"], request["sql"], request["timeout_ms"])
    reply = json.dumps(done)
    if len(reply) > MAX_OUTPUT_BYTES:
        reply = json.dumps({"error": f"the result is larger than {MAX_OUTPUT_BYTES:,} bytes", "refused": SIZE})
    sys.stdout.write(reply)


if __name__ == "__main__":
    main()
