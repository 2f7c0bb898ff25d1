"""A durable episodic memory store that processes share: a SQLite file, or a PostgreSQL database many machines share.

`MemoryStore(location)` opens either (a `postgresql://` URL: `memory.postgres`, which needs the `postgres` extra)
and runs the same SQL on both; what differs lives in its dialect (`memory.dialect`). The jobs live in their own
modules: the schema and transactions in `memory.sqlite` and `memory.postgres`, each namespace's item operations in
`memory.items` (`store.namespace(name, embedder)` hands them out), the per-process vector indexes in
`memory.index_cache`, snapshots and their limits in `memory.snapshot`. What stays here: opening, namespaces and their
embedders, reading without an embedder (inspect, explain, stats, usage), re-embedding, and whole-store export.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ttlearn.memory.dialect import Dialect
from ttlearn.memory.embed import Embedder
from ttlearn.memory.forgetting import Forgotten, Policy, forget, read_policy, write_policy
from ttlearn.memory.index_cache import DEFAULT_ANN_THRESHOLD, IndexCache
from ttlearn.memory.items import EmbedderMismatchError, MemoryItem, Namespace, RetrievalRecord
from ttlearn.memory.snapshot import (
    STORE_EXPORT_FORMAT,
    export_size,
    read_namespace,
    restore_namespace,
    restore_store,
)
from ttlearn.memory.sqlite import SqliteDialect
from ttlearn.untrusted import loads


class NamespaceExistsError(ValueError):
    """A namespace that is being created exists already (whoever created it, in whichever process)."""


def is_database_url(location: str | Path) -> bool:
    """Whether a store location names a PostgreSQL database rather than a SQLite file."""
    return str(location).startswith(("postgresql://", "postgres://"))


def _open_dialect(location: str | Path, timeout_s: float, read_only: bool) -> Dialect:
    if not is_database_url(location):
        return SqliteDialect(location, timeout_s=timeout_s, read_only=read_only)
    if read_only:
        raise ValueError("a PostgreSQL memory store is opened for reading and writing; read_only is for store files")
    from ttlearn.memory.postgres import PostgresDialect

    return PostgresDialect(str(location), timeout_s=timeout_s)


class MemoryStore:
    """One store; `namespace(name, embedder)` hands out the per-namespace read/write API. `read_only` opens a store
    file that someone else may have written (`memory inspect`, `explain`): nothing is written, not even a migration."""

    def __init__(
        self,
        location: str | Path,
        *,
        timeout_s: float = 60.0,
        ann_threshold: int = DEFAULT_ANN_THRESHOLD,
        read_only: bool = False,
    ) -> None:
        self.dialect = _open_dialect(location, timeout_s, read_only)
        self.path = self.dialect.location
        """Where the store is, fit to print: the file, or the database URL without its password."""
        self.indexes = IndexCache(self.dialect, ann_threshold)

    def close(self) -> None:
        """Save every HNSW index that grew since it was last saved, then close the connection."""
        self.indexes.save_grown()
        self.dialect.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- namespaces ---------------------------------------------------------------------------------------------

    def namespace(self, name: str, embedder: Embedder) -> Namespace:
        """Open (creating if new) namespace `name`; refuses an embedder other than the one that wrote it."""
        _check_name(name)

        def open_or_create(conn: Any) -> int:
            row = conn.execute("SELECT id, embedder, dim FROM namespaces WHERE name = ?", (name,)).fetchone()
            if row is None:
                return _insert_namespace(conn, name, embedder)
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

        return Namespace(self.dialect, self.indexes, self.dialect.write(open_or_create), name, embedder)

    def create_namespace(
        self,
        name: str,
        embedder: Embedder,
        also: Callable[[Any], None] | None = None,
        *,
        policy: Policy = Policy(),
    ) -> Namespace:
        """Create namespace `name` with its forgetting `policy`, and run `also(conn)` in the same transaction (the
        service stores its first key there); NamespaceExistsError when it exists. Of several processes creating one
        name at once, exactly one succeeds: the check and the insert are one transaction, and the name is unique in
        the table."""
        _check_name(name)

        def create(conn: Any) -> int:
            if conn.execute("SELECT 1 FROM namespaces WHERE name = ?", (name,)).fetchone() is not None:
                raise NamespaceExistsError(f"namespace {name!r} exists in {self.path}")
            ns_id = _insert_namespace(conn, name, embedder)
            write_policy(conn, ns_id, policy)
            if also is not None:
                also(conn)
            return ns_id

        return Namespace(self.dialect, self.indexes, self.dialect.write(create), name, embedder)

    def namespaces(self) -> list[dict[str, Any]]:
        rows = self.dialect.conn.execute(
            "SELECT n.name, n.embedder, n.dim, n.generation, COUNT(i.id) FROM namespaces n "
            "LEFT JOIN items i ON i.namespace_id = n.id GROUP BY n.id ORDER BY n.name"
        ).fetchall()
        return [dict(zip(("name", "embedder", "dim", "generation", "items"), row)) for row in rows]

    def _namespace_id(self, name: str) -> int:
        row = self.dialect.conn.execute("SELECT id FROM namespaces WHERE name = ?", (name,)).fetchone()
        if row is None:
            known = ", ".join(n["name"] for n in self.namespaces()) or "none"
            raise ValueError(f"no namespace {name!r} in {self.path}; it has: {known}")
        return int(row[0])

    def embedder_of(self, name: str) -> str | None:
        """The name of the embedder that wrote namespace `name`'s vectors; None when there is no such namespace."""
        row = self.dialect.conn.execute("SELECT embedder FROM namespaces WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def reembed(self, name: str, embedder: Embedder, *, batch_size: int = 256) -> int:
        """Migrate namespace `name` to `embedder`: re-embed every intent key's text; returns how many.

        Texts are embedded outside the write lock; keys another process adds meanwhile are embedded inside it.
        """
        ns_id = self._namespace_id(name)
        rows = self.dialect.conn.execute(
            "SELECT id, text FROM intents WHERE namespace_id = ? ORDER BY id", (ns_id,)
        ).fetchall()
        vectors = _embed_batched(embedder, [text for _, text in rows], batch_size)

        def migrate(conn: Any) -> int:
            self.dialect.lock_intents(conn, ns_id)
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

        count = self.dialect.write(migrate)
        self.indexes.forget(ns_id)
        return int(count)

    # -- reading without an embedder (inspect / explain / quotas) -------------------------------------------------

    def usage(self, name: str) -> int:
        """About the bytes of namespace `name`'s export (`export_size`): what a storage quota counts."""
        ns_id = self._namespace_id(name)
        json_bytes = self.dialect.json_bytes
        dim, item_text, items, intent_text, intents = self.dialect.conn.execute(
            "SELECT n.dim, "
            f"(SELECT COALESCE(SUM({json_bytes('experience')} + COALESCE({json_bytes('run_id')}, 0)), 0) "
            "FROM items WHERE namespace_id = n.id), (SELECT COUNT(*) FROM items WHERE namespace_id = n.id), "
            f"(SELECT COALESCE(SUM({json_bytes('text')}), 0) FROM intents WHERE namespace_id = n.id), "
            "(SELECT COUNT(*) FROM intents WHERE namespace_id = n.id) FROM namespaces n WHERE n.id = ?",
            (ns_id,),
        ).fetchone()
        return export_size(int(item_text), int(items), int(intent_text), int(intents), int(dim))

    def inspect(
        self,
        name: str,
        limit: int | None = None,
        *,
        run_id: str | None = None,
        unit: int | None = None,
        key_id: str | None = None,
        exchange: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> list[MemoryItem]:
        """The namespace's items, newest first, with their provenance; only those written by `run_id`, `unit`, the
        service key `key_id` or the proxy exchange `exchange`, at or after `since` and before `until` (Unix times),
        where given."""
        column = self.dialect.column
        sql = (
            "SELECT i.id, i.intent_id, k.text, i.experience, i.q_value, i.visits, i.last_reward, i.run_id, i.episode, "
            f"i.created, {column('i.unit')}, {column('i.key_id')}, {column('i.exchange')}, {column('i.touched')} "
            "FROM items i JOIN intents k ON k.id = i.intent_id WHERE i.namespace_id = ?"
        )
        params: list[Any] = [self._namespace_id(name)]
        for condition, value in (
            ("i.run_id = ?", run_id),
            (f"{column('i.unit')} = ?", unit),
            (f"{column('i.key_id')} = ?", key_id),
            (f"{column('i.exchange')} = ?", exchange),
            ("i.created >= ?", since),
            ("i.created < ?", until),
        ):
            if value is not None:
                sql += f" AND {condition}"
                params.append(value)
        sql += " ORDER BY i.id DESC" + ("" if limit is None else " LIMIT ?")
        rows = self.dialect.conn.execute(sql, params + ([] if limit is None else [limit])).fetchall()
        return [MemoryItem(*row) for row in rows]

    def retrievals(
        self, name: str, *, run_id: str | None = None, episode: int | None = None, unit: int | None = None
    ) -> list[RetrievalRecord]:
        """Logged retrievals of a namespace in order, optionally of one run, one attempt (`episode`) and/or one unit."""
        unit_column = self.dialect.column("unit")
        sql = (
            f"SELECT id, run_id, episode, query, candidates, chosen, explored, created, {unit_column} FROM retrievals"
            " WHERE namespace_id = ?"
        )
        params: list[Any] = [self._namespace_id(name)]
        for column, value in (("run_id", run_id), ("episode", episode), (unit_column, unit)):
            if value is not None:
                sql += f" AND {column} = ?"
                params.append(value)
        rows = self.dialect.conn.execute(sql + " ORDER BY id", params).fetchall()
        return [
            RetrievalRecord(
                r[0], r[1], r[2], r[3], loads(r[4], self.path), loads(r[5], self.path), bool(r[6]), r[7], r[8]
            )
            for r in rows
        ]

    def stats(self, name: str) -> dict[str, Any]:
        """Counts and Q statistics of namespace `name` (population std; None when it holds no item)."""
        ns_id = self._namespace_id(name)
        conn = self.dialect.conn
        embedder, dim = conn.execute("SELECT embedder, dim FROM namespaces WHERE id = ?", (ns_id,)).fetchone()
        (intents,) = conn.execute("SELECT COUNT(*) FROM intents WHERE namespace_id = ?", (ns_id,)).fetchone()
        rows = conn.execute("SELECT q_value, visits FROM items WHERE namespace_id = ?", (ns_id,)).fetchall()
        q = np.array([row[0] for row in rows], dtype=np.float64)
        q_stats = (
            {"mean": float(q.mean()), "std": float(q.std()), "min": float(q.min()), "max": float(q.max())}
            if len(q)
            else None
        )
        visited = sum(1 for row in rows if row[1])
        policy = self.policy(name)
        return {
            "name": name,
            "embedder": embedder,
            "dim": dim,
            "items": len(rows),
            "intents": intents,
            "visited_items": visited,
            "visits": sum(row[1] for row in rows),
            "q": q_stats,
            "ttl_s": policy.ttl_s,
            "capacity": policy.capacity,
        }

    # -- forgetting (`memory.forgetting`) ---------------------------------------------------------------------

    def policy(self, name: str) -> Policy:
        """Namespace `name`'s forgetting policy."""
        if self.dialect.column("touched") != "touched":  # a file read as it is, from before policies
            return Policy()
        return read_policy(self.dialect.conn, self._namespace_id(name))

    def set_policy(self, name: str, policy: Policy) -> None:
        """Give namespace `name` a forgetting policy (its TTL and capacity, None: no limit); the next write that
        adds items, or `prune`, applies it."""
        ns_id = self._namespace_id(name)
        self.dialect.write(lambda conn: write_policy(conn, ns_id, policy))

    def prune(self, name: str, *, now: float | None = None) -> Forgotten:
        """Apply namespace `name`'s forgetting policy now, in one transaction: items past the TTL, then items over
        the capacity by `forgetting.eviction_order`, then the intent keys left without items."""
        ns_id = self._namespace_id(name)
        at = time.time() if now is None else now

        def prune(conn: Any) -> Forgotten:
            self.dialect.lock_intents(conn, ns_id)
            return forget(conn, ns_id, at, orphans=True)

        forgotten = self.dialect.write(prune)
        if forgotten.intents:
            self.indexes.forget(ns_id)
        return forgotten

    def integrity_check(self) -> str:
        return self.dialect.integrity_check()

    # -- snapshot and restore ---------------------------------------------------------------------------------

    def export_namespace(self, name: str) -> dict[str, Any]:
        """Namespace `name`'s memories as JSON-ready data (`snapshot.NamespaceSnapshot`): the embedder, every intent key
        with its vector, every item with Q and provenance. Retrieval logs stay behind. Read in one transaction, so
        the keys and items agree even while other processes write."""
        return read_namespace(self.dialect, self._namespace_id(name))

    def import_namespace(self, name: str, data: Any) -> dict[int, int]:
        """Replace namespace `name`'s memories by a snapshot from `export_namespace` (the namespace is created with
        the snapshot's embedder when new; an existing one must use the same embedder). Returns each snapshot item
        id's id here: ids are kept where no other namespace of this store holds them, so a restore into the same or
        an empty store keeps every id. One transaction: on any error nothing changes. Retrieval logs are kept."""
        ns_id, item_map = restore_namespace(self.dialect, name, data)
        self.indexes.forget(ns_id)  # keys were deleted: the append-only catch-up does not apply
        return item_map

    def export_all(self) -> dict[str, Any]:
        """Every namespace's memories, retrieval log and forgetting policy, JSON-ready (`ttlearn memory export`): with
        `import_all` into an empty store, SQLite or PostgreSQL, the store comes back id for id."""
        namespaces = []
        for info in self.namespaces():
            name = info["name"]
            logs = [dataclasses.asdict(r) for r in self.retrievals(name)]
            policy = dataclasses.asdict(self.policy(name))
            namespaces.append({"name": name, **self.export_namespace(name), "retrievals": logs, **policy})
        return {"format": STORE_EXPORT_FORMAT, "namespaces": namespaces}

    def import_all(self, data: dict[str, Any]) -> int:
        """Add the namespaces of an `export_all` dump (none of which this store may hold yet); returns how many.
        Ids are kept where free, and retrieval logs follow the items that had to take new ids. The whole dump is
        checked first (`snapshot.StoreExport`: ids from 1 to 2⁴⁰, counters in range, vectors unit), then written in
        one transaction: on any error the store is as it was."""
        ns_ids = restore_store(self.dialect, data)
        for ns_id in ns_ids:
            self.indexes.forget(ns_id)
        return len(ns_ids)


def _check_name(name: str) -> None:
    if not name:
        raise ValueError("a memory namespace needs a non-empty name")


def _insert_namespace(conn: Any, name: str, embedder: Embedder) -> int:
    cursor = conn.execute(
        "INSERT INTO namespaces (name, embedder, dim, created) VALUES (?, ?, ?, ?)",
        (name, embedder.name, embedder.dim, time.time()),
    )
    return int(cursor.lastrowid)


def _embed_batched(embedder: Embedder, texts: list[str], batch_size: int) -> np.ndarray:
    chunks = [embedder.embed(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
    return np.concatenate(chunks) if chunks else np.zeros((0, embedder.dim), dtype=np.float32)
