"""A durable episodic memory store: one SQLite file shared by processes, plus an in-memory vector index per namespace.

Layout (schema version 1):
- `namespaces`: name, the embedder that wrote its vectors (name + dim) and a `generation` bumped by `reembed`.
- `intents`: intent keys, the text and its unit-norm float32 embedding; items whose intent is ≥ 0.90 similar join one.
- `items`: experience text, q_value, visits, last_reward and provenance (run id, the run's unit — task or game —,
  `episode`: the attempt, created time).
- `retrievals`: every retrieval with its candidates (similarity, Q, score), the chosen ids, run, unit and attempt.

Concurrency: WAL journal, a busy timeout, and every write is one short `BEGIN IMMEDIATE` transaction retried on
SQLITE_BUSY, so several processes can read and write one file; a killed writer leaves either its whole transaction
or nothing. Embeddings are computed before the write lock is taken.

The vector index lives in each process's memory. It catches up with other processes' writes when `PRAGMA
data_version` says another connection committed: intents are appended (new ids are larger than every existing one),
and anything else (`reembed` bumps the namespace's generation; any UPDATE or DELETE of an intent row bumps its
namespace's count in `intent_rewrites`, by trigger, in the writer's own transaction) forces a full rebuild.
Brute-force numpy dot products below `ann_threshold` intents; above it a usearch HNSW graph (built single-threaded, so
it is deterministic), whose hits are re-scored exactly.

HNSW indexes are also saved beside the file (`<store>.index/namespace-<id>.npz`, written to a temporary file and
renamed, so a reader sees a whole file or the previous one) after a build and every 10 % growth, and on `close()`.
Opening loads the saved index only if it still describes a prefix of the namespace's intents: same generation and
rewrite count, as many rows up to its last id as it holds, and that last row's embedding unchanged; rows added since
(say, by a process killed before it saved) are then appended as usual, so a stale file is never served.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import random
import sqlite3
import time
import warnings
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ttlearn.memory.embed import Embedder
from ttlearn.memory.vector_index import VectorIndex
from ttlearn.untrusted import UntrustedFileError, loads

SCHEMA_VERSION = 2
"""2 added `unit` (the run's task or game, 1-based) beside `episode` (the attempt) to items and retrievals: a
writable open migrates a version-1 file; a read-only one reads it as it is, with no units."""
DEFAULT_JOIN_THRESHOLD = 0.90
DEFAULT_ANN_THRESHOLD = 20_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS namespaces (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    embedder TEXT NOT NULL,
    dim INTEGER NOT NULL CHECK (dim > 0),
    generation INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL
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
    unit INTEGER
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
_REWRITE_COUNTERS = (  # how a saved vector index knows that rows it holds changed (see the module docstring)
    "CREATE TABLE IF NOT EXISTS intent_rewrites (namespace_id INTEGER PRIMARY KEY, count INTEGER NOT NULL)",
    """CREATE TRIGGER IF NOT EXISTS intent_rewritten AFTER UPDATE OF id, namespace_id, embedding ON intents BEGIN
        INSERT INTO intent_rewrites VALUES (OLD.namespace_id, 1) ON CONFLICT DO UPDATE SET count = count + 1;
        INSERT INTO intent_rewrites VALUES (NEW.namespace_id, 1) ON CONFLICT DO UPDATE SET count = count + 1;
    END""",
    """CREATE TRIGGER IF NOT EXISTS intent_deleted AFTER DELETE ON intents BEGIN
        INSERT INTO intent_rewrites VALUES (OLD.namespace_id, 1) ON CONFLICT DO UPDATE SET count = count + 1;
    END""",
)


class EmbedderMismatchError(ValueError):
    """A namespace was opened with an embedder other than the one that wrote its vectors."""


@dataclass(frozen=True)
class NewItem:
    """An item to write; `vector` is the intent's embedding when the caller already has it."""

    intent: str
    experience: str
    q_value: float
    run_id: str | None = None
    episode: int | None = None
    """Provenance: the attempt (`Episode.index`) that wrote it, and below the run's unit (task or game, 1-based) it
    belongs to; None where the caller did not say (episodes played before units were recorded)."""
    vector: np.ndarray | None = None
    unit: int | None = None


@dataclass(frozen=True)
class AffineUpdate:
    """Q ← keep·Q + add: a Q update a database can apply in one UPDATE statement (SQL has no Python callables),
    computed in the same IEEE order in numpy and in SQL, so both give the same bits."""

    keep: float
    add: float

    def __call__(self, q: np.ndarray) -> np.ndarray:
        return self.keep * q + self.add


@dataclass(frozen=True)
class Added:
    item_id: int
    intent_id: int
    joined: bool
    """True when the item joined an existing intent key (similarity ≥ the join threshold)."""


@dataclass(frozen=True)
class Candidate:
    """An item reached through its intent key, with that key's cosine similarity to the query."""

    item_id: int
    intent_id: int
    sim: float
    q_value: float
    visits: int
    experience: str


@dataclass(frozen=True)
class MemoryItem:
    id: int
    intent_id: int
    intent: str
    experience: str
    q_value: float
    visits: int
    last_reward: float | None
    run_id: str | None
    episode: int | None
    created: float
    unit: int | None = None
    """The run's unit (task or game) whose attempt `episode` wrote the item; None in stores written before."""


@dataclass(frozen=True)
class RetrievalRecord:
    id: int
    run_id: str | None
    episode: int | None
    query: str
    candidates: list[dict[str, Any]]
    chosen: list[int]
    explored: bool
    created: float
    unit: int | None = None
    """The run's unit (task or game) whose attempt `episode` retrieved; None in stores written before."""


SNAPSHOT_FORMAT = "ttlearn-memrl-namespace/1"
STORE_EXPORT_FORMAT = "ttlearn-memrl-store/1"
MAX_MAGNITUDE = 1e12
"""The largest |value| of a snapshot's numbers: Q statistics over them cannot overflow (time stamps are ~2e9)."""
_Finite = Annotated[float, Field(allow_inf_nan=False, ge=-MAX_MAGNITUDE, le=MAX_MAGNITUDE)]
MAX_COUNT = 2**53
"""The largest visit count and episode number a store holds: exact in every JSON reader, far below SQLite's 2^63,
so `visits + 1` can never overflow. Counters saturate here and imports refuse more."""
_Count = Annotated[int, Field(ge=-MAX_COUNT, le=MAX_COUNT)]
_SATURATED_VISIT = f"CASE WHEN visits < {MAX_COUNT} THEN visits + 1 ELSE visits END"
"""SQL (SQLite and PostgreSQL alike): one more visit, saturating at MAX_COUNT."""
UNIT_TOLERANCE = 1e-3
"""How far from 1 an imported intent vector's norm may be: retrieval ranks by dot products of unit vectors."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IntentRecord(_Strict):
    id: _Count
    text: str
    embedding: str
    """The unit vector as base64 of little-endian float32 values, so a restore needs no embedder."""
    created: _Finite


class ItemRecord(_Strict):
    id: _Count
    intent_id: _Count
    experience: str
    q_value: _Finite
    visits: int = Field(ge=0, le=MAX_COUNT)
    last_reward: _Finite | None
    run_id: str | None
    episode: _Count | None
    created: _Finite
    unit: _Count | None = None
    """Absent from snapshots written before units were recorded."""


class NamespaceSnapshot(_Strict):
    """A namespace's memories as `export_namespace` writes them and `import_namespace` reads them."""

    format: Literal["ttlearn-memrl-namespace/1"]
    embedder: str
    dim: int = Field(gt=0)
    intents: Annotated[list[IntentRecord], Field(fail_fast=True)]
    items: Annotated[list[ItemRecord], Field(fail_fast=True)]
    """fail_fast: a broken snapshot is refused at its first bad record, not after listing every one."""


ITEM_RECORD_BYTES = 256
"""An exported item's JSON beside its texts: ids, Q, visits, reward, episode, time stamp and the keys."""
INTENT_RECORD_BYTES = 96
"""An exported intent key's JSON beside its text and vector: id, time stamp and the keys."""


_JSON_BYTES = "(length(CAST(json_quote({}) AS BLOB)) - 2)"
"""SQL: the bytes of a text column as a JSON export writes it (escapes counted: a NUL is six bytes there)."""


def json_text_bytes(text: str | None) -> int:
    """The bytes of `text` inside a JSON export (UTF-8, escapes counted), as `_JSON_BYTES` counts them in SQL."""
    return 0 if text is None else len(json.dumps(text, ensure_ascii=False).encode("utf-8")) - 2


def export_size(item_text: int, items: int, intent_text: int, intents: int, dim: int) -> int:
    """About the bytes of a namespace's export: `item_text` bytes of experiences and run ids over `items` items,
    `intent_text` bytes of intent texts over `intents` keys whose vectors have `dim` floats (base64 of float32:
    4·⌈4·dim / 3⌉ characters). Texts count as the export writes them (`json_text_bytes`: escapes included), so a
    text of control characters cannot hold six times its quota."""
    vector = 4 * math.ceil(4 * dim / 3)
    return item_text + items * ITEM_RECORD_BYTES + intent_text + intents * (vector + INTENT_RECORD_BYTES)


UNTRUSTED_READ_S = 20.0
"""The longest a read-only command reads a store it was handed: a crafted file's views can recurse forever."""


def _open_untrusted(path: Path, timeout_s: float) -> sqlite3.Connection:
    """A read-only connection to a store named by a run directory (`memory inspect`, `explain`): a regular file,
    opened with `mode=ro` and `query_only` (nothing written, not even a journal-mode switch), functions in its
    schema not trusted, and every statement aborted after UNTRUSTED_READ_S."""
    if path.is_symlink() or not path.is_file():
        raise UntrustedFileError(f"{path} is not a regular file (a link, FIFO or device); refused")
    conn = sqlite3.connect(
        f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout_s, isolation_level=None, check_same_thread=False
    )
    conn.execute("PRAGMA query_only = ON")
    conn.execute("PRAGMA trusted_schema = OFF")
    deadline = time.monotonic() + UNTRUSTED_READ_S
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
    return conn


class MemoryStore:
    """One SQLite store file; `namespace(name, embedder)` hands out the per-namespace read/write API."""

    row_lock = ""
    """What a SELECT adds to lock the rows it reads until the transaction ends (none: SQLite locks the whole file)."""

    def __init__(
        self,
        path: str | Path,
        *,
        timeout_s: float = 60.0,
        ann_threshold: int = DEFAULT_ANN_THRESHOLD,
        read_only: bool = False,
    ) -> None:
        self.path = str(path)
        self.timeout_s = timeout_s
        self.ann_threshold = ann_threshold
        self._indexes: dict[int, VectorIndex] = {}
        if read_only:
            self._conn = _open_untrusted(Path(path), timeout_s)
            self._check_version(self._conn)
            return
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA foreign_keys = ON")
        self._retry(lambda: self._conn.execute("PRAGMA journal_mode = WAL"))
        self._conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable across process crashes
        self._write(self._create_schema)

    # -- transactions -------------------------------------------------------------------------------------------

    def _retry(self, action: Callable[[], Any]) -> Any:
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

    def _write(self, body: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run `body` inside one BEGIN IMMEDIATE transaction (retried while busy); commit, or roll back and raise."""

        def attempt() -> Any:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                result = body(self._conn)
                self._conn.execute("COMMIT")
                return result
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
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
        if self._check_version(conn) == 1:
            for table in ("items", "retrievals"):
                conn.execute(f"ALTER TABLE {table} ADD COLUMN unit INTEGER")
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
            self._unit = "unit"

    _unit = "unit"
    """SQL for the `unit` column: `NULL` when a version-1 file is read as it is (read-only)."""

    def _check_version(self, conn: sqlite3.Connection) -> int:
        """The file's schema version, 1 or 2 (else a ValueError); remembers whether it has units."""
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise ValueError(f"{self.path} is not a ttlearn memory store ({exc})") from None
        if row is None or str(row[0]) not in ("1", str(SCHEMA_VERSION)):
            found = "no memory-store schema version" if row is None else f"memory-store schema version {row[0]}"
            raise ValueError(f"{self.path} has {found}; this ttlearn reads versions 1 and {SCHEMA_VERSION}")
        version = int(row[0])
        self._unit = "unit" if version == SCHEMA_VERSION else "NULL"
        return version

    def _lock_intents(self, conn: sqlite3.Connection, ns_id: int) -> None:
        """Serialise the writers of a namespace's intent keys for the rest of the transaction: BEGIN IMMEDIATE already
        holds the file's one write lock (a PostgreSQL store takes a lock per namespace here)."""

    def _ids_kept(self, conn: sqlite3.Connection, table: str) -> None:
        """Rows were inserted with explicit ids: SQLite's next id follows the largest anyway (PostgreSQL moves its
        sequence here)."""

    def close(self) -> None:
        """Save every HNSW index that grew since it was last saved, then close the file."""
        for ns_id, index in self._indexes.items():
            if index.uses_ann and len(index) > index.saved_size:
                self._save_index(ns_id, index)
        self._conn.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- namespaces ---------------------------------------------------------------------------------------------

    def namespace(self, name: str, embedder: Embedder) -> Namespace:
        """Open (creating if new) namespace `name`; refuses an embedder other than the one that wrote it."""
        if not name:
            raise ValueError("a memory namespace needs a non-empty name")

        def open_or_create(conn: sqlite3.Connection) -> int:
            row = conn.execute("SELECT id, embedder, dim FROM namespaces WHERE name = ?", (name,)).fetchone()
            if row is None:
                cursor = conn.execute(
                    "INSERT INTO namespaces (name, embedder, dim, created) VALUES (?, ?, ?, ?)",
                    (name, embedder.name, embedder.dim, time.time()),
                )
                return int(cursor.lastrowid)
            ns_id, stored_name, stored_dim = row
            if (stored_name, stored_dim) != (embedder.name, embedder.dim):
                raise EmbedderMismatchError(
                    f"namespace {name!r} in {self.path} was embedded with {stored_name!r} ({stored_dim}-d), not "
                    f"{embedder.name!r} ({embedder.dim}-d); vectors of different embedders are not comparable. "
                    f"Keep {stored_name!r}, or migrate explicitly with "
                    f"MemoryStore({self.path!r}).reembed({name!r}, make_embedder({embedder.name!r})) "
                    f"(CLI: ttlearn memory reembed {self.path} --namespace {name} --embedder {embedder.name})"
                )
            return int(ns_id)

        return Namespace(self, self._write(open_or_create), name, embedder)

    def namespaces(self) -> list[dict[str, Any]]:
        rows = self._conn.execute(
            "SELECT n.name, n.embedder, n.dim, n.generation, COUNT(i.id) FROM namespaces n "
            "LEFT JOIN items i ON i.namespace_id = n.id GROUP BY n.id ORDER BY n.name"
        ).fetchall()
        return [dict(zip(("name", "embedder", "dim", "generation", "items"), row)) for row in rows]

    def _namespace_id(self, name: str) -> int:
        row = self._conn.execute("SELECT id FROM namespaces WHERE name = ?", (name,)).fetchone()
        if row is None:
            known = ", ".join(n["name"] for n in self.namespaces()) or "none"
            raise ValueError(f"no namespace {name!r} in {self.path}; it has: {known}")
        return int(row[0])

    def reembed(self, name: str, embedder: Embedder, *, batch_size: int = 256) -> int:
        """Migrate namespace `name` to `embedder`: re-embed every intent key's text; returns how many.

        Texts are embedded outside the write lock; keys another process adds meanwhile are embedded inside it.
        """
        ns_id = self._namespace_id(name)
        rows = self._conn.execute(
            "SELECT id, text FROM intents WHERE namespace_id = ? ORDER BY id", (ns_id,)
        ).fetchall()
        vectors = _embed_batched(embedder, [text for _, text in rows], batch_size)

        def migrate(conn: sqlite3.Connection) -> int:
            self._lock_intents(conn, ns_id)
            newer = conn.execute(
                "SELECT id, text FROM intents WHERE namespace_id = ? AND id > ? ORDER BY id",
                (ns_id, rows[-1][0] if rows else 0),
            ).fetchall()
            all_rows = rows + newer
            all_vectors = np.concatenate([vectors, _embed_batched(embedder, [t for _, t in newer], batch_size)])
            conn.executemany(
                "UPDATE intents SET embedding = ? WHERE id = ?",
                [(vec.tobytes(), intent_id) for (intent_id, _), vec in zip(all_rows, all_vectors)],
            )
            conn.execute(
                "UPDATE namespaces SET embedder = ?, dim = ?, generation = generation + 1 WHERE id = ?",
                (embedder.name, embedder.dim, ns_id),
            )
            return len(all_rows)

        count = self._write(migrate)
        self._indexes.pop(ns_id, None)
        return int(count)

    def usage(self, name: str) -> int:
        """About the bytes of namespace `name`'s export (`export_size`): what a storage quota counts."""
        ns_id = self._namespace_id(name)
        (dim,) = self._conn.execute("SELECT dim FROM namespaces WHERE id = ?", (ns_id,)).fetchone()
        item_text, items = self._conn.execute(
            f"SELECT COALESCE(SUM({_JSON_BYTES.format('experience')}"
            f" + COALESCE({_JSON_BYTES.format('run_id')}, 0)), 0), COUNT(*) FROM items WHERE namespace_id = ?",
            (ns_id,),
        ).fetchone()
        intent_text, intents = self._conn.execute(
            f"SELECT COALESCE(SUM({_JSON_BYTES.format('text')}), 0), COUNT(*) FROM intents WHERE namespace_id = ?",
            (ns_id,),
        ).fetchone()
        return export_size(item_text, items, intent_text, intents, dim)

    # -- reading without an embedder (inspect / explain) ---------------------------------------------------------

    def inspect(self, name: str, limit: int | None = None) -> list[MemoryItem]:
        """The namespace's items, newest first."""
        rows = self._conn.execute(
            "SELECT i.id, i.intent_id, k.text, i.experience, i.q_value, i.visits, i.last_reward, i.run_id, "
            f"i.episode, i.created, {self._unit} FROM items i JOIN intents k ON k.id = i.intent_id "
            "WHERE i.namespace_id = ? ORDER BY i.id DESC" + ("" if limit is None else " LIMIT ?"),
            (self._namespace_id(name),) + (() if limit is None else (limit,)),
        ).fetchall()
        return [MemoryItem(*row) for row in rows]

    def retrievals(
        self, name: str, *, run_id: str | None = None, episode: int | None = None, unit: int | None = None
    ) -> list[RetrievalRecord]:
        """Logged retrievals of a namespace in order, optionally of one run, one attempt (`episode`) and/or one unit."""
        sql = (
            f"SELECT id, run_id, episode, query, candidates, chosen, explored, created, {self._unit} FROM retrievals"
            " WHERE namespace_id = ?"
        )
        params: list[Any] = [self._namespace_id(name)]
        for column, value in (("run_id", run_id), ("episode", episode), (self._unit, unit)):
            if value is not None:
                sql += f" AND {column} = ?"
                params.append(value)
        rows = self._conn.execute(sql + " ORDER BY id", params).fetchall()
        return [
            RetrievalRecord(
                r[0], r[1], r[2], r[3], loads(r[4], self.path), loads(r[5], self.path), bool(r[6]), r[7], r[8]
            )
            for r in rows
        ]

    def integrity_check(self) -> str:
        return str(self._conn.execute("PRAGMA integrity_check").fetchone()[0])

    # -- snapshot and restore of a namespace -------------------------------------------------------------------

    def embedder_of(self, name: str) -> str | None:
        """The name of the embedder that wrote namespace `name`'s vectors; None when there is no such namespace."""
        row = self._conn.execute("SELECT embedder FROM namespaces WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def stats(self, name: str) -> dict[str, Any]:
        """Counts and Q statistics of namespace `name` (population std; None when it holds no item)."""
        ns_id = self._namespace_id(name)
        embedder, dim = self._conn.execute("SELECT embedder, dim FROM namespaces WHERE id = ?", (ns_id,)).fetchone()
        (intents,) = self._conn.execute("SELECT COUNT(*) FROM intents WHERE namespace_id = ?", (ns_id,)).fetchone()
        rows = self._conn.execute("SELECT q_value, visits FROM items WHERE namespace_id = ?", (ns_id,)).fetchall()
        q = np.array([row[0] for row in rows], dtype=np.float64)
        q_stats = (
            {"mean": float(q.mean()), "std": float(q.std()), "min": float(q.min()), "max": float(q.max())}
            if len(q)
            else None
        )
        visited = sum(1 for row in rows if row[1])
        return {
            "name": name,
            "embedder": embedder,
            "dim": dim,
            "items": len(rows),
            "intents": intents,
            "visited_items": visited,
            "visits": sum(row[1] for row in rows),
            "q": q_stats,
        }

    def export_namespace(self, name: str) -> dict[str, Any]:
        """Namespace `name`'s memories as JSON-ready data (`NamespaceSnapshot`): the embedder, every intent key with
        its vector, every item with Q and provenance. Retrieval logs stay behind. Read in one transaction, so the
        keys and items agree even while other processes write."""
        ns_id = self._namespace_id(name)
        self._conn.execute("BEGIN")
        try:
            embedder, dim = self._conn.execute("SELECT embedder, dim FROM namespaces WHERE id = ?", (ns_id,)).fetchone()
            intents = self._conn.execute(
                "SELECT id, text, embedding, created FROM intents WHERE namespace_id = ? ORDER BY id", (ns_id,)
            ).fetchall()
            items = self._conn.execute(
                "SELECT id, intent_id, experience, q_value, visits, last_reward, run_id, episode, created, "
                f"{self._unit} FROM items WHERE namespace_id = ? ORDER BY id",
                (ns_id,),
            ).fetchall()
        finally:
            self._conn.execute("COMMIT")
        item_fields = ("id", "intent_id", *ITEM_COLUMNS[2:])
        return {
            "format": SNAPSHOT_FORMAT,
            "embedder": embedder,
            "dim": dim,
            "intents": [
                {"id": i, "text": text, "embedding": _encode_vector(blob), "created": created}
                for i, text, blob, created in intents
            ],
            "items": [dict(zip(item_fields, row)) for row in items],
        }

    def import_namespace(self, name: str, data: Any) -> dict[int, int]:
        """Replace namespace `name`'s memories by a snapshot from `export_namespace` (the namespace is created with
        the snapshot's embedder when new; an existing one must use the same embedder). Returns each snapshot item
        id's id here: ids are kept where no other namespace of this file holds them, so a restore into the same or
        an empty store keeps every id. One transaction: on any error nothing changes. Retrieval logs are kept."""
        if not name:
            raise ValueError("a memory namespace needs a non-empty name")
        snapshot = NamespaceSnapshot.model_validate(data)
        vectors = [_decode_vector(intent.embedding, snapshot.dim, intent.id) for intent in snapshot.intents]
        intent_ids = [intent.id for intent in snapshot.intents]
        if len(set(intent_ids)) != len(intent_ids) or len({item.id for item in snapshot.items}) != len(snapshot.items):
            raise ValueError("the snapshot repeats an intent or item id; export it again with export_namespace")
        dangling = sorted({item.intent_id for item in snapshot.items} - set(intent_ids))
        if dangling:
            raise ValueError(f"snapshot items refer to intent keys {dangling[:5]} that the snapshot does not hold")

        def restore(conn: sqlite3.Connection) -> tuple[int, dict[int, int]]:
            row = conn.execute("SELECT id, embedder, dim FROM namespaces WHERE name = ?", (name,)).fetchone()
            if row is not None:
                self._lock_intents(conn, row[0])
            if row is None:
                ns_id = conn.execute(
                    "INSERT INTO namespaces (name, embedder, dim, created) VALUES (?, ?, ?, ?)",
                    (name, snapshot.embedder, snapshot.dim, time.time()),
                ).lastrowid
            elif (row[1], row[2]) != (snapshot.embedder, snapshot.dim):
                raise EmbedderMismatchError(
                    f"namespace {name!r} embeds with {row[1]!r} ({row[2]}-d) but the snapshot with "
                    f"{snapshot.embedder!r} ({snapshot.dim}-d); restore it into a new namespace, or re-embed one side"
                )
            else:
                ns_id = row[0]
            conn.execute("DELETE FROM items WHERE namespace_id = ?", (ns_id,))
            conn.execute("DELETE FROM intents WHERE namespace_id = ?", (ns_id,))
            intent_map = _insert_keeping_ids(
                conn,
                "intents",
                ("namespace_id", "text", "embedding", "created"),
                [(i.id, (ns_id, i.text, v.tobytes(), i.created)) for i, v in zip(snapshot.intents, vectors)],
            )
            item_map = _insert_keeping_ids(
                conn,
                "items",
                ITEM_COLUMNS,
                [(m.id, (ns_id, intent_map[m.intent_id], *_item_values(m))) for m in snapshot.items],
            )
            self._ids_kept(conn, "intents")
            self._ids_kept(conn, "items")
            conn.execute("UPDATE namespaces SET generation = generation + 1 WHERE id = ?", (ns_id,))
            return int(ns_id), item_map

        ns_id, item_map = self._write(restore)
        self._indexes.pop(ns_id, None)  # keys were deleted: the append-only catch-up does not apply
        return item_map

    def export_all(self) -> dict[str, Any]:
        """Every namespace's memories and retrieval log, JSON-ready (`ttlearn memory export`): with `import_all`
        into an empty store, SQLite or PostgreSQL, the store comes back id for id."""
        namespaces = []
        for info in self.namespaces():
            logs = [dataclasses.asdict(r) for r in self.retrievals(info["name"])]
            namespaces.append({"name": info["name"], **self.export_namespace(info["name"]), "retrievals": logs})
        return {"format": STORE_EXPORT_FORMAT, "namespaces": namespaces}

    def import_all(self, data: dict[str, Any]) -> int:
        """Add the namespaces of an `export_all` dump (none of which this store may hold yet); returns how many.
        Ids are kept where free, and retrieval logs follow the items that had to take new ids."""
        if not isinstance(data, dict) or data.get("format") != STORE_EXPORT_FORMAT:
            raise ValueError(f"not a store export (format {STORE_EXPORT_FORMAT!r}); make one with ttlearn memory export")
        names = [ns["name"] for ns in data["namespaces"]]
        clashes = sorted({n for n in names if self.embedder_of(n) is not None})
        if clashes:
            raise ValueError(f"{self.path} already has namespaces {clashes}; import into an empty store or drop them")
        for ns in data["namespaces"]:
            snapshot = {k: v for k, v in ns.items() if k not in ("name", "retrievals")}
            moved = self.import_namespace(ns["name"], snapshot)
            self._import_retrievals(self._namespace_id(ns["name"]), ns["retrievals"], moved)
        return len(names)

    def _import_retrievals(self, ns_id: int, records: list[dict[str, Any]], moved: dict[int, int]) -> None:
        def new(i: int) -> int:
            return moved.get(i, i)

        rows = [
            (
                r["id"],
                (
                    ns_id, r["run_id"], r["episode"], r["query"],
                    json.dumps([{**c, "id": new(c["id"])} for c in r["candidates"]]),
                    json.dumps([new(i) for i in r["chosen"]]), int(r["explored"]), r["created"], r.get("unit"),
                ),
            )
            for r in records
        ]  # fmt: skip
        columns = ("namespace_id", "run_id", "episode", "query", "candidates", "chosen", "explored", "created", "unit")

        def write(conn: sqlite3.Connection) -> None:
            _insert_keeping_ids(conn, "retrievals", columns, rows)
            self._ids_kept(conn, "retrievals")

        self._write(write)

    # -- the vector index ------------------------------------------------------------------------------------------

    def _index(self, ns_id: int, *, writing: bool = False) -> VectorIndex:
        """The namespace's index, caught up with the file (always inside a write transaction, where it is exact)."""
        index = self._indexes.get(ns_id)
        version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        if index is None or writing or index.seen_version != version:
            index = self._catch_up(ns_id, index)
            index.seen_version = version
        if not writing and index.uses_ann and len(index) - index.saved_size >= max(1, len(index) // 10):
            self._save_index(ns_id, index)  # never inside a write transaction: it may still roll back
        return index

    def _catch_up(self, ns_id: int, index: VectorIndex | None) -> VectorIndex:
        """`index` with the rows committed since, or the saved or a rebuilt index when it is missing or outdated."""
        # the counters are read before the rows: a rewrite committed in between makes the index look older, never newer
        generation, rewrites, dim = self._conn.execute(
            "SELECT n.generation, COALESCE(r.count, 0), n.dim FROM namespaces n "
            "LEFT JOIN intent_rewrites r ON r.namespace_id = n.id WHERE n.id = ?",
            (ns_id,),
        ).fetchone()
        if index is None or (index.generation, index.rewrites) != (generation, rewrites):
            index = self._saved_index(ns_id, generation, rewrites)
            index = index or VectorIndex(dim, generation, rewrites, self.ann_threshold)
            self._indexes[ns_id] = index
        rows = self._conn.execute(
            "SELECT id, embedding FROM intents WHERE namespace_id = ? AND id > ? ORDER BY id", (ns_id, index.max_id)
        ).fetchall()
        if rows:
            blob = b"".join(row[1] for row in rows)
            index.extend([row[0] for row in rows], np.frombuffer(blob, dtype=np.float32).reshape(len(rows), dim))
        return index

    def index_path(self, ns_id: int) -> Path:
        """Where namespace `ns_id`'s HNSW index is saved."""
        return Path(f"{self.path}.index") / f"namespace-{ns_id}.npz"

    def _saved_index(self, ns_id: int, generation: int, rewrites: int) -> VectorIndex | None:
        """The saved index if it describes a prefix of the namespace's current intents (see the module docstring)."""

        def fits(saved_generation: int, saved_rewrites: int, ids: np.ndarray) -> bool:
            if (saved_generation, saved_rewrites) != (generation, rewrites) or not len(ids):
                return False
            count = self._conn.execute(
                "SELECT COUNT(*) FROM intents WHERE namespace_id = ? AND id <= ?", (ns_id, int(ids[-1]))
            ).fetchone()[0]
            return count == len(ids)

        path = self.index_path(ns_id)
        try:
            index = VectorIndex.load(path, self.ann_threshold, fits)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, EOFError, RuntimeError, zipfile.BadZipFile) as exc:
            warnings.warn(f"ignoring the damaged vector index {path} ({exc}); rebuilding it", stacklevel=3)
            return None
        if index is None:
            return None
        last = self._conn.execute("SELECT embedding FROM intents WHERE id = ?", (index.max_id,)).fetchone()
        return index if last is not None and last[0] == index.vectors[-1].tobytes() else None

    def _save_index(self, ns_id: int, index: VectorIndex) -> None:
        try:
            index.save(self.index_path(ns_id))
        except OSError as exc:  # the store works without it; the next open rebuilds
            warnings.warn(f"could not save the vector index beside {self.path} ({exc})", stacklevel=3)


def is_database_url(location: str | Path) -> bool:
    """Whether a store location names a PostgreSQL database rather than a SQLite file."""
    return str(location).startswith(("postgresql://", "postgres://"))


class Namespace:
    """Read/write access to one namespace with the embedder that owns it."""

    def __init__(self, store: MemoryStore, ns_id: int, name: str, embedder: Embedder) -> None:
        self.store = store
        self.id = ns_id
        self.name = name
        self.embedder = embedder

    def __len__(self) -> int:
        return int(
            self.store._conn.execute("SELECT COUNT(*) FROM items WHERE namespace_id = ?", (self.id,)).fetchone()[0]
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.embed(list(texts))

    def add(self, item: NewItem, *, join_threshold: float = DEFAULT_JOIN_THRESHOLD) -> Added:
        return self.add_many([item], join_threshold=join_threshold)[0]

    def add_many(self, items: Sequence[NewItem], *, join_threshold: float = DEFAULT_JOIN_THRESHOLD) -> list[Added]:
        """Write items in one transaction; each joins the most similar intent key if its similarity ≥ threshold,
        else creates a new key (so a batch of near-duplicates shares one key)."""
        missing = [i for i, item in enumerate(items) if item.vector is None]
        computed = dict(zip(missing, self.embed([items[i].intent for i in missing]))) if missing else {}
        vectors = [
            computed[i] if item.vector is None else _unit(item.vector, self.embedder.dim)
            for i, item in enumerate(items)
        ]

        matrix = np.stack(vectors) if vectors else np.zeros((0, self.embedder.dim), dtype=np.float32)
        self.store._index(self.id)  # load or build it before taking the write lock; inside, it only catches up

        def write(conn: sqlite3.Connection) -> list[Added]:
            self.store._lock_intents(conn, self.id)
            now = time.time()

            def new_intent(item: NewItem, vector: np.ndarray) -> int:
                return int(
                    conn.execute(
                        "INSERT INTO intents (namespace_id, text, embedding, created) VALUES (?, ?, ?, ?)",
                        (self.id, item.intent, vector.tobytes(), now),
                    ).lastrowid
                )

            def new_item(item: NewItem, intent_id: int) -> int:
                return int(
                    conn.execute(
                        "INSERT INTO items (namespace_id, intent_id, experience, q_value, run_id, episode, created, "
                        "unit) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            self.id, intent_id, item.experience, float(item.q_value), item.run_id, item.episode, now,
                            item.unit,
                        ),
                    ).lastrowid
                )

            index = self.store._index(self.id, writing=True)
            return place_items(index, items, matrix, join_threshold, new_intent, new_item)

        try:
            return self.store._write(write)
        except BaseException:
            self.store._indexes.pop(self.id, None)  # it may hold keys of the rolled-back transaction
            raise

    def nearest(self, query: str | np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k intent keys most similar to the query (text or unit vector): ids and cosine similarities."""
        vector = self.embed([query])[0] if isinstance(query, str) else _unit(query, self.embedder.dim)
        return self.store._index(self.id).nearest(vector, k)

    def items_of(self, intent_ids: Sequence[int], sims: Sequence[float]) -> list[Candidate]:
        """Every item under the given intent keys, each with its key's similarity; ordered as the keys, then by id."""
        if not len(intent_ids):
            return []
        sim_of = {int(i): float(s) for i, s in zip(intent_ids, sims)}
        marks = ",".join("?" * len(sim_of))
        rows = self.store._conn.execute(  # `+namespace_id`: keep the planner on the intent index
            f"SELECT id, intent_id, q_value, visits, experience FROM items "
            f"WHERE intent_id IN ({marks}) AND +namespace_id = ?",
            (*sim_of, self.id),
        ).fetchall()
        rank = {intent_id: r for r, intent_id in enumerate(sim_of)}
        rows.sort(key=lambda row: (rank[row[1]], row[0]))
        return [Candidate(row[0], row[1], sim_of[row[1]], row[2], row[3], row[4]) for row in rows]

    def update_q(
        self, item_ids: Iterable[int], reward: float, new_q: Callable[[np.ndarray], np.ndarray]
    ) -> dict[int, float]:
        """Atomically set Q ← new_q(Q) for the given items of this namespace, count a visit and record the reward;
        returns the new Q by id. An `AffineUpdate` (MemRL's rule) is one UPDATE statement, so concurrent updaters,
        in any number of processes, never lose each other's writes; another function reads the rows locked (SQLite:
        under the file's write lock; PostgreSQL: FOR UPDATE) and writes them back in the same transaction."""
        wanted = sorted({int(i) for i in item_ids})
        if not wanted:
            return {}
        marks = ",".join("?" * len(wanted))

        def write(conn: sqlite3.Connection) -> dict[int, float]:
            if isinstance(new_q, AffineUpdate):
                rows = conn.execute(
                    f"UPDATE items SET q_value = ? * q_value + ?, visits = {_SATURATED_VISIT}, last_reward = ? "
                    f"WHERE namespace_id = ? AND id IN ({marks}) RETURNING id, q_value",
                    (new_q.keep, new_q.add, float(reward), self.id, *wanted),
                ).fetchall()
            else:
                rows = conn.execute(
                    f"SELECT id, q_value FROM items WHERE namespace_id = ? AND id IN ({marks}){self.store.row_lock}",
                    (self.id, *wanted),
                ).fetchall()
                q_new = np.asarray(new_q(np.array([row[1] for row in rows], dtype=np.float64)), dtype=np.float64)
                rows = [(row[0], float(q)) for row, q in zip(rows, q_new)]
                conn.executemany(
                    f"UPDATE items SET q_value = ?, visits = {_SATURATED_VISIT}, last_reward = ? WHERE id = ?",
                    [(q, float(reward), i) for i, q in rows],
                )
            if len(rows) != len(wanted):  # raising rolls the transaction back: all or nothing
                unknown = sorted(set(wanted) - {row[0] for row in rows})
                raise ValueError(f"items {unknown} are not in namespace {self.name!r}")
            return {int(i): float(q) for i, q in sorted(rows)}

        return self.store._write(write)

    def log_retrieval(
        self,
        query: str,
        candidates: Sequence[dict[str, Any]],
        chosen: Sequence[int],
        *,
        explored: bool,
        run_id: str | None,
        episode: int | None = None,
    ) -> int:
        """Record one retrieval (episode may be set later with `assign_episode`); returns its log id."""
        return int(
            self.store._write(
                lambda conn: (
                    conn.execute(
                        "INSERT INTO retrievals (namespace_id, run_id, episode, query, candidates, chosen, explored, "
                        "created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            self.id,
                            run_id,
                            episode,
                            query,
                            json.dumps(list(candidates)),
                            json.dumps(list(chosen)),
                            int(explored),
                            time.time(),
                        ),
                    ).lastrowid
                )
            )
        )

    def assign_episode(self, log_ids: Sequence[int], episode: int, unit: int | None = None) -> None:
        """The retrievals `log_ids` were made for attempt `episode` of the run's `unit` (None: not known)."""
        if log_ids:
            self.store._write(
                lambda conn: conn.executemany(
                    "UPDATE retrievals SET episode = ?, unit = ? WHERE id = ? AND namespace_id = ?",
                    [(episode, unit, i, self.id) for i in log_ids],
                )
            )


def place_items(
    index: VectorIndex,
    items: Sequence[NewItem],
    matrix: np.ndarray,
    join_threshold: float,
    new_intent: Callable[[NewItem, np.ndarray], int],
    new_item: Callable[[NewItem, int], int],
) -> list[Added]:
    """Write each item under the most similar intent key, old or created earlier in the batch, if its similarity is
    at least `join_threshold`, else under a new key (`new_intent` writes it; the index learns it at once). Call with
    the namespace's intent writers serialised and `index` caught up: then a batch ends as it would one by one."""
    can_join = join_threshold <= 1.0  # above 1, the largest cosine, nothing joins: skip the searches
    if can_join:
        best_ids, best_sims = index.best_matches(matrix)  # against the keys that existed before this batch
    else:
        best_ids, best_sims = np.zeros(len(matrix), dtype=np.int64), np.full(len(matrix), -np.inf)
    first_new = len(index)
    added = []
    for item, vector, best_id, best_sim in zip(items, matrix, best_ids, best_sims):
        if can_join and len(index) > first_new:  # keys created earlier in this batch
            fresh = index.vectors[first_new:] @ vector
            row = int(fresh.argmax())
            if fresh[row] > best_sim:
                best_id, best_sim = index.ids[first_new + row], fresh[row]
        joined = float(best_sim) >= join_threshold
        if joined:
            intent_id = int(best_id)
        else:
            intent_id = new_intent(item, vector)
            index.extend([intent_id], vector[None, :])
        added.append(Added(new_item(item, intent_id), intent_id, joined))
    return added


def _unit(vector: np.ndarray, dim: int) -> np.ndarray:
    vector = np.asarray(vector, dtype=np.float32).reshape(-1)
    if vector.shape != (dim,):
        raise ValueError(f"expected a {dim}-d vector, got shape {vector.shape}")
    norm = math.sqrt(float(vector @ vector))
    return vector / norm if norm else vector


def _embed_batched(embedder: Embedder, texts: list[str], batch_size: int) -> np.ndarray:
    chunks = [embedder.embed(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
    return np.concatenate(chunks) if chunks else np.zeros((0, embedder.dim), dtype=np.float32)


ITEM_COLUMNS = (
    "namespace_id",
    "intent_id",
    "experience",
    "q_value",
    "visits",
    "last_reward",
    "run_id",
    "episode",
    "created",
    "unit",
)


def _item_values(item: ItemRecord) -> tuple[Any, ...]:
    return (
        item.experience, item.q_value, item.visits, item.last_reward, item.run_id, item.episode, item.created, item.unit
    )


def _encode_vector(blob: bytes) -> str:
    return base64.b64encode(np.frombuffer(blob, dtype=np.float32).astype("<f4").tobytes()).decode("ascii")


def _decode_vector(text: str, dim: int, intent_id: int) -> np.ndarray:
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raise ValueError(f"intent {intent_id}: the embedding is not valid base64") from None
    if len(raw) != 4 * dim:
        raise ValueError(f"intent {intent_id}: the embedding holds {len(raw) // 4} floats, the snapshot says dim {dim}")
    vector = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.isfinite(vector).all():
        raise ValueError(f"intent {intent_id}: the embedding holds a non-finite value")
    norm = float(np.linalg.norm(vector.astype(np.float64)))
    if abs(norm - 1.0) > UNIT_TOLERANCE:
        raise ValueError(f"intent {intent_id}: the embedding has norm {norm:.4g}; embeddings are unit vectors")
    return vector


def _insert_keeping_ids(
    conn: sqlite3.Connection, table: str, columns: Sequence[str], rows: Sequence[tuple[int, tuple[Any, ...]]]
) -> dict[int, int]:
    """Insert (wanted id, values) rows into `table`, keeping each wanted id unless the table already holds it;
    returns the id each row got. Kept ids go first so a fresh id can never take a wanted one."""
    wanted = [wanted_id for wanted_id, _ in rows]
    taken = set()
    if wanted:
        taken = {
            r[0] for r in conn.execute(f"SELECT id FROM {table} WHERE id BETWEEN ? AND ?", (min(wanted), max(wanted)))
        }
    names, marks = ", ".join(columns), ", ".join("?" * len(columns))
    conn.executemany(
        f"INSERT INTO {table} (id, {names}) VALUES (?, {marks})",
        [(wanted_id, *values) for wanted_id, values in rows if wanted_id not in taken],
    )
    ids = {wanted_id: wanted_id for wanted_id in wanted if wanted_id not in taken}
    fresh = f"INSERT INTO {table} ({names}) VALUES ({marks})"
    for wanted_id, values in rows:
        if wanted_id in taken:
            ids[wanted_id] = int(conn.execute(fresh, values).lastrowid)
    return ids
