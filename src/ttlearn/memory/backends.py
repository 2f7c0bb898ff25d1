"""Where MemRL's memories live, behind one protocol: a SQLite store file this process opens (`LocalMemories`), a
PostgreSQL database that many processes share (`SharedStoreMemories`), or a namespace of a `ttlearn serve` memory
service (`memory.remote.RemoteMemories`).

The `memrl`, `memp` and `rag` memories hold one `MemoryBackend` and never ask which: retrieval, the Q updates and
new items of a mini-batch (one `apply`), and snapshots go through these six methods, so a third place (another
database, another service) is one class.
"""

from __future__ import annotations

import os
import tempfile
from abc import abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ttlearn.memory.base import without_password
from ttlearn.memory.embed import make_embedder
from ttlearn.memory.items import Candidate, Namespace, NewItem
from ttlearn.memory.retrieval import RetrievalConfig, q_update_rule, two_phase_retrieve
from ttlearn.memory.store import MemoryStore, is_database_url
from ttlearn.untrusted import check_store_files

TaskReward = tuple[Sequence[int], float]
"""A finished task's feedback: the ids of the items retrieved for it, and its reward."""


class MemoryBackend(Protocol):
    """The place a Q-valued episodic memory keeps its items. Implementations subclass it, so a missing method is an
    error when the class is instantiated, not when a run first needs it."""

    @abstractmethod
    def bind_run(self, store: Path) -> None:
        """The run's own store file (`RunDir.memrl_store`), for a place that defaults to one."""

    @abstractmethod
    def retrieve(
        self, query: str, cfg: RetrievalConfig, rng: np.random.Generator, run_id: str | None
    ) -> list[Candidate]:
        """MemRL's two-phase retrieval with `cfg`; the chosen items, best first."""

    @abstractmethod
    def apply(
        self, feedback: Sequence[TaskReward], alpha: float, items: Sequence[NewItem], join_threshold: float
    ) -> None:
        """Finished tasks' learning, all or nothing: the Q update (`retrieval.q_update_rule` with `alpha`) of each
        task's retrieved items still in the memory by its reward, in order, then the new items (each joining an
        intent key at least `join_threshold` similar)."""

    @abstractmethod
    def finish_episode(self, attempt: int, unit: int | None) -> None:
        """The episode whose retrievals came since the last call has ended: attempt `attempt` (`Episode.index`) of
        the run's unit `unit` (its task or game; None when the caller does not say)."""

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """JSON-ready: the memories themselves, or where they live when they are shared."""

    @abstractmethod
    def load(self, state: dict[str, Any]) -> dict[int, int]:
        """Restore `state()`; returns the new id of every item id whose id changed."""


def store_memories(store: str | None, namespace: str, embedder: str) -> LocalMemories:
    """The memories in `store`: a SQLite file (None: one in the run directory), or a postgresql:// database."""
    if store is not None and is_database_url(store):
        return SharedStoreMemories(store, namespace, embedder)
    return LocalMemories(store, namespace, embedder)


class LocalMemories(MemoryBackend):
    """MemRL's memories in a store that this process opens: its snapshots carry the memories themselves."""

    def __init__(self, path: str | None, namespace: str, embedder: str) -> None:
        self.path = path
        self.namespace = namespace
        self.embedder = embedder
        self.log_ids: list[int] = []
        """Retrievals logged during the unfinished episode; they learn its index when it ends."""
        self._store: MemoryStore | None = None
        self._ns: Namespace | None = None
        self._run_store = False
        """Whether the store is the run directory's own file: it must then be a file of its own (no link)."""

    def bind_run(self, store: Path) -> None:
        if self.path is None:
            self.path = str(store)
            self._run_store = True

    @property
    def store(self) -> MemoryStore:
        if self._store is None:
            if self.path is None:
                handle, self.path = tempfile.mkstemp(prefix="ttlearn-memrl-", suffix=".sqlite")
                os.close(handle)  # an empty file is an empty SQLite database
            if self._run_store:  # a run directory may come from anyone: never write through a link it holds
                check_store_files(Path(self.path))
            self._store = MemoryStore(self.path)
        return self._store

    @property
    def ns(self) -> Namespace:
        if self._ns is None:
            self._ns = self.store.namespace(self.namespace, make_embedder(self.embedder))
        return self._ns

    def retrieve(
        self, query: str, cfg: RetrievalConfig, rng: np.random.Generator, run_id: str | None
    ) -> list[Candidate]:
        """The two-phase retrieval, logged with every candidate's similarity, Q and score (`ttlearn memory explain`)."""
        candidates, ranked = two_phase_retrieve(self.ns, query, cfg, rng)
        chosen = [candidates[i].item_id for i in ranked.chosen]
        log = [
            {"id": c.item_id, "sim": round(c.sim, 4), "q": round(c.q_value, 4), "score": s}
            for c, s in zip(candidates, ranked.scores)
        ]
        self.log_ids.append(self.ns.log_retrieval(query, log, chosen, explored=ranked.explored, run_id=run_id))
        return [candidates[i] for i in ranked.chosen]

    def apply(
        self, feedback: Sequence[TaskReward], alpha: float, items: Sequence[NewItem], join_threshold: float
    ) -> None:
        """One transaction of the store (`Namespace.write`); retrieved items forgotten since (another process's write
        evicted them) are skipped."""
        updates = [(ids, reward, q_update_rule(reward, alpha)) for ids, reward in feedback if ids]
        self.ns.write(feedback=updates, items=items, join_threshold=join_threshold, skip_missing=True)

    def finish_episode(self, attempt: int, unit: int | None) -> None:
        self.ns.assign_episode(self.log_ids, attempt, unit)
        self.log_ids = []

    def state(self) -> dict[str, Any]:
        return {"memories": self.store.export_namespace(self.ns.name), "log_ids": list(self.log_ids)}

    def load(self, state: dict[str, Any]) -> dict[int, int]:
        """Replace this namespace's memories by the state's; returns the new id of each of the state's item ids."""
        if "memories" not in state:
            source = state.get("url") or state.get("store")
            raise ValueError(
                f"this MemRL state holds no memories, only a pointer to {source!r} (a memory service, or a store file "
                "as older snapshots had); a local memory cannot load it: give it the same url= or start afresh"
            )
        new_ids = self.store.import_namespace(self.ns.name, state["memories"])
        self.log_ids = list(state["log_ids"])
        return new_ids


class SharedStoreMemories(LocalMemories):
    """MemRL's memories in a PostgreSQL database that other workers and services learn into at the same time. As on
    a memory service, they are shared on purpose: a snapshot points at the database (never its password), and
    loading one restores only the pending retrievals, never overwriting what other workers learnt."""

    def state(self) -> dict[str, Any]:
        return {"store": without_password(str(self.path)), "namespace": self.namespace, "log_ids": list(self.log_ids)}

    def load(self, state: dict[str, Any]) -> dict[int, int]:
        if "memories" in state:
            raise ValueError(
                "this MemRL state holds the memories of a store file; a memory in a shared PostgreSQL database never "
                "overwrites them: copy them explicitly with `ttlearn memory export` and `ttlearn memory import`"
            )
        self.log_ids = list(state.get("log_ids", []))
        return {}
