"""MemRL's store on a real PostgreSQL (the session's `postgres_server`): the same results as SQLite on a sequential
workload, no lost Q update and no duplicated intent key under concurrent writer processes, indexes that follow
other processes' writes, and the schema's migration path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("psycopg")

from ttlearn.memory.embed import HashEmbedder  # noqa: E402
from ttlearn.memory.retrieval import RetrievalConfig, commit_order, q_update, reinforce, two_phase_retrieve  # noqa: E402
from ttlearn.memory.items import NewItem  # noqa: E402
from ttlearn.memory.store import MemoryStore  # noqa: E402

SRC = str(Path(__file__).parents[2] / "src")
INTENTS = ["rock paper scissors against a cycler", "count the singers per country", "list every concert in 2014"]


def _workload(store: MemoryStore) -> tuple[list, list]:
    """A scripted run: adds (some join a key), ε-greedy retrievals with a seeded RNG, Q updates by reward."""
    ns = store.namespace("run", HashEmbedder(64))
    rng = np.random.default_rng(7)
    cfg = RetrievalConfig(k1=3, k2=2, delta=0.1, epsilon=0.3)
    shown = []
    for step in range(30):
        intent = INTENTS[step % 3] + ("" if step % 2 else f" variant {step % 5}")
        candidates, ranked = two_phase_retrieve(ns, intent, cfg, rng)
        chosen = [candidates[i].item_id for i in ranked.chosen]
        shown.append((chosen, [round(c.sim, 6) for c in candidates], ranked.explored))
        if chosen:
            reinforce(ns, chosen, 1.0 if step % 3 else -1.0, 0.3)
        ns.add(NewItem(intent, f"experience {step}", 0.0, "run-1", step), join_threshold=0.9)
    items = [(m.id, m.intent_id, m.intent, m.experience, m.q_value, m.visits, m.last_reward) for m in store.inspect("run")]
    return shown, items


def test_a_sequential_run_gives_the_same_items_and_q_as_sqlite(postgres_url: str, tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "mem.sqlite") as sqlite, MemoryStore(postgres_url) as postgres:
        on_sqlite, on_postgres = _workload(sqlite), _workload(postgres)
    assert on_postgres[0] == on_sqlite[0]  # every retrieval chose the same items
    assert len(on_postgres[1]) == 30 and any(m[5] for m in on_postgres[1])
    for pg, lite in zip(on_postgres[1], on_sqlite[1]):
        assert pg[:4] == lite[:4] and pg[5:] == lite[5:]
        assert abs(pg[4] - lite[4]) <= 1e-9


def test_the_q_update_is_one_statement_with_the_rule_exactly(postgres_url: str) -> None:
    with MemoryStore(postgres_url) as store:
        ns = store.namespace("q", HashEmbedder(16))
        first = ns.add(NewItem("a", "x", 0.5)).item_id
        assert reinforce(ns, [first], 1.0, 0.3) == {first: q_update(0.5, 1.0, 0.3)}  # 0.65, to the bit
        assert ns.update_q([first], -1.0, lambda q: q - 0.25) == {first: pytest.approx(0.4)}  # FOR UPDATE path
        with pytest.raises(ValueError, match=r"items \[999\] are not in namespace 'q'"):
            reinforce(ns, [first, 999], 1.0, 0.3)
        (item,) = store.inspect("q")
        assert (item.q_value, item.visits, item.last_reward) == (pytest.approx(0.4), 2, -1.0)  # all or nothing


_WRITER = """
import json, sys
from ttlearn.memory.embed import HashEmbedder
from ttlearn.memory.retrieval import reinforce
from ttlearn.memory.items import NewItem
from ttlearn.memory.store import MemoryStore
url, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ns = MemoryStore(url).namespace("shared", HashEmbedder(32))
answers = []
for n in range(count):
    ids = [1 + (worker + n) % 4, 1 + (worker + n + 1) % 4]
    reward = (-1.0, 0.5, 1.0)[(worker * 7 + n) % 3]
    answers.append([reward, reinforce(ns, ids, reward, 0.3)])
    if n % 10 == 0:
        ns.add(NewItem(f"shared intent {n % 3}", f"w{worker} n{n}", 0.0), join_threshold=0.9)
print(json.dumps(answers))
"""


def test_concurrent_writer_processes_lose_no_update_and_duplicate_no_key(postgres_url: str) -> None:
    with MemoryStore(postgres_url) as store:
        ns = store.namespace("shared", HashEmbedder(32))
        for i in range(4):
            ns.add(NewItem(f"seed item {i}", f"seed {i}", 0.0), join_threshold=2.0)
    env = {**os.environ, "PYTHONPATH": SRC}
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, postgres_url, str(w), "60"], stdout=subprocess.PIPE, env=env)
        for w in range(4)
    ]
    answers = [json.loads(w.communicate(timeout=240)[0]) for w in writers]
    assert all(w.returncode == 0 for w in writers)
    with MemoryStore(postgres_url) as store:
        items = {m.id: m for m in store.inspect("shared")}
        for item_id in range(1, 5):
            updates = [(r, 0.3, q[str(item_id)]) for a in answers for r, q in a if str(item_id) in q]
            assert items[item_id].visits == len(updates) == 120  # 4 writers × 60 feedbacks × 2 of the 4 items
            order = commit_order(0.0, updates)
            assert order is not None, f"item {item_id}: no order explains the answers (a lost update)"
            assert items[item_id].q_value == updates[order[-1]][2]
        # 4 writers × 6 adds of 3 distinct intent texts: linearizable joins leave exactly 3 new keys
        assert store.stats("shared")["intents"] == 4 + 3
        assert len(items) == 4 + 24


def test_a_process_index_follows_other_processes_writes(postgres_url: str) -> None:
    cfg = RetrievalConfig(k1=5, k2=5, delta=0.5, epsilon=0.0)
    with MemoryStore(postgres_url) as reader, MemoryStore(postgres_url) as writer:
        mine = reader.namespace("n", HashEmbedder(32))
        assert two_phase_retrieve(mine, "sing a song", cfg, np.random.default_rng(0))[0] == []
        theirs = writer.namespace("n", HashEmbedder(32))
        theirs.add(NewItem("sing a song", "from the other process", 0.0))
        (seen,) = two_phase_retrieve(mine, "sing a song", cfg, np.random.default_rng(0))[0]  # no wait, no refresh
        assert seen.experience == "from the other process"
        reinforce(theirs, [seen.item_id], 1.0, 0.5)
        (fresh,) = two_phase_retrieve(mine, "sing a song", cfg, np.random.default_rng(0))[0]
        assert (fresh.q_value, fresh.visits) == (0.5, 1)  # phase B reads Q from the table
        snapshot = writer.export_namespace("n")
        snapshot["intents"][0]["text"] = "replaced"
        snapshot["items"][0]["experience"] = "restored"
        writer.import_namespace("n", snapshot)  # deletes and rewrites keys: the reader rebuilds
        (after,) = two_phase_retrieve(mine, "sing a song", cfg, np.random.default_rng(0))[0]
        assert after.experience == "restored"


def test_the_schema_migrates_from_an_older_version_and_refuses_a_newer(postgres_url: str) -> None:
    import psycopg

    from ttlearn.memory import postgres

    with psycopg.connect(postgres_url, autocommit=True) as pg:
        with pg.transaction():
            postgres.migrate(pg, "test", target=1)
        assert not pg.execute("SELECT to_regclass('service_keys')").fetchone()[0]
    with MemoryStore(postgres_url) as store:
        assert store.integrity_check() == "ok"
        store.namespace("kept", HashEmbedder(8)).add(NewItem("a", "b", 0.0, "r", 2, unit=5))
        assert [(m.unit, m.episode) for m in store.inspect("kept")] == [(5, 2)]  # version 3's column
    with psycopg.connect(postgres_url, autocommit=True) as pg:
        assert pg.execute("SELECT to_regclass('service_keys')").fetchone()[0] == "service_keys"
        pg.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(ValueError, match="schema version 99; this ttlearn reads up to 3"):
        MemoryStore(postgres_url)


def test_an_unreachable_database_is_one_clear_error() -> None:
    with pytest.raises(ConnectionError, match=r"cannot reach the PostgreSQL memory store postgresql://u:\*\*\*@"):
        MemoryStore("postgresql://u:secret@127.0.0.1:1/none", timeout_s=2)


def test_commit_order_reconstructs_the_fold_and_spots_a_lost_update() -> None:
    # from 0 with α = 0.5: +1 → 0.5, then −1 → −0.25; answered in the other order
    assert commit_order(0.0, [(-1.0, 0.5, -0.25), (1.0, 0.5, 0.5)]) == [1, 0]
    # two updates computed from the same Q = 0 (a lost update): 0.5 and −0.5 cannot both follow 0
    assert commit_order(0.0, [(1.0, 0.5, 0.5), (-1.0, 0.5, -0.5)]) is None


def test_a_real_run_store_goes_sqlite_to_postgresql_and_back_losslessly(postgres_url: str, tmp_path: Path) -> None:
    """`ttlearn memory export` / `import` on the committed Spider run's store: every item, Q, visit count,
    provenance, vector and retrieval log survives SQLite → PostgreSQL → SQLite, id for id."""
    import gzip
    import shutil

    from typer.testing import CliRunner

    from ttlearn.cli import app

    source = tmp_path / "run.sqlite"
    with gzip.open(Path(__file__).parents[2] / "results/sql-memrl-concert_singer-e2/memrl.sqlite.gz") as packed:
        with open(source, "wb") as unpacked:
            shutil.copyfileobj(packed, unpacked)
    runner = CliRunner()

    def cli(*args: str) -> None:
        result = runner.invoke(app, list(args))
        assert result.exit_code == 0, result.output

    cli("memory", "export", str(source), "--out", str(tmp_path / "a.json"))
    cli("memory", "import", postgres_url, str(tmp_path / "a.json"))
    cli("memory", "export", postgres_url, "--out", str(tmp_path / "b.json"))
    cli("memory", "import", str(tmp_path / "back.sqlite"), str(tmp_path / "b.json"))
    cli("memory", "export", str(tmp_path / "back.sqlite"), "--out", str(tmp_path / "c.json"))
    a, b, c = (json.loads((tmp_path / f"{n}.json").read_text()) for n in "abc")
    (namespace,) = a["namespaces"]
    assert len(namespace["items"]) > 10 and len(namespace["retrievals"]) > 10
    assert any(item["visits"] for item in namespace["items"])
    assert a == b == c
    again = runner.invoke(app, ["memory", "import", postgres_url, str(tmp_path / "a.json")])
    assert again.exit_code != 0 and "already has namespaces ['default']" in again.output
