"""MemRL's memory past one machine: PostgreSQL against today's SQLite, in one run.

    PYTHONPATH=src python benchmarks/postgres_memory.py [--writers 8] [--feedbacks 500] [--items 100000]

1. Lost updates. `--writers` processes each send `--feedbacks` feedbacks (2 of 4 shared items, α = 0.3, rewards
   −1 / 0.5 / 1): straight into PostgreSQL (`store=postgresql://…`), and, as the baseline, through one `ttlearn
   serve` on a SQLite file. Each writer keeps the Q it was answered; `retrieval.commit_order` must find an order in
   which every answer is the rule applied to the previous one and the final Q the table's (0 lost updates), and
   the visits must equal the feedbacks. Printed: lost updates and feedbacks/s of both, and their ratio.
2. Retrieval latency at `--items` memories (one intent key each, 256-d `hash` vectors, inserted in bulk; above
   20k keys the usearch graph): p50 / p99 of the two-phase retrieval on each store, same queries, in one process.
3. Staleness: one process adds an item, another retrieves its intent in a loop; the window is from the add's
   commit to the first retrieval that returns it (p50 / max over `--probes`).

A throwaway PostgreSQL 15 is started (`postgres.temporary_server`, synchronous_commit off: like SQLite's WAL with
synchronous=NORMAL, durable across a crash of the process, not of the machine) unless `--url` names one.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np

from ttlearn.memory.embed import HashEmbedder
from ttlearn.memory.items import NewItem
from ttlearn.memory.postgres import temporary_server
from ttlearn.memory.retrieval import RetrievalConfig, commit_order, two_phase_retrieve
from ttlearn.memory.store import MemoryStore

ADMIN = "benchmark-admin-key-0123456789abcdefghijkl"
SRC = str(Path(__file__).resolve().parents[1] / "src")
ALPHA = 0.3
WRITER = """
import json, sys, time
url, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if url.startswith("http"):
    from ttlearn.memory.remote import MemoryClient
    client = MemoryClient(url, sys.argv[4])
    send = lambda ids, r: {int(k): v for k, v in client.feedback("bench", ids, r, alpha=ALPHA).items()}
else:
    from ttlearn.memory.embed import HashEmbedder
    from ttlearn.memory.retrieval import reinforce
    from ttlearn.memory.store import MemoryStore
    ns = MemoryStore(url).namespace("bench", HashEmbedder(32))
    send = lambda ids, r: reinforce(ns, ids, r, ALPHA)
answers = []
for n in range(count):
    reward = (-1.0, 0.5, 1.0)[(worker * 7 + n) % 3]
    answers.append([reward, send([1 + (worker + n) % 4, 1 + (worker + n + 1) % 4], reward)])
print(json.dumps(answers))
""".replace("ALPHA", repr(ALPHA))


def _seed_items(location: str) -> None:
    with MemoryStore(location) as store:
        ns = store.namespace("bench", HashEmbedder(32))
        ns.add_many([NewItem(f"shared item {i}", f"item {i}", 0.0) for i in range(4)], join_threshold=2.0)


def _lost_updates(location: str, answers: list[list]) -> int:
    """Feedbacks not explained by a sequential fold (0 when none was lost)."""
    with MemoryStore(location) as store:
        items = {m.id: m for m in store.inspect("bench")}
    lost = 0
    for item_id in range(1, 5):
        updates = [(r, ALPHA, q[str(item_id)]) for a in answers for r, q in a if str(item_id) in q]
        order, visits = commit_order(0.0, updates), items[item_id].visits
        folded = order is not None and items[item_id].q_value == updates[order[-1]][2]
        lost += 0 if folded and visits == len(updates) else max(1, len(updates) - visits)
    return lost


def _writers(target: str, key: str, writers: int, feedbacks: int) -> tuple[list[list], float]:
    env = {**os.environ, "PYTHONPATH": SRC}
    start = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, target, str(w), str(feedbacks), key], stdout=subprocess.PIPE, env=env)
        for w in range(writers)
    ]
    answers = [json.loads(p.communicate(timeout=1800)[0]) for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("a writer process failed")
    return answers, time.perf_counter() - start


def _serve(store: Path) -> tuple[subprocess.Popen, str, str]:
    """`ttlearn serve` on the SQLite file, and a key for namespace 'bench' (hash embedder, items 1-4 seeded)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": SRC, "TTLEARN_ADMIN_KEY": ADMIN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ttlearn", "serve", "--store", str(store), "--port", str(port), "--rate", "0"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    from ttlearn.memory.remote import MemoryClient, MemoryServiceError

    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with MemoryClient(url, ADMIN) as admin:
                key = admin.create_namespace("bench", embedder="hash")
            break
        except MemoryServiceError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    with MemoryClient(url, key) as client:
        for i in range(4):
            client.add("bench", f"shared item {i}", f"item {i}", join_threshold=2.0)
    return proc, url, key


def lost_updates(url: str, folder: Path, writers: int, feedbacks: int) -> dict[str, float]:
    _seed_items(url)
    pg_answers, pg_s = _writers(url, "", writers, feedbacks)
    proc, service, key = _serve(folder / "service.sqlite")
    try:
        lite_answers, lite_s = _writers(service, key, writers, feedbacks)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    total = writers * feedbacks
    return {
        "feedbacks": total,
        "postgres_lost": _lost_updates(url, pg_answers),
        "sqlite_service_lost": _lost_updates(str(folder / "service.sqlite"), lite_answers),
        "postgres_per_s": round(total / pg_s, 1),
        "sqlite_service_per_s": round(total / lite_s, 1),
        "ratio_postgres_over_sqlite_service": round(lite_s / pg_s, 2),
    }


def _fill(location: str, vectors: np.ndarray) -> None:
    with MemoryStore(location) as store:
        ns = store.namespace("latency", HashEmbedder(vectors.shape[1]))
        for lo in range(0, len(vectors), 1000):
            rows = range(lo, min(lo + 1000, len(vectors)))
            ns.add_many([NewItem(f"intent {i}", f"experience {i}", 0.0, vector=vectors[i]) for i in rows], join_threshold=2.0)


def retrieval_latency(url: str, folder: Path, items: int, queries: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((items, 256)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    probes = vectors[rng.choice(items, queries)] + 0.3 * rng.standard_normal((queries, 256)).astype(np.float32)
    cfg = RetrievalConfig(k1=5, k2=3, delta=0.0, epsilon=0.0)
    out: dict[str, float] = {"items": items}
    for label, location in (("sqlite", str(folder / "latency.sqlite")), ("postgres", url)):
        _fill(location, vectors)
        with MemoryStore(location) as store:
            ns = store.namespace("latency", HashEmbedder(256))
            two_phase_retrieve(ns, probes[0], cfg, rng)  # builds the index: not timed
            times = []
            for probe in probes:
                start = time.perf_counter()
                two_phase_retrieve(ns, probe, cfg, rng)
                times.append(time.perf_counter() - start)
        out[f"{label}_p50_ms"] = round(1000 * float(np.percentile(times, 50)), 3)
        out[f"{label}_p99_ms"] = round(1000 * float(np.percentile(times, 99)), 3)
    out["ratio_p50_postgres_over_sqlite"] = round(out["postgres_p50_ms"] / out["sqlite_p50_ms"], 2)
    return out


def staleness(url: str, probes: int) -> dict[str, float]:
    """From an add's commit in one process (connection) to the first retrieval in another that returns it."""
    cfg = RetrievalConfig(k1=1, k2=1, delta=0.99, epsilon=0.0)
    windows = []
    with MemoryStore(url) as writer_store, MemoryStore(url) as reader_store:
        writer = writer_store.namespace("stale", HashEmbedder(64))
        reader = reader_store.namespace("stale", HashEmbedder(64))
        rng = np.random.default_rng(0)
        for n in range(probes):
            intent, committed, seen = f"fresh situation number {n} xq{n * 7919}", [], threading.Event()

            def watch(intent: str = intent) -> None:
                while not seen.is_set():
                    if two_phase_retrieve(reader, intent, cfg, rng)[0]:
                        seen.set()
                        return

            watcher = threading.Thread(target=watch)
            watcher.start()
            time.sleep(0.005)
            writer.add(NewItem(intent, f"experience {n}", 0.0), join_threshold=2.0)
            committed.append(time.perf_counter())
            seen.wait(30)
            windows.append(time.perf_counter() - committed[0])
            watcher.join()
    return {
        "probes": probes,
        "stale_p50_ms": round(1000 * float(np.percentile(windows, 50)), 3),
        "stale_max_ms": round(1000 * max(windows), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing PostgreSQL database (default: start a throwaway server)")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--feedbacks", type=int, default=500)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--probes", type=int, default=50)
    args = parser.parse_args()
    with ExitStack() as stack:
        url = args.url or stack.enter_context(temporary_server({"synchronous_commit": "off"})).url
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ttlearn-pg-bench-")))
        results = {
            "lost_updates": lost_updates(url, folder, args.writers, args.feedbacks),
            "retrieval": retrieval_latency(url, folder, args.items, args.queries),
            "staleness": staleness(url, args.probes),
        }
    print(json.dumps(results, indent=1))
    if results["lost_updates"]["postgres_lost"] or results["lost_updates"]["sqlite_service_lost"]:
        raise SystemExit("lost updates: see above")


if __name__ == "__main__":
    main()
