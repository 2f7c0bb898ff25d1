"""Each namespace's vector index in this process, kept in step with the store that other processes write too.

An index catches up with other connections' writes by tailing intent ids: a namespace's intent ids commit in
increasing order (SQLite's one write lock; PostgreSQL's per-namespace advisory lock), so new keys are the rows above
the largest id it holds. Anything else — `reembed` or a restore bumps the namespace's generation; any UPDATE or
DELETE of an intent row bumps its namespace's count in `intent_rewrites`, by trigger, in the writer's own
transaction — forces a full rebuild. Where the dialect has a `data_version`, a search that finds it unchanged skips
the catch-up query. Brute-force numpy dot products below `ann_threshold` intents; above it a usearch HNSW graph
(`memory.vector_index`).

HNSW indexes are saved through the dialect — a SQLite store beside its file (`<store>.index/namespace-<id>.npz`,
written to a temporary file and renamed, so a reader sees a whole file or the previous one), PostgreSQL in the
database, so that a new replica loads rather than builds — after a build, after every 10 % of growth, and on
`save_grown` (the store's close); never from inside a write transaction, which may still roll back. A saved index is
used only if it still describes a prefix of the namespace's intents: same generation and rewrite count, as many rows
up to its last id as it holds, and that last row's embedding unchanged; rows added since (say, by a process killed
before it saved) are then appended as usual, so a stale index is never served.
"""

from __future__ import annotations

import warnings
import zipfile

import numpy as np

from ttlearn.memory.dialect import Dialect
from ttlearn.memory.vector_index import VectorIndex

DEFAULT_ANN_THRESHOLD = 20_000


class IndexCache:
    """The vector index of every namespace this process has searched or written, by namespace id."""

    def __init__(self, dialect: Dialect, ann_threshold: int = DEFAULT_ANN_THRESHOLD) -> None:
        self.dialect = dialect
        self.ann_threshold = ann_threshold
        self._indexes: dict[int, VectorIndex] = {}

    def get(self, ns_id: int, *, writing: bool = False) -> VectorIndex:
        """The namespace's index, caught up with the store; `writing`: inside a write transaction that serialises the
        namespace's intent writers, where it is exact (always caught up, never saved: it may still roll back)."""
        index = self._indexes.get(ns_id)
        version = self.dialect.data_version()
        if index is None or writing or version is None or index.seen_version != version:
            index = self._catch_up(ns_id, index)
            index.seen_version = version
        if not writing and index.uses_ann and len(index) - index.saved_size >= max(1, len(index) // 10):
            self._save(ns_id, index)
        return index

    def forget(self, ns_id: int) -> None:
        """Drop the namespace's index: its keys were rewritten, or a rolled-back transaction may have added some."""
        self._indexes.pop(ns_id, None)

    def save_grown(self) -> None:
        """Save every HNSW index that grew since it was last saved."""
        for ns_id, index in self._indexes.items():
            if index.uses_ann and len(index) > index.saved_size:
                self._save(ns_id, index)

    def _catch_up(self, ns_id: int, index: VectorIndex | None) -> VectorIndex:
        """`index` with the rows committed since, or the saved or a rebuilt index when it is missing or outdated."""
        conn = self.dialect.conn
        # the counters are read before the rows: a rewrite committed in between makes the index look older, never newer
        generation, rewrites, dim = conn.execute(
            "SELECT n.generation, COALESCE(r.count, 0), n.dim FROM namespaces n "
            "LEFT JOIN intent_rewrites r ON r.namespace_id = n.id WHERE n.id = ?",
            (ns_id,),
        ).fetchone()
        if index is None or (index.generation, index.rewrites) != (generation, rewrites):
            index = self._saved(ns_id, generation, rewrites)
            index = index or VectorIndex(dim, generation, rewrites, self.ann_threshold)
            self._indexes[ns_id] = index
        rows = conn.execute(
            "SELECT id, embedding FROM intents WHERE namespace_id = ? AND id > ? ORDER BY id", (ns_id, index.max_id)
        ).fetchall()
        if rows:
            blob = b"".join(row[1] for row in rows)
            index.extend([row[0] for row in rows], np.frombuffer(blob, dtype=np.float32).reshape(len(rows), dim))
        return index

    def _saved(self, ns_id: int, generation: int, rewrites: int) -> VectorIndex | None:
        """The saved index if it describes a prefix of the namespace's current intents (see the module docstring)."""
        conn = self.dialect.conn

        def fits(saved_generation: int, saved_rewrites: int, ids: np.ndarray) -> bool:
            if (saved_generation, saved_rewrites) != (generation, rewrites) or not len(ids):
                return False
            count = conn.execute(
                "SELECT COUNT(*) FROM intents WHERE namespace_id = ? AND id <= ?", (ns_id, int(ids[-1]))
            ).fetchone()[0]
            return count == len(ids)

        try:
            saved = self.dialect.read_index(ns_id, generation, rewrites)
            if saved is None:
                return None
            with saved:
                index = VectorIndex.load(saved, self.ann_threshold, fits)
        except (OSError, ValueError, KeyError, EOFError, RuntimeError, zipfile.BadZipFile) as exc:
            where = f"namespace {ns_id} of {self.dialect.location}"
            warnings.warn(f"ignoring the damaged vector index of {where} ({exc}); rebuilding it", stacklevel=3)
            return None
        if index is None:
            return None
        last = conn.execute("SELECT embedding FROM intents WHERE id = ?", (index.max_id,)).fetchone()
        return index if last is not None and last[0] == index.vectors[-1].tobytes() else None

    def _save(self, ns_id: int, index: VectorIndex) -> None:
        """Save it; a failed save is tried again after the next 10 % of growth, not at every search."""
        self.dialect.save_index(ns_id, index)
        index.saved_size = len(index)
