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
from pydantic import BaseModel, ConfigDict, Field

from ttlearn.memory.dialect import Dialect
from ttlearn.memory.items import MAX_COUNT, EmbedderMismatchError

SNAPSHOT_FORMAT = "ttlearn-memrl-namespace/1"
STORE_EXPORT_FORMAT = "ttlearn-memrl-store/1"
MAX_MAGNITUDE = 1e12
"""The largest |value| of a snapshot's numbers: Q statistics over them cannot overflow (time stamps are ~2e9)."""
_Finite = Annotated[float, Field(allow_inf_nan=False, ge=-MAX_MAGNITUDE, le=MAX_MAGNITUDE)]
_Count = Annotated[int, Field(ge=-MAX_COUNT, le=MAX_COUNT)]
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
            f"{dialect.unit_column} FROM items WHERE namespace_id = ? ORDER BY id",
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


def restore_namespace(dialect: Dialect, name: str, data: Any) -> tuple[int, dict[int, int]]:
    """Replace namespace `name`'s memories by a snapshot's (see `MemoryStore.import_namespace`), in one transaction;
    returns the namespace's id and each snapshot item id's id here."""
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

    def restore(conn: Any) -> tuple[int, dict[int, int]]:
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
        return int(ns_id), item_map

    return dialect.write(restore)


def restore_retrievals(dialect: Dialect, ns_id: int, records: list[dict[str, Any]], moved: dict[int, int]) -> None:
    """Add an `export_all` dump's retrieval log to namespace `ns_id`, its item ids renamed by `moved`."""

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

    def write(conn: Any) -> None:
        _insert_keeping_ids(conn, "retrievals", RETRIEVAL_COLUMNS, rows)
        dialect.ids_kept(conn, "retrievals")

    dialect.write(write)


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
