"""Where the learning proxy's overhead goes: each stage of a proxied chat completion timed on its own, in process,
over a namespace of --items memories (the setting of benchmarks/proxy_overhead.py, which measures the whole).

    PYTHONPATH=src python benchmarks/proxy_breakdown.py [--items 10000] [--requests 500]

Stages, in the order the proxy runs them: the key check (`KeyRing.owner`, one indexed query and a hash), reading the
body (`read_json`), MemRL's retrieval (`NamespaceLearner.show`: embed, nearest keys, their items, phase B, and the
retrieval log's write transaction, each also timed alone), placing the memories (`place_memory`), and the forward
to an upstream stub that answers at once (httpx2's async client, as the proxy sends; its sync client, as the
benchmark's direct calls). Then the HTTP hop into a served app: `GET /v1/health` of `ttlearn serve` (no store work).
Printed: p50 and p99 of each, in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import httpx2
import numpy as np
from proxy_overhead import start_proxy, start_stub
from service import build_store, situation

from ttlearn.memory.retrieval import phase_a, phase_b
from ttlearn.serve.auth import KeyRing
from ttlearn.serve.bodies import read_json
from ttlearn.serve.proxy import Learning, PendingExchanges, place_memory


class Stages:
    """Seconds per stage: `with stages("name"):` times its block."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        yield
        self.samples.setdefault(name, []).append(time.perf_counter() - began)


async def forward(learning: Learning, upstream: str, body: dict) -> None:
    """What the proxy does with the upstream: send, read the answer, close."""
    reply = await learning.client.send(
        learning.client.build_request("POST", f"{upstream}/chat/completions", json=body), stream=True
    )
    await reply.aread()
    await reply.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    stub, upstream = start_stub()
    rng = np.random.default_rng(0)
    stage = Stages()
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "proxy.sqlite"
        key, _ = build_store(store, args.items)
        keys = KeyRing(store)
        learning = Learning(str(store), upstream, "memrl", {}, PendingExchanges(10, 60))
        learner = learning.learner("bench")
        memory = learner.memory
        ns = memory.memories.ns
        cfg = memory.cfg
        sync_client = httpx2.Client(base_url=upstream, timeout=60)
        loop = asyncio.new_event_loop()
        for n in range(args.requests + 10):  # the first 10 build the index and warm every path
            task = situation(int(rng.integers(args.items)))
            body = {"model": "stub", "messages": [{"role": "user", "content": task}], "max_tokens": 4}
            raw = json.dumps(body).encode()
            if n == 10:
                stage.samples.clear()
            with stage("key check"):
                keys.owner(key)
            with stage("read body"):
                read_json(raw)
            with stage("retrieval (show), whole"):
                text, _ = learner.show(task)
            with stage("place memories"):
                outgoing = {**body, "messages": place_memory(body["messages"], text)}
            with stage("forward, async httpx2"):
                loop.run_until_complete(forward(learning, upstream, outgoing))
            with stage("forward, sync httpx2"):
                sync_client.post("/chat/completions", json=body).raise_for_status()
            with stage("  embed"):
                vector = ns.embed([task])[0]
            with stage("  nearest keys"):
                ids, sims = ns.nearest(vector, cfg.k1)
            keep = phase_a(sims, cfg.delta, cfg.k1)
            with stage("  their items"):
                candidates = ns.items_of(ids[keep], sims[keep])
            pairs = [(c.sim, c.q_value) for c in candidates]
            with stage("  phase B"):
                phase_b(pairs, cfg.q_min, cfg.w_sim, cfg.w_q, cfg.sim_mean, cfg.sim_std, cfg.k2, 0.0, rng)
            with stage("  retrieval log write"):
                ns.log_retrieval(task, [], [], explored=False, run_id="bench")
        loop.run_until_complete(learning.client.aclose())
        loop.close()
        keys.close()
        proxy, url = start_proxy(store, upstream)
        try:
            with httpx2.Client(base_url=url, timeout=60) as client:
                for n in range(args.requests + 10):
                    with stage("HTTP hop into the proxy (GET /v1/health)" if n >= 10 else "warm-up"):
                        client.get("/v1/health").raise_for_status()
        finally:
            proxy.terminate()
            proxy.wait(timeout=60)
    stub.shutdown()
    print(f"{args.items} memories, {args.requests} requests, ms")
    for name, seconds in stage.samples.items():
        if name == "warm-up":
            continue
        ms = np.asarray(seconds) * 1e3
        print(f"{name:45s} p50 {np.percentile(ms, 50):7.3f}  p99 {np.percentile(ms, 99):7.3f}")


if __name__ == "__main__":
    main()
