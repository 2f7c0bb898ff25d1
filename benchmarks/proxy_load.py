"""The learning proxy under load: concurrent agents each run chat completions and their feedback through one
`ttlearn proxy`, then the store is checked for lost feedback.

    PYTHONPATH=src python benchmarks/proxy_load.py [--clients 8] [--exchanges 50]

Each client thread sends --exchanges chat completions (tasks drawn from 20, so memories are found and shown) to the
proxy, whose upstream is benchmarks/proxy_overhead.py's stub that answers at once, and sends the feedback of each
(reward +1 or -1) as soon as it is answered. The memory writes every episode's trajectory (`-m write=trajectory`: no
model call), so each acknowledged feedback is one new item, and the Q update of every item shown for it one visit.
Printed: exchanges per second, p50 / p99 of a chat completion and of a feedback, and the check: items written against
feedback acknowledged, and visits counted in the store against the shown items the feedback answers named.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import httpx2
import numpy as np
from proxy_overhead import start_proxy, start_stub
from service import ADMIN

from ttlearn.memory.remote import MemoryClient
from ttlearn.memory.store import MemoryStore


def agent(url: str, key: str, worker: int, exchanges: int) -> tuple[list[float], list[float], int, int]:
    """One agent's exchanges: (chat latencies, feedback latencies, feedback acknowledged, items shown for them)."""
    rng, chats, feedbacks, acked, shown = random.Random(worker), [], [], 0, 0
    with httpx2.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
        for _ in range(exchanges):
            task = f"task {rng.randrange(20)}: put the {rng.choice(['red', 'blue', 'green'])} box on the shelf"
            began = time.perf_counter()
            answer = client.post(
                "/v1/chat/completions", json={"model": "stub", "messages": [{"role": "user", "content": task}]}
            )
            chats.append(time.perf_counter() - began)
            answer.raise_for_status()
            began = time.perf_counter()
            done = client.post(
                "/v1/feedback",
                json={"exchange": answer.headers["X-TTLearn-Exchange"], "reward": rng.choice([1.0, -1.0])},
            )
            feedbacks.append(time.perf_counter() - began)
            done.raise_for_status()
            acked += 1
            shown += len(done.json()["shown"])
    return chats, feedbacks, acked, shown


def ms(seconds: list[float]) -> str:
    values = np.asarray(seconds) * 1e3
    return f"p50 {np.percentile(values, 50):.1f} ms, p99 {np.percentile(values, 99):.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--exchanges", type=int, default=50)
    args = parser.parse_args()
    stub, upstream = start_stub()
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "load.sqlite"
        proxy, url = start_proxy(store, upstream, "-m", "write=trajectory")
        try:
            with MemoryClient(url, ADMIN) as admin:
                key = admin.create_namespace("load", embedder="hash")
            began = time.perf_counter()
            with ThreadPoolExecutor(args.clients) as pool:
                results = list(pool.map(lambda w: agent(url, key, w, args.exchanges), range(args.clients)))
            seconds = time.perf_counter() - began
        finally:
            proxy.send_signal(signal.SIGTERM)
            proxy.wait(timeout=60)
        with MemoryStore(store) as memories:
            items = memories.export_namespace("load")["items"]
    stub.shutdown()
    acked, shown = sum(r[2] for r in results), sum(r[3] for r in results)
    visits = sum(item["visits"] for item in items)
    print(f"{args.clients} agents × {args.exchanges} exchanges in {seconds:.1f} s: {acked / seconds:.0f} exchanges/s")
    print(
        f"chat completion: {ms([x for r in results for x in r[0]])}; feedback: {ms([x for r in results for x in r[1]])}"
    )
    print(f"items written {len(items)} for {acked} feedback acknowledged; visits {visits} for {shown} shown")
    print("lost feedback: none" if (len(items), visits) == (acked, shown) else "LOST FEEDBACK")


if __name__ == "__main__":
    main()
