"""MemRL's store on a real PostgreSQL (the session's `postgres_server`): the same results as SQLite on a sequential
workload, no lost Q update and no duplicated intent key under concurrent writer processes, indexes that follow
other processes' writes, and the schema's migration path."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import pytest
from local_postgres import free_port

pytest.importorskip("psycopg")

from ttlearn.errors import StoreUnreachable  # noqa: E402
from ttlearn.memory.embed import HashEmbedder  # noqa: E402
from ttlearn.memory.items import MemoryItem, NewItem  # noqa: E402
from ttlearn.memory.retrieval import RetrievalConfig, commit_order, q_update, reinforce, two_phase_retrieve  # noqa: E402
from ttlearn.memory.store import MemoryStore  # noqa: E402

SRC = str(Path(__file__).parents[2] / "src")
INTENTS = ["rock paper scissors against a cycler", "count the singers per country", "list every concert in 2014"]


def _seed(url: str, namespace: str = "shared") -> None:
    """Items 1–4 of `namespace`, each under its own key: what the writer processes update."""
    with MemoryStore(url) as store:
        ns = store.namespace(namespace, HashEmbedder(32))
        for i in range(4):
            ns.add(NewItem(f"seed item {i}", f"seed {i}", 0.0), join_threshold=2.0)


def _start_writers(url: str, count: int, feedbacks: int, gates: Path | None = None) -> list[subprocess.Popen]:
    """`count` writer processes; with `gates`, each stops at its first, a third and two thirds of its feedbacks until
    the test lets it on (`_open_gate`), so a restart lands mid-run however loaded the machine is."""
    env = {**os.environ, "PYTHONPATH": SRC}
    extra = [str(gates)] if gates else []
    return [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, url, str(w), str(feedbacks), *extra], stdout=subprocess.PIPE, env=env
        )
        for w in range(count)
    ]


def _open_gate(gates: Path, gate: int, writers: list[subprocess.Popen], timeout_s: float = 180) -> None:
    """Wait until every writer waits at `gate`, then let them all on."""
    deadline = time.monotonic() + timeout_s
    while sum((gates / f"w{w}-at-{gate}").exists() for w in range(len(writers))) < len(writers):
        assert all(w.poll() is None for w in writers), "a writer ended before reaching its gate"
        assert time.monotonic() < deadline, f"the writers did not all reach gate {gate} in {timeout_s} s"
        time.sleep(0.02)
    (gates / f"open-{gate}").touch()


def _check_every_update_once(store: MemoryStore, answers: list[list]) -> dict[int, MemoryItem]:
    """Each seeded item's visits equal the feedbacks its writers were answered, and some commit order explains
    every answer and the final Q (a lost or repeated update leaves none)."""
    items = {m.id: m for m in store.inspect("shared")}
    for item_id in range(1, 5):
        updates = [(r, 0.3, q[str(item_id)]) for a in answers for r, q in a if str(item_id) in q]
        assert items[item_id].visits == len(updates)
        order = commit_order(0.0, updates)
        assert order is not None, f"item {item_id}: no order explains the answers (a lost or repeated update)"
        assert items[item_id].q_value == updates[order[-1]][2]
    return items


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
    items = [
        (m.id, m.intent_id, m.intent, m.experience, m.q_value, m.visits, m.last_reward) for m in store.inspect("run")
    ]
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
import pathlib, time
url, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
gates = pathlib.Path(sys.argv[4]) if len(sys.argv) > 4 else None
ns = MemoryStore(url).namespace("shared", HashEmbedder(32))
answers = []
for n in range(count):
    if gates and n in (0, count // 3, 2 * count // 3):
        gate = (0, count // 3, 2 * count // 3).index(n)
        (gates / f"w{worker}-at-{gate}").touch()
        while not (gates / f"open-{gate}").exists():
            time.sleep(0.01)
    ids = [1 + (worker + n) % 4, 1 + (worker + n + 1) % 4]
    reward = (-1.0, 0.5, 1.0)[(worker * 7 + n) % 3]
    answers.append([reward, reinforce(ns, ids, reward, 0.3)])
    if n % 10 == 0:
        ns.add(NewItem(f"shared intent {n % 3}", f"w{worker} n{n}", 0.0), join_threshold=0.9)
print(json.dumps(answers))
"""


def test_concurrent_writer_processes_lose_no_update_and_duplicate_no_key(postgres_url: str) -> None:
    _seed(postgres_url)
    writers = _start_writers(postgres_url, 4, 60)
    answers = [json.loads(w.communicate(timeout=240)[0]) for w in writers]
    assert all(w.returncode == 0 for w in writers)
    with MemoryStore(postgres_url) as store:
        items = _check_every_update_once(store, answers)
        assert [items[i].visits for i in range(1, 5)] == [120] * 4  # 4 writers × 60 feedbacks × 2 of the 4 items
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
        assert pg.execute("SELECT to_regclass('vector_index_parts')").fetchone()[0] == "vector_index_parts"
        pg.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(ValueError, match="schema version 99; this ttlearn reads up to 5"):
        MemoryStore(postgres_url)


def test_a_version_4_database_gains_provenance_and_forgetting(postgres_url: str) -> None:
    """Items written before keys, exchanges and forgetting (schema 4) keep their rows: their creation time stands
    in for when they were touched, and the namespace takes a policy."""
    import psycopg

    from ttlearn.memory import postgres
    from ttlearn.memory.forgetting import Policy

    with psycopg.connect(postgres_url, autocommit=True) as pg:
        with pg.transaction():
            postgres.migrate(pg, "test", target=4)
        (ns_id,) = pg.execute("INSERT INTO namespaces (name, embedder, dim, created) VALUES ('old', 'hash8', 8, 1) "
                              "RETURNING id").fetchone()  # fmt: skip
        (intent_id,) = pg.execute(
            "INSERT INTO intents (namespace_id, text, embedding, created) VALUES (%s, 'a', %s, 1) RETURNING id",
            (ns_id, np.eye(8, dtype=np.float32)[0].tobytes()),
        ).fetchone()
        pg.execute(
            "INSERT INTO items (namespace_id, intent_id, experience, q_value, created) VALUES (%s, %s, 'b', 0, 12.5)",
            (ns_id, intent_id),
        )
    with MemoryStore(postgres_url) as store:
        (item,) = store.inspect("old")
        assert (item.key_id, item.exchange, item.created, item.touched) == (None, None, 12.5, 12.5)
        assert store.dialect.conn.execute("SELECT item_count FROM namespaces").fetchone() == (1,)  # counted once
        store.set_policy("old", Policy(ttl_s=60.0))
        assert store.prune("old").expired == 1  # untouched since 1970


UNREACHABLE = ("postgresql://u:secret@127.0.0.1:{port}/none", "postgresql://u@127.0.0.1:{port}/none?password=secret")
"""A store where no server listens, its password in the user part or in the query (libpq reads both)."""


def _one_error_line(output: str, port: int) -> None:
    """What a command prints for an unreachable store: one line that names it without its password, no traceback."""
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in output and "secret" not in output, output
    assert errors[0].startswith(f"error: cannot reach the PostgreSQL memory store postgresql://u@127.0.0.1:{port}/none")
    assert "check that its server is running" in errors[0]


@pytest.mark.parametrize("url", UNREACHABLE)
def test_run_on_an_unreachable_store_prints_one_line_without_the_password(url: str, tmp_path: Path, monkeypatch):
    from typer.testing import CliRunner

    from ttlearn.cli import app

    monkeypatch.delenv("PGPASSWORD", raising=False)  # `run` moves the URL's password there
    port = free_port()
    played = CliRunner().invoke(
        app,
        ["run", "rps", "--llm", "scripted:random", "--memory", "memrl", "-m", f"store={url.format(port=port)}",
         "-m", "embedder=hash", "--games", "1", "--rounds", "2", "--out", str(tmp_path / "run")],
        env={"COLUMNS": "300"},
    )  # fmt: skip
    assert played.exit_code == 2
    _one_error_line(played.output, port)


@pytest.mark.parametrize("url", UNREACHABLE)
def test_serve_on_an_unreachable_store_prints_one_line_without_the_password(url: str) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": SRC, "COLUMNS": "300", "TTLEARN_ADMIN_KEY": "k" * 32}
    env.pop("PGPASSWORD", None)
    served = subprocess.run(
        [sys.executable, "-m", "ttlearn", "serve", "--store", url.format(port=port), "--port", str(free_port())],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert served.returncode == 2
    _one_error_line(served.stdout + served.stderr, port)


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


# ---- the server restarts under the writers ---------------------------------------------------------------------------


def test_writers_reconnect_through_restarts_losing_nothing_and_applying_nothing_twice(own_postgres, tmp_path) -> None:
    """A fast restart (sessions ended, open transactions rolled back) and a crash-like one (`immediate`) while 3
    writer processes send feedback and add items: every writer finishes, and every update is applied exactly once.
    Gates hold the writers at a third and two thirds of their work, and each restart follows the gate's opening at
    once, so it lands while all three are connected and writing."""
    url = own_postgres.url
    _seed(url)
    writers = _start_writers(url, 3, 150, gates=tmp_path)
    _open_gate(tmp_path, 0, writers)
    for gate, mode in ((1, "fast"), (2, "immediate")):
        _open_gate(tmp_path, gate, writers)
        own_postgres.restart(mode)
    answers = [json.loads(w.communicate(timeout=240)[0]) for w in writers]
    assert all(w.returncode == 0 for w in writers)
    with MemoryStore(url) as store:
        items = _check_every_update_once(store, answers)
        assert sum(items[i].visits for i in range(1, 5)) == 3 * 150 * 2
        assert store.stats("shared")["intents"] == 4 + 3  # no add was applied twice (nor a key made twice)
        assert len(items) == 4 + 3 * 15


def test_a_store_lost_for_longer_than_its_timeout_is_one_clear_error(own_postgres) -> None:
    with MemoryStore(own_postgres.url, timeout_s=2) as store:
        store.namespace("n", HashEmbedder(8))
        own_postgres.folder.stop()  # and it does not come back
        lost = rf"^lost the PostgreSQL memory store {own_postgres.url} for 2 s: [^\n]+$"
        with pytest.raises(StoreUnreachable, match=lost):
            store.stats("n")


def test_a_transaction_cut_before_its_commit_is_run_again(postgres_url: str) -> None:
    import psycopg

    _seed(postgres_url)
    with MemoryStore(postgres_url) as store, psycopg.connect(postgres_url, autocommit=True) as killer:
        ns = store.namespace("shared", HashEmbedder(32))
        pid = store.dialect.conn.pg.info.backend_pid
        calls = []

        def update(q: np.ndarray) -> np.ndarray:
            calls.append(len(calls))
            if len(calls) == 1:  # the first attempt loses its connection after its work, before COMMIT
                killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
            return q + 1.0

        assert ns.update_q([1], 1.0, update) == {1: 1.0}
        assert len(calls) == 2
        (item,) = [m for m in store.inspect("shared") if m.id == 1]
        assert (item.q_value, item.visits) == (1.0, 1)


class CommitCutter:
    """A loopback TCP relay in front of the server that, once armed, swallows the server's answer to the next COMMIT
    (its CommandComplete message) and cuts both connections: the transaction committed, and the client never
    heard. The only way to reach that state on cue."""

    COMMIT_DONE = b"C\x00\x00\x00\x0bCOMMIT\x00"

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.upstream = (parts.hostname, parts.port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{self.listener.getsockname()[1]}"))
        self.armed = threading.Event()
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            threading.Thread(target=self._relay, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._relay, args=(server, client, True), daemon=True).start()

    def _relay(self, source: socket.socket, target: socket.socket, from_server: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if from_server and self.armed.is_set() and self.COMMIT_DONE in chunk:
                    self.armed.clear()
                    self.cuts += 1
                    break
                target.sendall(chunk)
        except OSError:
            pass
        for end in (source, target):
            with suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def close(self) -> None:
        self.listener.close()


def test_a_commit_whose_answer_was_lost_is_not_run_again(postgres_url: str) -> None:
    """The connection is cut after the server committed a Q update, before the client heard: after reconnecting, the
    write's receipt says it committed, so it returns its result and is not applied a second time."""
    _seed(postgres_url)
    cutter = CommitCutter(postgres_url)
    try:
        with MemoryStore(cutter.url) as store:
            ns = store.namespace("shared", HashEmbedder(32))
            first = store.dialect.conn.pg
            cutter.armed.set()
            assert reinforce(ns, [1], 1.0, 0.5) == {1: 0.5}
            assert cutter.cuts == 1 and store.dialect.conn.pg is not first  # cut, then reconnected
            (item,) = [m for m in store.inspect("shared") if m.id == 1]
            assert (item.q_value, item.visits) == (0.5, 1)
    finally:
        cutter.close()


# ---- saved indexes ---------------------------------------------------------------------------------------------------


def _unit_rows(seed: int, n: int, dim: int = 32) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_a_new_process_loads_the_saved_index_instead_of_building_it(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    from ttlearn.memory.vector_index import VectorIndex

    vectors = _unit_rows(0, 300)
    with MemoryStore(postgres_url, ann_threshold=100) as store:
        ns = store.namespace("big", HashEmbedder(32))
        ids = [a.intent_id for a in ns.add_many([NewItem(f"k{i}", "e", 0.0, vector=v) for i, v in enumerate(vectors)])]
        ns.nearest(vectors[0], 1)  # builds the graph and saves it
    late = _unit_rows(1, 5)
    with psycopg.connect(postgres_url, autocommit=True) as pg:  # rows the saved index lacks: a writer that died
        for i, vector in enumerate(late):
            ids.append(pg.execute(
                "INSERT INTO intents (namespace_id, text, embedding, created) VALUES (%s, %s, %s, 0) RETURNING id",
                (ns.id, f"late {i}", vector.tobytes()),
            ).fetchone()[0])  # fmt: skip
    loaded, real_load = [], VectorIndex.load.__func__

    def load(cls, *args):
        index = real_load(cls, *args)
        loaded.append(None if index is None else len(index))
        return index

    monkeypatch.setattr(VectorIndex, "load", classmethod(load))
    with MemoryStore(postgres_url, ann_threshold=100) as store:
        ns = store.namespace("big", HashEmbedder(32))
        for row, vector in ((7, vectors[7]), (302, late[2])):
            assert ns.nearest(vector, 1)[0][0] == ids[row]
        index = store.indexes.get(ns.id)
        assert index.uses_ann and len(index) == 305
    assert loaded == [300]  # loaded once, as saved; the 5 rows added since were appended


def test_a_saved_index_whose_rows_were_rewritten_is_not_served(postgres_url: str) -> None:
    import psycopg

    vectors = _unit_rows(0, 300)
    with MemoryStore(postgres_url, ann_threshold=100) as store:
        ns = store.namespace("big", HashEmbedder(32))
        ids = [a.intent_id for a in ns.add_many([NewItem(f"k{i}", "e", 0.0, vector=v) for i, v in enumerate(vectors)])]
    moved = _unit_rows(2, 1)[0]
    with psycopg.connect(postgres_url, autocommit=True) as pg:
        assert pg.execute("SELECT rows FROM vector_indexes").fetchone()[0] == 300
        pg.execute("UPDATE intents SET embedding = %s WHERE id = %s", (moved.tobytes(), ids[5]))
    with MemoryStore(postgres_url, ann_threshold=100) as store:
        assert store.namespace("big", HashEmbedder(32)).nearest(moved, 1)[0][0] == ids[5]
