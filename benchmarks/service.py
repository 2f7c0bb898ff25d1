"""Memory service speed: retrieve requests/s and latency with concurrent client processes over HTTP, against the
same two-phase retrieval called in process, at 10k and 100k memories.

    PYTHONPATH=src python benchmarks/service.py [--sizes 10000 100000] [--clients 8] [--seconds 10]

Memories are inserted in bulk through the store (`add_many`, 1,000 per transaction), not through HTTP; `ttlearn
serve` then opens the file. Both sides embed the query with the `hash` embedder (256-d, microseconds), so the numbers
measure the service, not an embedding model; every intent is its own key, so above 20k keys the index is the usearch
graph. Each client process sends retrieve requests (k = 3) back to back through one `MemoryClient` (a keep-alive
connection) during the same --seconds window; the in-process baseline is one caller in a loop for as long. Printed:
requests/s, p50 and p99 of both sides and their ratios. The server and the clients share this machine's cores.
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
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import httpx2
import numpy as np

from ttlearn.memory.embed import HashEmbedder
from ttlearn.memory.items import NewItem
from ttlearn.memory.retrieval import RetrievalConfig, two_phase_retrieve
from ttlearn.memory.store import MemoryStore
from ttlearn.serve.auth import KeyRing

ADMIN = "benchmark-admin-key-0123456789abcdefghijkl"
TOPICS = ["rock", "paper", "scissors", "bluff", "fold", "raise", "mine", "flag", "push", "box", "query", "join"]

CLIENT = """
import json, random, sys, time
from ttlearn.memory.remote import MemoryClient
url, key, n, seed, topics = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[6]), sys.argv[7].split(",")
start, seconds = float(sys.argv[4]), float(sys.argv[5])
rng, latencies = random.Random(seed), []
with MemoryClient(url, key, timeout_s=300) as client:
    client.retrieve("bench", "situation 0", k=3)
    time.sleep(max(0.0, start - time.time()))
    while time.time() < start + seconds:
        i = rng.randrange(n)
        began = time.perf_counter()
        client.retrieve("bench", f"situation {i} {topics[i % len(topics)]}", k=3)
        latencies.append(time.perf_counter() - began)
print(json.dumps(latencies))
"""


def situation(i: int) -> str:
    return f"situation {i} {TOPICS[i % len(TOPICS)]}"


def build_store(path: Path, n: int) -> tuple[str, float]:
    """N memories through the store in transactions of 1,000; returns the namespace key and the insert time."""
    start = time.perf_counter()
    with MemoryStore(path) as store:
        ns = store.namespace("bench", HashEmbedder())
        for lo in range(0, n, 1000):
            batch = [NewItem(situation(i), f"experience {i}", 0.0) for i in range(lo, min(n, lo + 1000))]
            ns.add_many(batch, join_threshold=1.1)
    keys = KeyRing(path)
    key = keys.issue("bench")
    keys.close()
    return key, time.perf_counter() - start


def in_process(path: Path, n: int, seconds: float, rng: np.random.Generator) -> list[float]:
    latencies = []
    with MemoryStore(path) as store:
        ns = store.namespace("bench", HashEmbedder())
        cfg = RetrievalConfig(epsilon=0.0)
        two_phase_retrieve(ns, situation(0), cfg, rng)  # builds the index, as the server's first request does
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t = time.perf_counter()
            two_phase_retrieve(ns, situation(int(rng.integers(n))), cfg, rng)
            latencies.append(time.perf_counter() - t)
    return latencies


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def over_http(path: Path, key: str, n: int, clients: int, seconds: float) -> list[list[float]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "TTLEARN_ADMIN_KEY": ADMIN}
    command = [sys.executable, "-m", "ttlearn", "serve", "--store", str(path), "--port", str(port), "--rate", "0"]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx2.get(f"{url}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx2.HTTPError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("ttlearn serve did not start") from None
            time.sleep(0.2)
        httpx2.post(  # the first retrieve builds the server's index; keep it out of the window
            f"{url}/v1/namespaces/bench/retrieve",
            json={"query": situation(0)},
            headers={"Authorization": f"Bearer {key}"},
            timeout=600,
        )
        start = time.time() + 15  # every client has imported and connected by then
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", CLIENT, url, key, str(n), str(start), str(seconds), str(c), ",".join(TOPICS)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for c in range(clients)
        ]
        return [json.loads(p.communicate(timeout=start - time.time() + seconds + 120)[0]) for p in procs]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


def summary(latencies: list[float], seconds: float) -> tuple[float, float, float]:
    ms = np.asarray(latencies) * 1e3
    return len(latencies) / seconds, float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(
        f"{'memories':>9} {'insert s':>9} | {'in-process req/s':>16} {'p50 ms':>7} {'p99 ms':>7} | "
        f"{'HTTP req/s':>10} {'p50 ms':>7} {'p99 ms':>7} | {'req/s ratio':>11} {'p99 ratio':>9}"
    )
    for n in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bench.sqlite"
            key, insert_s = build_store(path, n)
            local = summary(in_process(path, n, args.seconds, rng), args.seconds)
            per_client = over_http(path, key, n, args.clients, args.seconds)
            remote = summary([x for c in per_client for x in c], args.seconds)
        print(
            f"{n:>9} {insert_s:>9.1f} | {local[0]:>16.0f} {local[1]:>7.2f} {local[2]:>7.2f} | "
            f"{remote[0]:>10.0f} {remote[1]:>7.2f} {remote[2]:>7.2f} | "
            f"{local[0] / remote[0]:>10.1f}× {remote[2] / local[2]:>8.1f}×"
        )


if __name__ == "__main__":
    main()
