"""The saved HNSW index beside a memory store: reused when it matches the file, never served when it is stale."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ttlearn.memory.embed import HashEmbedder
from ttlearn.memory.items import NewItem
from ttlearn.memory.store import MemoryStore

SRC = str(Path(__file__).resolve().parents[2] / "src")
DIM = 32
EMBEDDER = HashEmbedder(DIM)  # vectors are given explicitly; the embedder only names the namespace
THRESHOLD = 100  # HNSW from 100 intents on, so small stores exercise it


def unit_rows(seed: int, n: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def add_rows(path: Path, vectors: np.ndarray, tag: str) -> list[int]:
    """Write one intent per vector through a store that is closed (and so saves its index); the intent ids."""
    with MemoryStore(path, ann_threshold=THRESHOLD) as store:
        ns = store.namespace("ns", EMBEDDER)
        items = [NewItem(f"{tag} {i}", "e", 0.0, vector=v) for i, v in enumerate(vectors)]
        return [a.intent_id for a in ns.add_many(items, join_threshold=1.1)]


def nearest_id(path: Path, vector: np.ndarray) -> int:
    with MemoryStore(path, ann_threshold=THRESHOLD) as store:
        ids, sims = store.namespace("ns", EMBEDDER).nearest(vector, 1)
        assert sims[0] == pytest.approx(1.0, abs=1e-5)
        return int(ids[0])


def index_file(path: Path) -> Path:
    with MemoryStore(path, ann_threshold=THRESHOLD) as store:
        return store.dialect.index_path(store.namespace("ns", EMBEDDER).id)


def test_a_saved_index_is_loaded_as_is(tmp_path: Path) -> None:
    path = tmp_path / "mem.sqlite"
    vectors = unit_rows(0, 300)
    ids = add_rows(path, vectors, "first")
    saved = index_file(path)
    before = saved.stat()
    with MemoryStore(path, ann_threshold=THRESHOLD) as store:
        ns = store.namespace("ns", EMBEDDER)
        index = store.indexes.get(ns.id)
        assert index.uses_ann and len(index) == 300
        for row in (0, 150, 299):
            assert ns.nearest(vectors[row], 1)[0][0] == ids[row]
    after = saved.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # read, not rebuilt or rewritten


def test_small_namespaces_save_nothing(tmp_path: Path) -> None:
    path = tmp_path / "mem.sqlite"
    add_rows(path, unit_rows(0, THRESHOLD - 1), "few")
    assert not index_file(path).exists()


def test_rows_written_by_a_process_killed_before_saving_are_found(tmp_path: Path) -> None:
    path = tmp_path / "mem.sqlite"
    add_rows(path, unit_rows(0, 300), "first")
    before = np.load(index_file(path))["ids"].copy()
    late = unit_rows(1, 5)
    np.save(tmp_path / "late.npy", late)
    writer = textwrap.dedent(f"""
        import os, numpy as np
        from ttlearn.memory.embed import HashEmbedder
        from ttlearn.memory.items import NewItem
        from ttlearn.memory.store import MemoryStore
        ns = MemoryStore({str(path)!r}, ann_threshold={THRESHOLD}).namespace("ns", HashEmbedder({DIM}))
        late = np.load({str(tmp_path / "late.npy")!r})
        items = [NewItem(f"late {{i}}", "e", 0.0, vector=v) for i, v in enumerate(late)]
        ids = [a.intent_id for a in ns.add_many(items, join_threshold=1.1)]
        print(*ids)
        os._exit(0)  # no close(): the index file still describes the first 300 rows
    """)
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", writer], check=True, capture_output=True, text=True, env=env)
    late_ids = [int(i) for i in out.stdout.split()]
    np.testing.assert_array_equal(np.load(index_file(path))["ids"], before)
    assert [nearest_id(path, v) for v in late] == late_ids


def test_a_rewritten_embedding_makes_the_saved_index_stale(tmp_path: Path) -> None:
    path = tmp_path / "mem.sqlite"
    ids = add_rows(path, unit_rows(0, 300), "first")
    moved = unit_rows(2, 1)[0]
    with sqlite3.connect(path) as conn:  # any writer, not only ttlearn's: the trigger counts the rewrite
        conn.execute("UPDATE intents SET embedding = ? WHERE id = ?", (moved.tobytes(), ids[42]))
    assert nearest_id(path, moved) == ids[42]


def test_a_replaced_last_row_makes_the_saved_index_stale(tmp_path: Path) -> None:
    """Delete the newest intent and insert another with the same id: same count, same largest id."""
    path = tmp_path / "mem.sqlite"
    ids = add_rows(path, unit_rows(0, 300), "first")
    other = unit_rows(3, 1)[0]
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA foreign_keys = OFF")
        row = conn.execute("SELECT namespace_id, text, created FROM intents WHERE id = ?", (ids[-1],)).fetchone()
        conn.execute("DELETE FROM intents WHERE id = ?", (ids[-1],))
        conn.execute("INSERT INTO intents VALUES (?, ?, ?, ?, ?)", (ids[-1], row[0], row[1], other.tobytes(), row[2]))
    assert nearest_id(path, other) == ids[-1]


def test_a_copy_that_diverged_is_not_served_the_original_s_index(tmp_path: Path) -> None:
    """Fork a store by copying its file, write different rows to both, then put the fork in the original's place:
    the original's saved index has the right count and largest id but the wrong last row."""
    original, fork = tmp_path / "mem.sqlite", tmp_path / "fork.sqlite"
    add_rows(original, unit_rows(0, 300), "first")
    shutil.copy(original, fork)
    add_rows(original, unit_rows(4, 10), "original")
    fork_vectors = unit_rows(5, 10)
    fork_ids = add_rows(fork, fork_vectors, "fork")
    shutil.copy(fork, original)
    assert nearest_id(original, fork_vectors[-1]) == fork_ids[-1]


def test_a_damaged_index_file_is_rebuilt_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "mem.sqlite"
    vectors = unit_rows(0, 300)
    ids = add_rows(path, vectors, "first")
    index_file(path).write_bytes(b"not an index")
    with pytest.warns(UserWarning, match="damaged vector index"):
        assert nearest_id(path, vectors[7]) == ids[7]
    assert len(np.load(index_file(path))["ids"]) == 300  # rebuilt and saved again


def test_a_row_slipped_in_below_the_newest_id_makes_the_saved_index_stale(tmp_path: Path) -> None:
    """Another namespace's row between ours is deleted and its id reused for ours: no rewrite of our rows, yet the
    saved index lacks a row older than its newest one (the row count up to that id tells)."""
    path = tmp_path / "mem.sqlite"
    vectors = unit_rows(0, 300)
    with MemoryStore(path, ann_threshold=THRESHOLD) as store:
        ours, other = store.namespace("ns", EMBEDDER), store.namespace("other", EMBEDDER)
        ours.add_many([NewItem(f"a {i}", "e", 0.0, vector=v) for i, v in enumerate(vectors[:150])], join_threshold=1.1)
        gap = other.add(NewItem("other", "e", 0.0, vector=vectors[0])).intent_id
        ours.add_many([NewItem(f"b {i}", "e", 0.0, vector=v) for i, v in enumerate(vectors[150:])], join_threshold=1.1)
        ns_id = ours.id
    slipped = unit_rows(6, 1)[0]
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM intents WHERE id = ?", (gap,))
        conn.execute("INSERT INTO intents VALUES (?, ?, 'slipped', ?, 0)", (gap, ns_id, slipped.tobytes()))
    assert nearest_id(path, slipped) == gap
