"""The item operations of one namespace of a memory store: add items under intent keys, find the nearest keys, read
their items, update Q, log retrievals. `Namespace` runs them through the store's dialect (`memory.dialect`) and
vector indexes (`memory.index_cache`); `MemoryStore.namespace` hands them out.

Embeddings are computed before the write lock is taken; inside it the namespace's intent writers are serialised and
the index is caught up, so concurrent writers of near-duplicates end as if one had written after the other.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ttlearn.memory.dialect import Dialect
from ttlearn.memory.embed import Embedder
from ttlearn.memory.forgetting import Forgotten, count_added, forget
from ttlearn.memory.index_cache import IndexCache
from ttlearn.memory.vector_index import VectorIndex

DEFAULT_JOIN_THRESHOLD = 0.90
MAX_COUNT = 2**53
"""The largest visit count and episode number a store holds: exact in every JSON reader, far below SQLite's 2^63,
so `visits + 1` can never overflow. Counters saturate here and imports refuse more."""
_SATURATED_VISIT = f"CASE WHEN visits < {MAX_COUNT} THEN visits + 1 ELSE visits END"
"""SQL (SQLite and PostgreSQL alike): one more visit, saturating at MAX_COUNT."""


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
    key_id: str | None = None
    """Provenance: the memory service key that wrote it (None: written by a process that opened the store)."""
    exchange: str | None = None
    """Provenance: the learning proxy's exchange whose feedback wrote it, or one a service client names."""


Feedback = tuple[Sequence[int], float, Callable[[np.ndarray], np.ndarray]]
"""One task's Q update: the items retrieved for it, its reward, and the update (`Namespace.update_q`)."""


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
    key_id: str | None = None
    """The memory service key that wrote it; None when written otherwise or before keys were recorded."""
    exchange: str | None = None
    """The learning proxy's exchange whose feedback wrote it; None when written otherwise."""
    touched: float | None = None
    """When it was written or its Q last updated: the age forgetting measures (`memory.forgetting`)."""


@dataclass(frozen=True)
class Written:
    """What one write transaction did (`Namespace.write`)."""

    q: list[dict[int, float]]
    """Per Q update, the new Q by item id."""
    added: list[Added]
    forgotten: Forgotten


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


class Namespace:
    """Read/write access to one namespace with the embedder that owns it."""

    def __init__(self, dialect: Dialect, indexes: IndexCache, ns_id: int, name: str, embedder: Embedder) -> None:
        self.dialect = dialect
        self.indexes = indexes
        self.id = ns_id
        self.name = name
        self.embedder = embedder

    def __len__(self) -> int:
        return int(
            self.dialect.conn.execute("SELECT COUNT(*) FROM items WHERE namespace_id = ?", (self.id,)).fetchone()[0]
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.embed(list(texts))

    def add(
        self, item: NewItem, *, join_threshold: float = DEFAULT_JOIN_THRESHOLD, admit: Callable[[], None] | None = None
    ) -> Added:
        return self.add_many([item], join_threshold=join_threshold, admit=admit)[0]

    def add_many(
        self,
        items: Sequence[NewItem],
        *,
        join_threshold: float = DEFAULT_JOIN_THRESHOLD,
        admit: Callable[[], None] | None = None,
    ) -> list[Added]:
        """Write items in one transaction (`write`)."""
        return self.write(items=items, join_threshold=join_threshold, admit=admit).added

    def update_q(
        self, item_ids: Iterable[int], reward: float, new_q: Callable[[np.ndarray], np.ndarray]
    ) -> dict[int, float]:
        """Atomically set Q ← new_q(Q) for the given items of this namespace, count a visit, record the reward and
        touch them; returns the new Q by id. An `AffineUpdate` (MemRL's rule) is one UPDATE statement, so concurrent
        updaters, in any number of processes, never lose each other's writes; another function reads the rows locked
        (SQLite: under the file's write lock; PostgreSQL: FOR UPDATE) and writes them back in the same transaction."""
        wanted = list(item_ids)
        return self.write(feedback=[(wanted, reward, new_q)]).q[0] if wanted else {}

    def write(
        self,
        *,
        feedback: Sequence[Feedback] = (),
        items: Sequence[NewItem] = (),
        join_threshold: float = DEFAULT_JOIN_THRESHOLD,
        admit: Callable[[], None] | None = None,
        skip_missing: bool = False,
    ) -> Written:
        """One transaction, all or nothing: the Q updates `feedback` in order (`update_q`; an id not in this
        namespace refuses the whole write, or, with `skip_missing`, is skipped: an item forgotten since it was
        shown), then `items` added, then, when items were added, the namespace's forgetting policy applied
        (`memory.forgetting`).

        Each item joins the most similar intent key if its similarity ≥ `join_threshold`, else creates a new key
        (so a batch of near-duplicates shares one key). `admit` runs inside the transaction once the namespace's
        writers are serialised, before anything is written, reading through the store's connection: what it reads
        no other writer changes until the commit, so a limit it checks holds across processes (a storage quota);
        raising refuses the write."""
        updates = [(sorted({int(i) for i in ids}), float(reward), rule) for ids, reward, rule in feedback]
        missing = [i for i, item in enumerate(items) if item.vector is None]
        computed = dict(zip(missing, self.embed([items[i].intent for i in missing]))) if missing else {}
        vectors = [
            computed[i] if item.vector is None else _unit_vector(item.vector, self.embedder.dim)
            for i, item in enumerate(items)
        ]
        matrix = np.stack(vectors) if vectors else np.zeros((0, self.embedder.dim), dtype=np.float32)
        if items:
            self.indexes.get(self.id)  # load or build it before taking the write lock; inside, it only catches up

        placing = False

        def write(conn: Any) -> Written:
            nonlocal placing
            if items or admit is not None:
                self.dialect.lock_intents(conn, self.id)
            if admit is not None:
                admit()
            now = time.time()
            q = [self._update_q(conn, wanted, reward, rule, now, skip_missing) for wanted, reward, rule in updates]
            if not items:
                return Written(q, [], Forgotten())

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
                        "unit, key_id, exchange, touched) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (self.id, intent_id, item.experience, float(item.q_value), item.run_id, item.episode, now,
                         item.unit, item.key_id, item.exchange, now),
                    ).lastrowid
                )  # fmt: skip

            index = self.indexes.get(self.id, writing=True)
            placing = True
            added = place_items(index, items, matrix, join_threshold, new_intent, new_item)
            count_added(conn, self.id, len(added))
            return Written(q, added, forget(conn, self.id, now))

        try:
            return self.dialect.write(write)
        except BaseException:
            if placing:
                self.indexes.forget(self.id)  # it may hold keys of the rolled-back transaction
            raise

    def _update_q(
        self,
        conn: Any,
        wanted: list[int],
        reward: float,
        new_q: Callable[[np.ndarray], np.ndarray],
        now: float,
        skip_missing: bool,
    ) -> dict[int, float]:
        """Inside a write transaction: one task's Q update (`update_q`); a ValueError names ids not in this
        namespace unless `skip_missing` (raising rolls the transaction back: all or nothing)."""
        if not wanted:
            return {}
        marks = ",".join("?" * len(wanted))
        if isinstance(new_q, AffineUpdate):
            rows = conn.execute(
                f"UPDATE items SET q_value = ? * q_value + ?, visits = {_SATURATED_VISIT}, last_reward = ?, "
                f"touched = ? WHERE namespace_id = ? AND id IN ({marks}) RETURNING id, q_value",
                (new_q.keep, new_q.add, reward, now, self.id, *wanted),
            ).fetchall()
        else:
            rows = conn.execute(
                f"SELECT id, q_value FROM items WHERE namespace_id = ? AND id IN ({marks}){self.dialect.row_lock}",
                (self.id, *wanted),
            ).fetchall()
            q_new = np.asarray(new_q(np.array([row[1] for row in rows], dtype=np.float64)), dtype=np.float64)
            rows = [(row[0], float(q)) for row, q in zip(rows, q_new)]
            conn.executemany(
                f"UPDATE items SET q_value = ?, visits = {_SATURATED_VISIT}, last_reward = ?, touched = ? WHERE id = ?",
                [(q, reward, now, i) for i, q in rows],
            )
        if len(rows) != len(wanted) and not skip_missing:
            unknown = sorted(set(wanted) - {row[0] for row in rows})
            raise ValueError(f"items {unknown} are not in namespace {self.name!r}")
        return {int(i): float(q) for i, q in sorted(rows)}

    def nearest(self, query: str | np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k intent keys most similar to the query (text or unit vector): ids and cosine similarities."""
        vector = self.embed([query])[0] if isinstance(query, str) else _unit_vector(query, self.embedder.dim)
        return self.indexes.get(self.id).nearest(vector, k)

    def items_of(self, intent_ids: Sequence[int], sims: Sequence[float]) -> list[Candidate]:
        """Every item under the given intent keys, each with its key's similarity; ordered as the keys, then by id."""
        if not len(intent_ids):
            return []
        sim_of = {int(i): float(s) for i, s in zip(intent_ids, sims)}
        marks = ",".join("?" * len(sim_of))
        rows = self.dialect.conn.execute(  # `+namespace_id`: keep the planner on the intent index
            f"SELECT id, intent_id, q_value, visits, experience FROM items "
            f"WHERE intent_id IN ({marks}) AND +namespace_id = ?",
            (*sim_of, self.id),
        ).fetchall()
        rank = {intent_id: r for r, intent_id in enumerate(sim_of)}
        rows.sort(key=lambda row: (rank[row[1]], row[0]))
        return [Candidate(row[0], row[1], sim_of[row[1]], row[2], row[3], row[4]) for row in rows]

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
            self.dialect.write(
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
            self.dialect.write(
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


def _unit_vector(vector: np.ndarray, dim: int) -> np.ndarray:
    """`vector` as a `dim`-d float32 unit vector (a zero vector stays zero); a ValueError for another shape."""
    vector = np.asarray(vector, dtype=np.float32).reshape(-1)
    if vector.shape != (dim,):
        raise ValueError(f"expected a {dim}-d vector, got shape {vector.shape}")
    norm = math.sqrt(float(vector @ vector))
    return vector / norm if norm else vector
