"""MemRL's memory past one machine, at the sizes it is for: PostgreSQL against SQLite and raw usearch, in one run.

    PYTHONPATH=src python benchmarks/postgres_memory.py [--writers 8] [--feedbacks 500] [--items 100000]
        [--queries 500] [--probes 50] [--clients 4] [--seconds 20] [--requests 2000] [--out FILE]

1. Lost updates. `--writers` processes each send `--feedbacks` feedbacks (2 of 4 shared items, α = 0.3, rewards
   −1 / 0.5 / 1): straight into PostgreSQL, and, as the baseline, through one `ttlearn serve` on a SQLite file.
   Each writer keeps the Q it was answered; `retrieval.commit_order` must find an order in which every answer is
   the rule applied to the previous one and the final Q the table's, and the visits must equal the feedbacks
   (0 lost updates). Printed: lost updates and feedbacks/s of both.
2. Opening and retrieval at `--items` memories (one intent key each, `hash` embeddings of distinct situations,
   inserted in bulk with no graph during the fill): the time of a store's first retrieval — cold (the usearch graph
   is built, then saved: beside the SQLite file, in the PostgreSQL database) and saved (a new store loads it) —
   then p50 / p99 of `--queries` two-phase retrievals on each store and of the same searches on the raw usearch
   graph (the SQLite store's, loaded into a bare `usearch.Index`), with the ratios.
3. Staleness between replicas: one store (connection) adds an item, another retrieves its intent in a loop; the
   window is from the add's commit to the first retrieval that returns it (p50 / max over `--probes`).
4. Service replicas under a bounded load: two `ttlearn serve` on the PostgreSQL database and one on the SQLite file
   (each opening the saved 100k index), `--clients` client processes per setup, each alternating a retrieve (k = 3)
   and a feedback on what it returned, until `--requests` requests or `--seconds` seconds. Printed per setup and
   operation: requests/s, p50, p99, 5xx and other errors, and lost feedback (visits added to the namespace minus
   the ids of every acknowledged feedback; must be 0).

A throwaway PostgreSQL is started (the tests' `tests/local_postgres.py`, synchronous_commit off: like SQLite's WAL with
synchronous=NORMAL, durable across a crash of the process, not of the machine). The machine's load (`uptime`) is
recorded at the start and the end: numbers taken under load are not idle numbers.
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
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' throwaway server
import numpy as np
from local_postgres import temporary_server

from ttlearn.memory.embed import HashEmbedder
from ttlearn.memory.items import NewItem
from ttlearn.memory.retrieval import RetrievalConfig, commit_order, two_phase_retrieve
from ttlearn.memory.store import MemoryStore
from ttlearn.memory.vector_index import ANN_CONNECTIVITY, ANN_EXPANSION_ADD, ANN_EXPANSION_SEARCH
from ttlearn.rollout.arena import git_commit
from ttlearn.serve.auth import KeyRing

ADMIN = "benchmark-admin-key-0123456789abcdefghijkl"
SRC = str(Path(__file__).resolve().parents[1] / "src")
ALPHA = 0.3
TOPICS = ["rock", "paper", "scissors", "bluff", "fold", "raise", "mine", "flag", "push", "box", "query", "join"]
WRITER = """
import json, sys
url, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if url.startswith("http"):
    from ttlearn.memory.remote import MemoryClient
    client = MemoryClient(url, sys.argv[4])
    send = lambda ids, r: {int(k): v for k, v in client.feedback("bench", ids, r, alpha=ALPHA).items()}
else:
    from ttlearn.memory.embed import HashEmbedder
    from ttlearn.memory.retrieval import reinforce
    from ttlearn.memory.store import MemoryStore
    ns = MemoryStore(url).namespace("bench", HashEmbedder())
    send = lambda ids, r: reinforce(ns, ids, r, ALPHA)
answers = []
for n in range(count):
    reward = (-1.0, 0.5, 1.0)[(worker * 7 + n) % 3]
    answers.append([reward, send([1 + (worker + n) % 4, 1 + (worker + n + 1) % 4], reward)])
print(json.dumps(answers))
""".replace("ALPHA", repr(ALPHA))
LOAD_CLIENT = """
import json, random, sys, time
import httpx2
url, key, items, worker, requests, seconds, topics = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \\
    int(sys.argv[5]), float(sys.argv[6]), sys.argv[7].split(",")
rng, log, acked = random.Random(worker), [], 0
with httpx2.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
    start = time.monotonic()
    end = start + seconds
    while len(log) < requests and time.monotonic() < end:
        i = rng.randrange(items)
        began = time.perf_counter()
        query = f"situation {i} {topics[i % len(topics)]}"
        answer = http.post("/v1/namespaces/latency/retrieve", json={"query": query, "k": 3})
        log.append(["retrieve", time.perf_counter() - began, answer.status_code])
        ids = [item["id"] for item in answer.json()["items"]] if answer.status_code == 200 else []
        if ids:
            began = time.perf_counter()
            answer = http.post("/v1/namespaces/latency/feedback", json={"ids": ids, "reward": rng.choice([1.0, -1.0])})
            log.append(["feedback", time.perf_counter() - began, answer.status_code])
            acked += len(ids) if answer.status_code == 200 else 0
print(json.dumps({"log": log, "acked_ids": acked, "elapsed_s": time.monotonic() - start}))
"""


def situation(i: int) -> str:
    return f"situation {i} {TOPICS[i % len(TOPICS)]}"


def load_average() -> float:
    return os.getloadavg()[0]


def percentiles_ms(seconds: list[float]) -> dict[str, float]:
    ms = 1000 * np.asarray(seconds)
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3)}


# ---- 1. lost updates -------------------------------------------------------------------------------------------------


def _seed_items(location: str) -> None:
    with MemoryStore(location) as store:
        ns = store.namespace("bench", HashEmbedder())
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
        subprocess.Popen(
            [sys.executable, "-c", WRITER, target, str(w), str(feedbacks), key], stdout=subprocess.PIPE, env=env
        )
        for w in range(writers)
    ]
    answers = [json.loads(p.communicate(timeout=1800)[0]) for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("a writer process failed")
    return answers, time.perf_counter() - start


@contextmanager
def serving(store: str, folder: Path) -> Iterator[str]:
    """`ttlearn serve` on `store` (a file or a database URL) on a free loopback port; its URL once it answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": SRC, "TTLEARN_ADMIN_KEY": ADMIN}
    log = open(folder / f"serve-{port}.log", "w")  # noqa: SIM115 - closed below, after the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "ttlearn", "serve", "--store", store, "--port", str(port), "--rate", "0"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    import httpx2

    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx2.get(f"{url}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx2.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"ttlearn serve did not start: {folder / log.name}") from None
            time.sleep(0.2)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        log.close()


def lost_updates(url: str, folder: Path, writers: int, feedbacks: int) -> dict[str, float]:
    _seed_items(url)
    pg_answers, pg_s = _writers(url, "", writers, feedbacks)
    service_store = folder / "service.sqlite"
    _seed_items(str(service_store))
    key = _issue_key(str(service_store), "bench")
    with serving(str(service_store), folder) as service:
        lite_answers, lite_s = _writers(service, key, writers, feedbacks)
    total = writers * feedbacks
    return {
        "writers": writers,
        "feedbacks": total,
        "postgres_lost": _lost_updates(url, pg_answers),
        "sqlite_service_lost": _lost_updates(str(service_store), lite_answers),
        "postgres_per_s": round(total / pg_s, 1),
        "sqlite_service_per_s": round(total / lite_s, 1),
        "ratio_postgres_over_sqlite_service": round(lite_s / pg_s, 2),
    }


# ---- 2. opening and retrieval at size ----------------------------------------------------------------------------


def _fill(location: str, vectors: np.ndarray) -> float:
    """Every situation as its own key (no join), 1,000 per transaction, no graph during the fill; seconds taken."""
    start = time.perf_counter()
    with MemoryStore(location, ann_threshold=len(vectors) + 1) as store:
        ns = store.namespace("latency", HashEmbedder())
        for lo in range(0, len(vectors), 1000):
            rows = range(lo, min(lo + 1000, len(vectors)))
            batch = [NewItem(situation(i), f"experience {i}", 0.0, vector=vectors[i]) for i in rows]
            ns.add_many(batch, join_threshold=2.0)
    return time.perf_counter() - start


def _first_retrieval_s(location: str, probe: np.ndarray, cfg: RetrievalConfig) -> float:
    """A new store's first retrieval: the index is loaded (saved) or built and saved (cold)."""
    with MemoryStore(location) as store:
        ns = store.namespace("latency", HashEmbedder())
        start = time.perf_counter()
        two_phase_retrieve(ns, probe, cfg, np.random.default_rng(0))
        return time.perf_counter() - start


def _store_latencies(location: str, probes: np.ndarray, cfg: RetrievalConfig) -> list[float]:
    with MemoryStore(location) as store:
        ns = store.namespace("latency", HashEmbedder())
        rng = np.random.default_rng(0)
        two_phase_retrieve(ns, probes[0], cfg, rng)  # loads the index: not timed
        times = []
        for probe in probes:
            start = time.perf_counter()
            two_phase_retrieve(ns, probe, cfg, rng)
            times.append(time.perf_counter() - start)
    return times


def _raw_latencies(sqlite_path: Path, vectors: np.ndarray, probes: np.ndarray, k: int) -> list[float]:
    """The same searches on a bare usearch graph (no store, no SQL, no re-scoring): the one the SQLite store saved,
    or, below the store's graph threshold (a smoke run), one built here."""
    from usearch.index import Index

    index = Index(
        ndim=probes.shape[1],
        metric="ip",
        dtype="f32",
        connectivity=ANN_CONNECTIVITY,
        expansion_add=ANN_EXPANSION_ADD,
        expansion_search=ANN_EXPANSION_SEARCH,
    )
    saved = sorted(Path(f"{sqlite_path}.index").glob("namespace-*.npz"))
    if saved:
        with np.load(saved[0]) as data:
            index.load(data["graph"])
    else:
        index.add(np.arange(len(vectors)), vectors, threads=1)
    times = []
    for probe in probes:
        start = time.perf_counter()
        index.search(probe, k)
        times.append(time.perf_counter() - start)
    return times


def retrieval_at_size(url: str, sqlite_path: Path, items: int, queries: int) -> dict[str, float]:
    vectors = HashEmbedder().embed([situation(i) for i in range(items)])
    rng = np.random.default_rng(0)
    picked = rng.choice(items, queries)
    probes = HashEmbedder().embed([situation(int(i)) + " again" for i in picked])
    cfg = RetrievalConfig(k1=5, k2=3, delta=0.0, epsilon=0.0)
    out: dict[str, float] = {"items": items, "queries": queries}
    opens: dict[str, tuple[float, float]] = {}
    for label, location in (("sqlite", str(sqlite_path)), ("postgres", url)):
        out[f"{label}_fill_s"] = round(_fill(location, vectors), 1)
        opens[label] = (_first_retrieval_s(location, probes[0], cfg), _first_retrieval_s(location, probes[1], cfg))
        out[f"{label}_open_cold_s"], out[f"{label}_open_saved_s"] = (round(s, 2) for s in opens[label])
        for key, value in percentiles_ms(_store_latencies(location, probes, cfg)).items():
            out[f"{label}_{key}"] = value
    for key, value in percentiles_ms(_raw_latencies(sqlite_path, vectors, probes, cfg.k1)).items():
        out[f"raw_usearch_{key}"] = value
    out["ratio_p50_postgres_over_sqlite"] = round(out["postgres_p50_ms"] / out["sqlite_p50_ms"], 2)
    out["ratio_p99_postgres_over_sqlite"] = round(out["postgres_p99_ms"] / out["sqlite_p99_ms"], 2)
    out["ratio_p50_postgres_over_raw"] = round(out["postgres_p50_ms"] / out["raw_usearch_p50_ms"], 1)
    out["ratio_p50_sqlite_over_raw"] = round(out["sqlite_p50_ms"] / out["raw_usearch_p50_ms"], 1)
    # From the unrounded times: a small store opens in well under 5 ms, which rounds to 0.
    cold, saved = opens["postgres"]
    out["ratio_postgres_open_cold_over_saved"] = round(cold / saved, 1)
    return out


# ---- 3. staleness ----------------------------------------------------------------------------------------------------


def staleness(url: str, probes: int) -> dict[str, float]:
    """From an add's commit in one store (connection) to the first retrieval in another that returns it."""
    cfg = RetrievalConfig(k1=1, k2=1, delta=0.99, epsilon=0.0)
    windows = []
    with MemoryStore(url) as writer_store, MemoryStore(url) as reader_store:
        writer = writer_store.namespace("stale", HashEmbedder(64))
        reader = reader_store.namespace("stale", HashEmbedder(64))
        rng = np.random.default_rng(0)
        for n in range(probes):
            intent, committed, seen = f"fresh situation number {n} xq{n * 7919}", [], threading.Event()

            def watch(intent: str = intent, seen: threading.Event = seen) -> None:
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


# ---- 4. replicas under load ------------------------------------------------------------------------------------------


def _issue_key(location: str, namespace: str) -> str:
    keys = KeyRing(location)
    try:
        return keys.issue(namespace)
    finally:
        keys.close()


def _visits(location: str) -> int:
    with MemoryStore(location) as store:
        return int(store.stats("latency")["visits"])


def _load(location: str, replicas: int, folder: Path, items: int, clients: int, requests: int, seconds: float) -> dict:
    key = _issue_key(location, "latency")
    before = _visits(location)
    with ExitStack() as stack:
        started = time.perf_counter()
        urls = [stack.enter_context(serving(location, folder)) for _ in range(replicas)]
        import httpx2

        for url in urls:  # each replica's first retrieval opens the saved index
            httpx2.post(
                f"{url}/v1/namespaces/latency/retrieve",
                json={"query": situation(0)},
                headers={"Authorization": f"Bearer {key}"},
                timeout=600,
            ).raise_for_status()
        ready_s = time.perf_counter() - started
        env = {**os.environ, "PYTHONPATH": SRC}
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", LOAD_CLIENT, urls[c % replicas], key, str(items), str(c), str(requests),
                 str(seconds), ",".join(TOPICS)],
                stdout=subprocess.PIPE, env=env,
            )
            for c in range(clients)
        ]  # fmt: skip
        results = [json.loads(p.communicate(timeout=seconds + 600)[0]) for p in procs]
    log = [entry for result in results for entry in result["log"]]
    wall = max(result["elapsed_s"] for result in results)  # the clients' sending window
    out: dict = {"replicas": replicas, "clients": clients, "ready_s": round(ready_s, 1), "wall_s": round(wall, 1)}
    for op in ("retrieve", "feedback"):
        mine = [entry for entry in log if entry[0] == op]
        ok = [latency for _, latency, status in mine if status < 300]
        out[op] = {
            "requests": len(mine),
            "per_s": round(len(mine) / wall, 1),
            **(percentiles_ms(ok) if ok else {}),
            "5xx": sum(status >= 500 for _, _, status in mine),
            "other_errors": sum(300 <= status < 500 for _, _, status in mine),
        }
    out["lost_feedback"] = sum(r["acked_ids"] for r in results) - (_visits(location) - before)
    return out


def replicas_under_load(
    url: str, sqlite_path: Path, folder: Path, items: int, clients: int, requests: int, seconds: float
) -> dict:
    return {
        "postgres_two_replicas": _load(url, 2, folder, items, clients, requests, seconds),
        "sqlite_one_replica": _load(str(sqlite_path), 1, folder, items, clients, requests, seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an existing PostgreSQL database (default: start a throwaway server)")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--feedbacks", type=int, default=500)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--probes", type=int, default=50)
    parser.add_argument("--clients", type=int, default=4, help="load-test client processes per setup")
    parser.add_argument("--requests", type=int, default=2000, help="at most this many requests per client")
    parser.add_argument("--seconds", type=float, default=20.0, help="at most this long per setup")
    parser.add_argument("--out", type=Path, help="also write the results (JSON) here")
    args = parser.parse_args()
    results: dict = {"load_at_start": round(load_average(), 2), "command": " ".join(sys.argv), "commit": git_commit()}
    with ExitStack() as stack:
        url = args.url or stack.enter_context(temporary_server({"synchronous_commit": "off"})).url
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ttlearn-pg-bench-")))
        sqlite_path = folder / "latency.sqlite"
        results["lost_updates"] = lost_updates(url, folder, args.writers, args.feedbacks)
        print(json.dumps(results["lost_updates"]), flush=True)
        results["retrieval"] = retrieval_at_size(url, sqlite_path, args.items, args.queries)
        print(json.dumps(results["retrieval"]), flush=True)
        results["staleness"] = staleness(url, args.probes)
        print(json.dumps(results["staleness"]), flush=True)
        results["load"] = replicas_under_load(
            url, sqlite_path, folder, args.items, args.clients, args.requests, args.seconds
        )
    results["load_at_end"] = round(load_average(), 2)
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    lost = results["lost_updates"]["postgres_lost"] + results["lost_updates"]["sqlite_service_lost"]
    load = results["load"].values()
    if lost or any(r["lost_feedback"] or r["retrieve"]["5xx"] or r["feedback"]["5xx"] for r in load):
        raise SystemExit("lost updates, lost feedback or 5xx answers: see above")


if __name__ == "__main__":
    main()
