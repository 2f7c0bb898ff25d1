"""The child of `ttlearn.sandbox.sqlite`: run one query read-only and print the reply as JSON.

Standard library only: the sandbox runs this file as its program under a bare interpreter. `execute` is also imported
by the parent (gold answers are trusted and run in-process).
"""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
import time
from urllib.parse import quote

MAX_ROWS = 10_000
"""Rows fetched for comparison; a query returning more is reported as too large (no gold answer comes near it)."""
MAX_OUTPUT_BYTES = 8_000_000
"""The child's reply is refused past this size, so a query building huge strings cannot flood the parent."""
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
READ_ONLY_HINT = "only read-only queries run here (one SELECT or WITH statement)"


def _json_value(value: object) -> object:
    return f"x'{value.hex()}'" if isinstance(value, bytes) else value


def execute(db: str, sql: str, timeout_ms: int) -> dict:
    """`{"columns", "rows"}` or `{"error"}`: `sql` on the database file `db`, read-only, bounded in time, in the
    length of any one value and in SQLite's heap."""
    connection = sqlite3.connect(f"file:{quote(db)}?mode=ro", uri=True, isolation_level=None)
    connection.execute("PRAGMA query_only = ON")
    connection.execute("PRAGMA temp_store = MEMORY")
    connection.execute(f"PRAGMA hard_heap_limit = {HEAP_BYTES}")
    connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    refused: list[str] = []

    def authorize(action: int, _: object, name: object, *__: object) -> int:
        if action == sqlite3.SQLITE_FUNCTION and str(name).lower() in REFUSED_FUNCTIONS:
            refused.append(f"refused: the function {name}() is not available here")
        elif action in ALLOWED_ACTIONS:
            return sqlite3.SQLITE_OK
        else:
            refused.append(f"refused: {READ_ONLY_HINT}")
        return sqlite3.SQLITE_DENY

    connection.set_authorizer(authorize)
    deadline = time.monotonic() + timeout_ms / 1000
    connection.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as exc:
        return {"error": f"the query is not valid UTF-8 text: {exc.reason} at character {exc.start}"}
    try:
        cursor = connection.execute(sql)
        if cursor.description is None:
            return {"error": f"the statement returned no rows: {READ_ONLY_HINT}"}
        rows = cursor.fetchmany(MAX_ROWS + 1)
    except (sqlite3.Error, sqlite3.Warning) as exc:  # Warning: "You can only execute one statement at a time."
        if refused:
            return {"error": refused[0]}
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
    """Request on stdin: the database file's name, the query, the timeout."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the (zero) file-size limit fails instead of killing
    request = json.load(sys.stdin)
    reply = json.dumps(execute(request["db"], request["sql"], request["timeout_ms"]))
    if len(reply) > MAX_OUTPUT_BYTES:
        reply = json.dumps({"error": f"the result is larger than {MAX_OUTPUT_BYTES:,} bytes"})
    sys.stdout.write(reply)


if __name__ == "__main__":
    main()
