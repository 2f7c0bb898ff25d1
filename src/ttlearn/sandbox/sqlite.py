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

`run_statements` is the writable mode, for tasks that change a table (LifelongAgentBench's `db_bench`): the child
copies the read-only database into its own directory, runs the statements there with an authorizer that also allows
INSERT, UPDATE and DELETE on the database's own tables (nothing else: no CREATE, DROP, ATTACH or PRAGMA), and sends
the changed database back as bytes for the caller to keep; the caller never opens a file the statements wrote.

In both modes the rows are counted as they stream in the child, in rows and in the characters of the answer, and a
result past either cap is refused there; a refusal names its cause (`sandbox.statements.Refusal`).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ttlearn.sandbox._sqlite_child import MAX_OUTPUT_BYTES, execute
from ttlearn.sandbox.python import Limits, run_python
from ttlearn.sandbox.statements import Refusal, StatementLimits

__all__ = ["MEMORY_BYTES", "STARTUP_SECONDS", "QueryResult", "execute", "run_query", "run_statements"]

MEMORY_BYTES = 1 << 30
STARTUP_SECONDS = 10.0
"""Wall-clock allowance on top of the statement timeout for starting the interpreter on a loaded machine."""
WRITABLE_DISK_BYTES = 4 * 2**20
"""What a writable child's directory may hold: its copy of the database, grown by the statements ("database or disk
is full" past it)."""


@dataclass(frozen=True)
class QueryResult:
    """What a query returned: its columns and rows (values as JSON gives them: int, float, str, None; a BLOB as
    "x'hex'"), or an error message for the agent."""

    columns: tuple[str, ...] = ()
    rows: tuple[tuple, ...] = ()
    error: str | None = None
    refused: Refusal | None = None
    """Why the sandbox stopped the statement (a right it lacks, its time, its size), rather than SQLite finding it
    wrong; None when it did not."""

    @property
    def ok(self) -> bool:
        return self.error is None


def run_query(db_path: Path, sql: str, timeout_ms: int) -> QueryResult:
    """Run `sql` read-only on `db_path` in a sandboxed child; every failure comes back as `QueryResult.error`."""
    request = {"db": "database.sqlite", "sql": sql, "timeout_ms": timeout_ms}
    return _result(_run_child(db_path, request, timeout_ms, disk_bytes=2**20))


def run_statements(db_path: Path, statements: list[str], limits: StatementLimits) -> tuple[QueryResult, bytes | None]:
    """Run `statements` in order, each committed, up to the first error, on a copy of `db_path` in a sandboxed child
    (writable mode, see the module docstring); the last outcome, and the database's new bytes when a row changed
    (None: unchanged). `limits.timeout_ms` bounds all of them together."""
    request = {"db": "database.sqlite", "statements": statements, "timeout_ms": limits.timeout_ms,
               "max_rows": limits.max_rows, "max_bytes": limits.max_bytes}  # fmt: skip
    reply = _run_child(db_path, request, limits.timeout_ms, disk_bytes=WRITABLE_DISK_BYTES)
    changed = None
    if isinstance(reply, dict) and "database" in reply:
        try:
            changed = base64.b64decode(reply.pop("database"), validate=True)
        except (binascii.Error, TypeError):
            unreadable = "the statements' process sent back an unreadable database"
            return QueryResult(error=unreadable, refused=Refusal.CRASH), None
    return _result(reply), changed


def _run_child(db_path: Path, request: dict, timeout_ms: int, disk_bytes: int) -> dict | QueryResult:
    """The child's JSON reply, or the `QueryResult` that says how it failed to give one."""
    limits = Limits(
        wall_s=timeout_ms / 1000 + STARTUP_SECONDS,
        cpu_s=timeout_ms // 1000 + 2,
        memory_bytes=MEMORY_BYTES,
        file_bytes=0 if disk_bytes <= 2**20 else disk_bytes,
        output_bytes=MAX_OUTPUT_BYTES + 2**10,
        disk_bytes=disk_bytes,
    )
    done = run_python(_child_program(), limits, json.dumps(request).encode(), {"database.sqlite": str(db_path)})
    if done.status == "timeout":
        return QueryResult(error=f"timed out after {timeout_ms} ms", refused=Refusal.TIME)
    if done.status == "killed":
        signal = -(done.returncode or 0)
        killed = f"the query was killed by signal {signal}: it used too much CPU time"
        return QueryResult(error=killed, refused=Refusal.TIME)
    try:
        reply = json.loads(done.output)
    except ValueError:
        last = done.output.strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return QueryResult(error=f"the query crashed its process: {last[0][:300]}", refused=Refusal.CRASH)
    if not isinstance(reply, dict):
        return QueryResult(error="the query's process sent back no reply", refused=Refusal.CRASH)
    return reply


def _result(reply: dict | QueryResult) -> QueryResult:
    if isinstance(reply, QueryResult):
        return reply
    if "error" in reply:
        return QueryResult(error=reply["error"], refused=Refusal.__members__.get(str(reply.get("refused"))))
    return QueryResult(tuple(reply["columns"]), tuple(tuple(row) for row in reply["rows"]))


@cache
def _child_program() -> str:
    return Path(__file__).with_name("_sqlite_child.py").read_text(encoding="utf-8")
