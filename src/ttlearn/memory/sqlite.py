"""The SQLite dialect of the memory store: the file's schema and its version, and the transactions that let several
processes read and write one file.

Layout (schema version 3):
- `namespaces`: name, the embedder that wrote its vectors (name + dim), a `generation` bumped by `reembed`, its
  forgetting policy (`ttl_s`, `capacity`: `memory.forgetting`) and `item_count`, kept by every write that adds or
  removes items, so a capacity is checked without counting them.
- `intents`: intent keys, the text and its unit-norm float32 embedding; items whose intent is ≥ 0.90 similar join one.
- `items`: experience text, q_value, visits, last_reward, provenance (run id, the run's unit — task or game —,
  `episode`: the attempt, the service key and proxy exchange that wrote it, created time) and `touched`: when it was
  written or its Q last updated, the age forgetting measures.
- `retrievals`: every retrieval with its candidates (similarity, Q, score), the chosen ids, run, unit and attempt.
- `intent_rewrites`: per namespace, how often an intent row was updated or deleted (by trigger, in the writer's own
  transaction), so a saved vector index knows when rows it holds changed (`memory.index_cache`).

Concurrency: WAL journal, a busy timeout, and every write is one short `BEGIN IMMEDIATE` transaction retried on
SQLITE_BUSY, so several processes can read and write one file; a killed writer leaves either its whole transaction
or nothing. `PRAGMA data_version` tells a reader that another connection committed.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

from ttlearn.memory.vector_index import VectorIndex
from ttlearn.untrusted import UntrustedFileError, open_regular

T = TypeVar("T")

SCHEMA_VERSION = 3
"""2 added `unit` (the run's task or game, 1-based) beside `episode` (the attempt) to items and retrievals; 3 added
the items' `key_id`, `exchange` and `touched` and the namespaces' `ttl_s`, `capacity` and `item_count`. A writable
open migrates an older file (`_MIGRATIONS`); a read-only one reads it as it is (`_ADDED`: what stands in for the
missing columns)."""
_MIGRATIONS = {
    2: ("ALTER TABLE items ADD COLUMN unit INTEGER", "ALTER TABLE retrievals ADD COLUMN unit INTEGER"),
    3: (
        "ALTER TABLE items ADD COLUMN key_id TEXT",
        "ALTER TABLE items ADD COLUMN exchange TEXT",
        "ALTER TABLE items ADD COLUMN touched REAL",
        "UPDATE items SET touched = created",
        "ALTER TABLE namespaces ADD COLUMN ttl_s REAL",
        "ALTER TABLE namespaces ADD COLUMN capacity INTEGER",
        "ALTER TABLE namespaces ADD COLUMN item_count INTEGER NOT NULL DEFAULT 0",
        "UPDATE namespaces SET item_count = (SELECT COUNT(*) FROM items WHERE namespace_id = namespaces.id)",
    ),
}
"""The statements that take a file from the version before each key to that version."""
_ADDED = {2: {"unit": "NULL"}, 3: {"key_id": "NULL", "exchange": "NULL", "touched": "created"}}
"""SQL that stands in, in a file read as it is, for the columns each version added."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS namespaces (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    embedder TEXT NOT NULL,
    dim INTEGER NOT NULL CHECK (dim > 0),
    generation INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    ttl_s REAL,
    capacity INTEGER,
    item_count INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS intents (
    id INTEGER PRIMARY KEY,
    namespace_id INTEGER NOT NULL REFERENCES namespaces(id) ON DELETE CASCADE,
    text TEXT NOT NULL,
    embedding BLOB NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS intents_by_namespace ON intents(namespace_id, id);
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY,
    namespace_id INTEGER NOT NULL REFERENCES namespaces(id) ON DELETE CASCADE,
    intent_id INTEGER NOT NULL REFERENCES intents(id) ON DELETE CASCADE,
    experience TEXT NOT NULL,
    q_value REAL NOT NULL,
    visits INTEGER NOT NULL DEFAULT 0,
    last_reward REAL,
    run_id TEXT,
    episode INTEGER,
    created REAL NOT NULL,
    unit INTEGER,
    key_id TEXT,
    exchange TEXT,
    touched REAL
);
CREATE INDEX IF NOT EXISTS items_by_intent ON items(intent_id);
CREATE INDEX IF NOT EXISTS items_by_namespace ON items(namespace_id, id);
CREATE TABLE IF NOT EXISTS retrievals (
    id INTEGER PRIMARY KEY,
    namespace_id INTEGER NOT NULL REFERENCES namespaces(id) ON DELETE CASCADE,
    run_id TEXT,
    episode INTEGER,
    query TEXT NOT NULL,
    candidates TEXT NOT NULL,
    chosen TEXT NOT NULL,
    explored INTEGER NOT NULL,
    created REAL NOT NULL,
    unit INTEGER
);
CREATE INDEX IF NOT EXISTS retrievals_by_episode ON retrievals(namespace_id, run_id, episode);
"""
_REWRITE_COUNTERS = (
    "CREATE TABLE IF NOT EXISTS intent_rewrites (namespace_id INTEGER PRIMARY KEY, count INTEGER NOT NULL)",
    """CREATE TRIGGER IF NOT EXISTS intent_rewritten AFTER UPDATE OF id, namespace_id, embedding ON intents BEGIN
        INSERT INTO intent_rewrites VALUES (OLD.namespace_id, 1) ON CONFLICT DO UPDATE SET count = count + 1;
        INSERT INTO intent_rewrites VALUES (NEW.namespace_id, 1) ON CONFLICT DO UPDATE SET count = count + 1;
    END""",
    """CREATE TRIGGER IF NOT EXISTS intent_deleted AFTER DELETE ON intents BEGIN
        INSERT INTO intent_rewrites VALUES (OLD.namespace_id, 1) ON CONFLICT DO UPDATE SET count = count + 1;
    END""",
)

UNTRUSTED_READ_S = 20.0
"""The longest a read-only command reads a store it was handed: a crafted file's views can recurse forever."""


def _open_untrusted(path: Path, timeout_s: float) -> tuple[sqlite3.Connection, Path | None]:
    """A read-only connection to a store named by a run directory (`memory inspect`, `explain`), and the private
    folder it reads from, if any. A regular file, opened so that nothing is written anywhere — not the store, not a
    journal-mode switch, not a -wal or -shm beside it (a read-only connection to a WAL store creates both): as an
    immutable file (`mode=ro&immutable=1`), or, when its -wal holds commits not yet in the file, from a private copy
    of the two. `query_only`, functions in its schema not trusted, every statement aborted after UNTRUSTED_READ_S."""
    if path.is_symlink() or not path.is_file():
        raise UntrustedFileError(f"{path} is not a regular file (a link, FIFO or device); refused")
    wal = Path(f"{path}-wal")
    private = None
    try:
        if wal.is_symlink() or wal.exists() and wal.stat().st_size > 0:
            private = Path(tempfile.mkdtemp(prefix="ttlearn-store-"))
            for source, copy in ((path, private / "store.sqlite"), (wal, private / "store.sqlite-wal")):
                with open_regular(source) as fh, open(copy, "wb") as out:
                    shutil.copyfileobj(fh, out)
            uri = f"{(private / 'store.sqlite').as_uri()}?mode=rw"  # its WAL is read through a -shm of its own
        else:
            uri = f"{path.resolve().as_uri()}?mode=ro&immutable=1"
        conn = sqlite3.connect(uri, uri=True, timeout=timeout_s, isolation_level=None, check_same_thread=False)
    except BaseException:
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
        raise
    conn.execute("PRAGMA query_only = ON")
    conn.execute("PRAGMA trusted_schema = OFF")
    deadline = time.monotonic() + UNTRUSTED_READ_S
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    return conn, private


class SqliteDialect:
    """One SQLite store file (`memory.dialect.Dialect`): created and migrated when opened for writing, read as it is
    (any version this code knows) when `read_only`."""

    row_lock = ""
    """None: the write transaction already holds the file's one write lock."""

    def __init__(self, path: str | Path, *, timeout_s: float, read_only: bool) -> None:
        self.location = str(path)
        self.timeout_s = timeout_s
        self._private: Path | None = None
        self._missing: dict[str, str] = {}
        if read_only:
            self.conn, self._private = _open_untrusted(Path(path), timeout_s)
            self._check_version(self.conn)
            return
        Path(self.location).parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(self.location, timeout=timeout_s, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA foreign_keys = ON")
        self._retry(lambda: self.conn.execute("PRAGMA journal_mode = WAL"))
        self.conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable across process crashes
        self.write(self._create_schema)

    def _retry(self, action: Callable[[], T]) -> T:
        """Run `action`, retrying with jittered backoff while SQLite says the database is busy or locked."""
        deadline = time.monotonic() + self.timeout_s
        delay = 0.001
        while True:
            try:
                return action()
            except sqlite3.OperationalError as exc:
                busy = "locked" in str(exc) or "busy" in str(exc)
                if not busy or time.monotonic() > deadline:
                    raise
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.05)

    def write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run `body` inside one BEGIN IMMEDIATE transaction (retried while busy); commit, or roll back and raise."""

        def attempt() -> T:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                result = body(self.conn)
                self.conn.execute("COMMIT")
                return result
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise

        return self._retry(attempt)

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        for statement in _SCHEMA.split(";"):  # not executescript: it would commit our transaction
            if statement.strip():
                conn.execute(statement)
        for statement in _REWRITE_COUNTERS:
            conn.execute(statement)
        if conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() is None:
            conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        version = self._check_version(conn)
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[step]:
                conn.execute(statement)
        conn.execute("CREATE INDEX IF NOT EXISTS items_by_touched ON items(namespace_id, touched)")
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        self._missing = {}

    def _check_version(self, conn: sqlite3.Connection) -> int:
        """The file's schema version, 1 to SCHEMA_VERSION (else a ValueError); remembers the columns it lacks."""
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"{self.location} is not a ttlearn memory store ({exc})") from None
        known = [str(v) for v in range(1, SCHEMA_VERSION + 1)]
        if row is None or str(row[0]) not in known:
            found = "no memory-store schema version" if row is None else f"memory-store schema version {row[0]}"
            raise ValueError(f"{self.location} has {found}; this ttlearn reads versions 1 to {SCHEMA_VERSION}")
        version = int(row[0])
        self._missing = {name: sql for v, added in _ADDED.items() if v > version for name, sql in added.items()}
        return version

    def column(self, name: str) -> str:
        table, dot, bare = name.rpartition(".")
        if bare not in self._missing:
            return name
        stand_in = self._missing[bare]
        return f"{table}.{stand_in}" if dot and stand_in != "NULL" else stand_in

    def lock_intents(self, conn: sqlite3.Connection, ns_id: int) -> None:
        """Nothing to take: BEGIN IMMEDIATE already holds the file's one write lock."""

    def ids_kept(self, conn: sqlite3.Connection, table: str) -> None:
        """Nothing to move: SQLite's next id follows the largest anyway."""

    def json_bytes(self, column: str) -> str:
        """NULL for NULL, as `snapshot.json_text_bytes` counts None as nothing (json_quote would say `null`)."""
        return f"(length(CAST(json_quote({column}) AS BLOB)) - 2 + 0 * length({column}))"

    def data_version(self) -> int:
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def index_path(self, ns_id: int) -> Path:
        """Where namespace `ns_id`'s vector index is saved: beside the file, `<store>.index/namespace-<id>.npz`."""
        return Path(f"{self.location}.index") / f"namespace-{ns_id}.npz"

    def read_index(self, ns_id: int, generation: int, rewrites: int) -> BinaryIO | None:
        """The saved file (the counters are checked inside it, with the rows)."""
        try:
            return open(self.index_path(ns_id), "rb")
        except FileNotFoundError:
            return None

    def save_index(self, ns_id: int, index: VectorIndex) -> None:
        """Written to a temporary file and renamed, so a reader sees a whole file or the previous one."""
        try:
            index.save(self.index_path(ns_id))
        except OSError as exc:  # the next open rebuilds
            warnings.warn(f"could not save the vector index beside {self.location} ({exc})", stacklevel=4)

    def integrity_check(self) -> str:
        return str(self.conn.execute("PRAGMA integrity_check").fetchone()[0])

    def close(self) -> None:
        self.conn.close()
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)
