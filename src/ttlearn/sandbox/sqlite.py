"""Run one model-written SQL query against a SQLite file in a locked-down child process.

The query is hostile input. The child (`_sqlite_child.py`) runs in the sandbox of `ttlearn.sandbox.python`: the same
runner as model-written Python, with the same guarantees (a fresh uid, an empty environment, no network, no view of
other processes, Landlock, seccomp, resource limits). It sees the database as a read-only file in its directory (it
must be readable by all: `chmod o+r`); it opens it with a read-only URI and `PRAGMA query_only`, bounds what one call
may build (`SQLITE_LIMIT_LENGTH` and a hard heap limit: `length(randomblob(1e9))` fails at once), installs an
authorizer that allows reading and calling functions and nothing else (no writes, ATTACH, PRAGMA, VACUUM INTO or
transactions; functions no query needs, such as the two-argument `fts3_tokenizer`, are refused by name) and interrupts
the statement at a deadline through the progress handler. Every way it can end becomes a `QueryResult` saying what
happened; nothing the query does raises in the caller.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ttlearn.sandbox._sqlite_child import MAX_OUTPUT_BYTES, execute
from ttlearn.sandbox.python import Limits, run_python

__all__ = ["MEMORY_BYTES", "STARTUP_SECONDS", "QueryResult", "execute", "run_query"]

MEMORY_BYTES = 1 << 30
STARTUP_SECONDS = 10.0
"""Wall-clock allowance on top of the statement timeout for starting the interpreter on a loaded machine."""


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
    """Run `sql` read-only on `db_path` in a sandboxed child; every failure comes back as `QueryResult.error`."""
    limits = Limits(
        wall_s=timeout_ms / 1000 + STARTUP_SECONDS,
        cpu_s=timeout_ms // 1000 + 2,
        memory_bytes=MEMORY_BYTES,
        file_bytes=0,
        output_bytes=MAX_OUTPUT_BYTES + 2**10,
        disk_bytes=2**20,
    )
    request = json.dumps({"db": "database.sqlite", "sql": sql, "timeout_ms": timeout_ms})
    done = run_python(_child_program(), limits, request.encode(), {"database.sqlite": str(db_path)})
    if done.status == "timeout":
        return QueryResult(error=f"timed out after {timeout_ms} ms")
    if done.status == "killed":
        return QueryResult(error=f"the query was killed by signal {-(done.returncode or 0)}: it used too much CPU time")
    try:
        reply = json.loads(done.output)
    except ValueError:
        last = done.output.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return QueryResult(error=f"the query crashed its process: {last[0][:300]}")
    if "error" in reply:
        return QueryResult(error=reply["error"])
    return QueryResult(tuple(reply["columns"]), tuple(tuple(row) for row in reply["rows"]))


@cache
def _child_program() -> str:
    return Path(__file__).with_name("_sqlite_child.py").read_text(encoding="utf-8")
