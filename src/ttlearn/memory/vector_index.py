"""The vector index of one namespace: unit vectors by row and their intent ids, searched exactly (numpy dot
products) below a size threshold and through a usearch HNSW graph above it (built single-threaded, so it is
deterministic; its hits are re-scored exactly). It can be written to and loaded from one `.npz` file; the store decides
whether a saved file still describes its rows (see `ttlearn.memory.index_cache`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np


class VectorIndex:
    """Unit vectors by row, their intent ids, and (above `ann_threshold` rows) an HNSW graph over the rows.

    `generation` and `rewrites` are the namespace's counters the rows were read under; `saved_size` is how many rows
    it held when it was last saved or loaded (0: never), so the store knows when saving again is worth it.
    """

    def __init__(self, dim: int, generation: int, rewrites: int, ann_threshold: int) -> None:
        self.dim = dim
        self.generation = generation
        self.rewrites = rewrites
        self.ann_threshold = ann_threshold
        self.seen_version: int | None = None
        self.saved_size = 0
        self._size = 0
        self._ids = np.zeros(16, dtype=np.int64)
        self._vectors = np.zeros((16, dim), dtype=np.float32)
        self._ann: Any = None

    def __len__(self) -> int:
        return self._size

    @property
    def ids(self) -> np.ndarray:
        return self._ids[: self._size]

    @property
    def vectors(self) -> np.ndarray:
        return self._vectors[: self._size]

    @property
    def max_id(self) -> int:
        return int(self._ids[self._size - 1]) if self._size else 0

    @property
    def uses_ann(self) -> bool:
        return self._ann is not None

    def extend(self, ids: Sequence[int], vectors: np.ndarray) -> None:
        """Append rows; storage doubles when full, so n single appends cost O(n) copies, not O(n²)."""
        count = len(ids)
        if not count:
            return
        start, end = self._size, self._size + count
        if end > len(self._ids):
            capacity = max(end, 2 * len(self._ids))
            self._ids = np.resize(self._ids, capacity)
            grown = np.zeros((capacity, self.dim), dtype=np.float32)
            grown[:start] = self._vectors[:start]
            self._vectors = grown
        self._ids[start:end] = ids
        self._vectors[start:end] = np.asarray(vectors, dtype=np.float32).reshape(count, self.dim)
        self._size = end
        if self._ann is not None:
            self._ann.add(np.arange(start, end), self._vectors[start:end], threads=1)
        elif end >= self.ann_threshold:
            self._ann = _new_ann(self.dim)
            self._ann.add(np.arange(end), self.vectors, threads=1)

    def nearest(self, vector: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k intent ids most similar to `vector`, with exact cosine similarities, best first."""
        k = min(k, len(self.ids))
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if self._ann is not None:
            rows = np.asarray(self._ann.search(vector, k).keys, dtype=np.int64)
            sims = self.vectors[rows] @ vector
        else:
            all_sims = self.vectors @ vector
            n = len(all_sims)
            rows = np.argpartition(all_sims, n - k)[n - k :] if k < n else np.arange(n)
            sims = all_sims[rows]
        order = np.lexsort((rows, -sims))  # best first; ties by insertion order, so results are reproducible
        return self.ids[rows[order]], sims[order]

    def best_matches(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each row of `vectors`, the most similar indexed intent id and its exact cosine (−inf when empty)."""
        count = len(vectors)
        if not self._size:
            return np.zeros(count, dtype=np.int64), np.full(count, -np.inf, dtype=np.float32)
        if self._ann is not None:
            rows = np.asarray(self._ann.search(vectors, 1, threads=1).keys, dtype=np.int64).reshape(count, -1)[:, 0]
        else:  # blocks of 256 queries bound the similarity matrix to 256 × n floats
            rows = np.concatenate(
                [(self.vectors @ vectors[lo : lo + 256].T).argmax(axis=0) for lo in range(0, count, 256)]
            )
        return self._ids[rows], np.einsum("ij,ij->i", self._vectors[rows], vectors)

    def write(self, file: BinaryIO) -> None:
        """Write rows, ids, graph and counters to `file` (an `.npz`)."""
        np.savez(
            file,
            counters=np.array([self.generation, self.rewrites], dtype=np.int64),
            ids=self.ids,
            vectors=self.vectors,
            graph=np.frombuffer(self._ann.save(), dtype=np.uint8),
        )

    def save(self, path: Path) -> None:
        """`write` to `path` atomically (a temporary file renamed over it)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
        try:
            with open(temporary, "wb") as file:
                self.write(file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)

    @classmethod
    def load(
        cls, file: BinaryIO, ann_threshold: int, fits: Callable[[int, int, np.ndarray], bool]
    ) -> VectorIndex | None:
        """The index `write` wrote to `file` if `fits(generation, rewrites, ids)` says it still describes the store
        (the graph and rows are read only then), else None. Raises OSError/ValueError for a damaged file."""
        with np.load(file, allow_pickle=False) as saved:
            generation, rewrites = (int(c) for c in saved["counters"])
            ids = saved["ids"]
            if not fits(generation, rewrites, ids):
                return None
            vectors, graph = saved["vectors"], saved["graph"]
        index = cls(vectors.shape[1], generation, rewrites, ann_threshold)
        index._ids, index._size = ids.astype(np.int64, copy=False), len(ids)
        index._vectors = vectors.astype(np.float32, copy=False)
        index._ann = _new_ann(index.dim)
        index._ann.load(graph)
        if len(index._ann) != len(ids):
            raise ValueError(f"the graph holds {len(index._ann)} rows, the ids {len(ids)}")
        index.saved_size = len(ids)
        return index


ANN_CONNECTIVITY = 16
ANN_EXPANSION_ADD = 128
ANN_EXPANSION_SEARCH = 128
"""HNSW settings: recall@5 0.998 against exact search at 100k MiniLM embeddings of varied texts, where the old
16 / 64 / 64 already reached 0.998 at 40k (benchmarks/memory_store.py; the table in docs/scale.md)."""


def _new_ann(dim: int) -> Any:
    from usearch.index import Index

    return Index(
        ndim=dim,
        metric="ip",
        dtype="f32",
        connectivity=ANN_CONNECTIVITY,
        expansion_add=ANN_EXPANSION_ADD,
        expansion_search=ANN_EXPANSION_SEARCH,
    )
