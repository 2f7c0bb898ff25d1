"""A namespace's memories as JSON-ready records: what `MemoryStore.export_namespace` writes and `import_namespace`
reads (a run's MemRL snapshot, `ttlearn memory export` / `import`, the memory service's export), the limits every
imported number is checked against, and the size of an export, which storage quotas count.

Snapshots carry every intent key's unit vector (base64 of little-endian float32), so a restore needs no embedder, and
ids, so a restore into the same or an empty store gives every item its old id back. SQLite and PostgreSQL read and
write the same records through their dialect (`memory.dialect`).
"""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ttlearn.memory.dialect import Dialect
from ttlearn.memory.forgetting import Policy, recount, write_policy
from ttlearn.memory.items import MAX_COUNT, EmbedderMismatchError

SNAPSHOT_FORMAT = "ttlearn-memrl-namespace/1"
STORE_EXPORT_FORMAT = "ttlearn-memrl-store/1"
MAX_MAGNITUDE = 1e12
"""The largest |value| of a snapshot's numbers: Q statistics over them cannot overflow (time stamps are ~2e9)."""
_Finite = Annotated[float, Field(allow_inf_nan=False, ge=-MAX_MAGNITUDE, le=MAX_MAGNITUDE)]
_Count = Annotated[int, Field(ge=-MAX_COUNT, le=MAX_COUNT)]
MAX_ID = 2**40
"""The largest id a restore keeps: a real store never comes near (a trillion rows), and a restore moves an id sequence
(PostgreSQL's, SQLite's rowid) only up to the largest id it wrote, so a crafted 2⁶³ − 1 can no longer end the
sequence for every namespace of the database, and every id the store issues afterwards stays below 2⁵³, exact in
every JSON reader."""
_Id = Annotated[int, Field(ge=1, le=MAX_ID)]
UNIT_TOLERANCE = 1e-3
"""How far from 1 an imported intent vector's norm may be: retrieval ranks by dot products of unit vectors."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IntentRecord(_Strict):
    id: _Id
    text: str
    embedding: str
    """The unit vector as base64 of little-endian float32 values, so a restore needs no embedder."""
    created: _Finite


class ItemRecord(_Strict):
    id: _Id
    intent_id: _Id
    experience: str
    q_value: _Finite
    visits: int = Field(ge=0, le=MAX_COUNT)
    last_reward: _Finite | None
    run_id: str | None
    episode: _Count | None
    created: _Finite
    unit: _Count | None = None
    """Absent from snapshots written before units were recorded."""
    key_id: str | None = None
    exchange: str | None = None
    touched: _Finite | None = None
    """Absent from snapshots written before forgetting: the item's `created` stands in."""


class NamespaceSnapshot(_Strict):
    """A namespace's memories as `export_namespace` writes them and `import_namespace` reads them."""

    format: Literal["ttlearn-memrl-namespace/1"]
    embedder: str
    dim: int = Field(gt=0)
    intents: Annotated[list[IntentRecord], Field(fail_fast=True)]
    items: Annotated[list[ItemRecord], Field(fail_fast=True)]
    """fail_fast: a broken snapshot is refused at its first bad record, not after listing every one."""


class CandidateRecord(BaseModel):
    """One candidate of a logged retrieval: its item id, then what the log holds of it (similarity, Q, score)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    id: _Id


class RetrievalRecordIn(_Strict):
    """A logged retrieval as `export_all` writes it (`items.RetrievalRecord`)."""

    id: _Id
    run_id: str | None
    episode: _Count | None
    query: str
    candidates: Annotated[list[CandidateRecord], Field(fail_fast=True)]
    chosen: Annotated[list[_Id], Field(fail_fast=True)]
    explored: bool
    created: _Finite
    unit: _Count | None = None


class NamespaceExport(NamespaceSnapshot):
    """One namespace of a store export: its name, its memories, its retrieval log and its forgetting policy."""

    name: str = Field(min_length=1)
    retrievals: Annotated[list[RetrievalRecordIn], Field(fail_fast=True)]
    ttl_s: _Finite | None = Field(None, gt=0)
    capacity: int | None = Field(None, ge=1, le=MAX_COUNT)
    """The policy (`memory.forgetting`); absent from exports written before forgetting: no limit."""


class StoreExport(_Strict):
    """What `ttlearn memory export` writes and `import` reads: every namespace of a store."""

    format: Literal["ttlearn-memrl-store/1"]
    namespaces: Annotated[list[NamespaceExport], Field(fail_fast=True)]


def validated(model: type[_Strict], data: Any, what: str) -> Any:
    """`data` as `model`, or a ValueError in one line naming the first bad field (and never echoing its value)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise ValueError(f"{what}: {where}: {error['msg']}" if where else f"{what}: {error['msg']}") from None


ITEM_RECORD_BYTES = 256
"""An exported item's JSON beside its texts: ids, Q, visits, reward, episode, time stamp and the keys."""
INTENT_RECORD_BYTES = 96
"""An exported intent key's JSON beside its text and vector: id, time stamp and the keys."""


def json_text_bytes(text: str | None) -> int:
    """The bytes of `text` inside a JSON export (UTF-8, escapes counted), as `Dialect.json_bytes` counts them in SQL."""
    return 0 if text is None else len(json.dumps(text, ensure_ascii=False).encode("utf-8")) - 2


def export_size(item_text: int, items: int, intent_text: int, intents: int, dim: int) -> int:
    """About the bytes of a namespace's export: `item_text` bytes of experiences and run ids over `items` items,
    `intent_text` bytes of intent texts over `intents` keys whose vectors have `dim` floats (base64 of float32:
    4·⌈4·dim / 3⌉ characters). Texts count as the export writes them (`json_text_bytes`: escapes included), so a
    text of control characters cannot hold six times its quota."""
    vector = 4 * math.ceil(4 * dim / 3)
    return item_text + items * ITEM_RECORD_BYTES + intent_text + intents * (vector + INTENT_RECORD_BYTES)


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
    "key_id",
    "exchange",
    "touched",
)
RETRIEVAL_COLUMNS = (
    "namespace_id",
    "run_id",
    "episode",
    "query",
    "candidates",
    "chosen",
    "explored",
    "created",
    "unit",
)


def read_namespace(dialect: Dialect, ns_id: int) -> dict[str, Any]:
    """Namespace `ns_id`'s memories as a `NamespaceSnapshot`'s data, read in one transaction, so the keys and items
    agree even while other processes write."""
    conn = dialect.conn
    conn.execute("BEGIN")
    try:
        embedder, dim = conn.execute("SELECT embedder, dim FROM namespaces WHERE id = ?", (ns_id,)).fetchone()
        intents = conn.execute(
            "SELECT id, text, embedding, created FROM intents WHERE namespace_id = ? ORDER BY id", (ns_id,)
        ).fetchall()
        items = conn.execute(
            "SELECT id, intent_id, experience, q_value, visits, last_reward, run_id, episode, created, "
            f"{', '.join(dialect.column(c) for c in ITEM_COLUMNS[-4:])} FROM items WHERE namespace_id = ? ORDER BY id",
            (ns_id,),
        ).fetchall()
    finally:
        conn.execute("COMMIT")
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


def prepared(data: Any) -> tuple[NamespaceSnapshot, list[np.ndarray]]:
    """A snapshot checked whole before anything is written: its records, its vectors (finite unit vectors of its
    dim), ids not repeated, every item's intent key in it."""
    snapshot = validated(NamespaceSnapshot, data, "a memory snapshot")
    vectors = [_decode_vector(intent.embedding, snapshot.dim, intent.id) for intent in snapshot.intents]
    intent_ids = [intent.id for intent in snapshot.intents]
    if len(set(intent_ids)) != len(intent_ids) or len({item.id for item in snapshot.items}) != len(snapshot.items):
        raise ValueError("the snapshot repeats an intent or item id; export it again with export_namespace")
    dangling = sorted({item.intent_id for item in snapshot.items} - set(intent_ids))
    if dangling:
        raise ValueError(f"snapshot items refer to intent keys {dangling[:5]} that the snapshot does not hold")
    return snapshot, vectors


def restore_namespace(dialect: Dialect, name: str, data: Any) -> tuple[int, dict[int, int]]:
    """Replace namespace `name`'s memories by a snapshot's (see `MemoryStore.import_namespace`), in one transaction;
    returns the namespace's id and each snapshot item id's id here."""
    if not name:
        raise ValueError("a memory namespace needs a non-empty name")
    snapshot, vectors = prepared(data)
    return dialect.write(lambda conn: _restore(conn, dialect, name, snapshot, vectors))


def prepared_export(data: Any) -> list[tuple[NamespaceExport, NamespaceSnapshot, list[np.ndarray]]]:
    """A store export (`StoreExport`) checked whole, before anything is written: every namespace `prepared`, names
    not repeated."""
    if not isinstance(data, dict) or data.get("format") != STORE_EXPORT_FORMAT:
        raise ValueError(f"not a store export (format {STORE_EXPORT_FORMAT!r}); make one with ttlearn memory export")
    export = validated(StoreExport, data, "the store export")
    names = [ns.name for ns in export.namespaces]
    if len(set(names)) != len(names):
        raise ValueError("the store export holds a namespace twice; export the store again")
    return [(ns, *prepared(ns)) for ns in export.namespaces]


def restore_store(dialect: Dialect, data: Any) -> list[int]:
    """Add every namespace of a store export, with its retrieval log, to a store that holds none of them: the whole
    export is checked first (`prepared_export`), then written in one transaction, so on any error the store is as it
    was. Returns the namespaces' ids."""
    ready = prepared_export(data)
    names = [ns.name for ns, _, _ in ready]

    def write(conn: Any) -> list[int]:
        clashes = [n for n in names if conn.execute("SELECT 1 FROM namespaces WHERE name = ?", (n,)).fetchone()]
        if clashes:
            raise ValueError(
                f"{dialect.location} already has namespaces {clashes}; import into an empty store or drop them"
            )
        ids = []
        for ns, snapshot, vectors in ready:
            ns_id, moved = _restore(conn, dialect, ns.name, snapshot, vectors)
            write_policy(conn, ns_id, Policy(ns.ttl_s, ns.capacity))
            rows = [_retrieval_row(record, ns_id, moved) for record in ns.retrievals]
            _insert_keeping_ids(conn, "retrievals", RETRIEVAL_COLUMNS, rows)
            ids.append(ns_id)
        dialect.ids_kept(conn, "retrievals")
        return ids

    return dialect.write(write)


def _restore(
    conn: Any, dialect: Dialect, name: str, snapshot: NamespaceSnapshot, vectors: list[np.ndarray]
) -> tuple[int, dict[int, int]]:
    """Inside a write transaction: namespace `name` (created when new) holds exactly the snapshot's memories."""
    row = conn.execute("SELECT id, embedder, dim FROM namespaces WHERE name = ?", (name,)).fetchone()
    if row is not None:
        dialect.lock_intents(conn, row[0])
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
    dialect.ids_kept(conn, "intents")
    dialect.ids_kept(conn, "items")
    conn.execute("UPDATE namespaces SET generation = generation + 1 WHERE id = ?", (ns_id,))
    recount(conn, ns_id)
    return int(ns_id), item_map


def _retrieval_row(record: RetrievalRecordIn, ns_id: int, moved: dict[int, int]) -> tuple[int, tuple[Any, ...]]:
    """A logged retrieval as a row of namespace `ns_id`, its item ids renamed by `moved` (those that took new ids)."""
    candidates = [{**c.model_dump(), "id": moved.get(c.id, c.id)} for c in record.candidates]
    chosen = [moved.get(i, i) for i in record.chosen]
    values = (ns_id, record.run_id, record.episode, record.query, json.dumps(candidates), json.dumps(chosen),
              int(record.explored), record.created, record.unit)  # fmt: skip
    return record.id, values


def _item_values(item: ItemRecord) -> tuple[Any, ...]:
    return (
        item.experience,
        item.q_value,
        item.visits,
        item.last_reward,
        item.run_id,
        item.episode,
        item.created,
        item.unit,
        item.key_id,
        item.exchange,
        item.created if item.touched is None else item.touched,
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
    conn: Any, table: str, columns: Sequence[str], rows: Sequence[tuple[int, tuple[Any, ...]]]
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
