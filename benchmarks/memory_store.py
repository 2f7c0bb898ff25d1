"""MemRL store speed: two-phase top-k2 retrieval vs the raw vector index, insert and Q-update throughput.

    PYTHONPATH=src python3 benchmarks/memory_store.py [--sizes 10000 100000] [--queries 500]

Vectors are random unit vectors (384-d, MiniLM's size; embedding time is not measured); each query is a stored
vector plus noise (cosine ≈ 0.7), so phase A finds candidates. Store and raw queries alternate, so machine load hits
both alike. The raw baseline is the same index the store uses: numpy dot products below the ANN threshold, the
usearch graph's own `search` above it. Targets: store ≤ 1.5× raw, p99 ≤ 2 ms at 100k, ≥ 20k Q-updates/s.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

# One BLAS thread: on a busy 2-core machine OpenBLAS's threads make a 10k×384 dot product 5× slower, not faster.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np

from ttlearn.memory.embed import HashEmbedder
from ttlearn.memory.memrl import RetrievalConfig, q_update, two_phase_retrieve
from ttlearn.memory.store import MemoryStore, NewItem

DIM = 384


def unit_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def raw_query(index, vector: np.ndarray, k: int) -> None:
    if index.uses_ann:
        index._ann.search(vector, k)
    else:
        sims = index.vectors @ vector
        np.argpartition(-sims, k - 1)[:k]


def percentiles_ms(samples: list[float]) -> tuple[float, float]:
    return float(np.percentile(samples, 50) * 1e3), float(np.percentile(samples, 99) * 1e3)


def bench(n: int, queries: int, rng: np.random.Generator) -> dict[str, float]:
    vectors = unit_rows(rng, n)
    with tempfile.TemporaryDirectory() as tmp, MemoryStore(os.path.join(tmp, "bench.sqlite")) as store:
        ns = store.namespace("bench", HashEmbedder(DIM))
        start = time.perf_counter()
        for lo in range(0, n, 1000):
            batch = [
                NewItem(f"intent {i}", f"experience {i}", 0.0, vector=vectors[i]) for i in range(lo, min(n, lo + 1000))
            ]
            ns.add_many(batch, join_threshold=1.1)
        insert_s = time.perf_counter() - start
        index = store._index(ns.id)

        cfg = RetrievalConfig(epsilon=0.0)
        targets = rng.integers(0, n, queries)
        qs = vectors[targets] + unit_rows(rng, queries)
        qs /= np.linalg.norm(qs, axis=1, keepdims=True)
        store_t, raw_t, hits = [], [], 0
        for q, target in zip(qs, targets):
            t0 = time.perf_counter()
            raw_query(index, q, cfg.k1)
            t1 = time.perf_counter()
            candidates, ranked = two_phase_retrieve(ns, q, cfg, rng)
            t2 = time.perf_counter()
            raw_t.append(t1 - t0)
            store_t.append(t2 - t1)
            hits += any(candidates[i].item_id == target + 1 for i in ranked.chosen)

        ids = [m.id for m in store.inspect("bench", limit=10_000)]
        updates, start = 0, time.perf_counter()
        for lo in range(0, len(ids), 100):
            batch = ids[lo : lo + 100]
            ns.update_q(batch, 1.0, lambda q: q_update(q, 1.0, 0.3, 0.0, 0.0))
            updates += len(batch)
        update_s = time.perf_counter() - start
        episodes, start = 0, time.perf_counter()
        for lo in range(0, 900, 3):  # the memory's real pattern: one transaction per episode, k2 = 3 items
            ns.update_q(ids[lo : lo + 3], -1.0, lambda q: q_update(q, -1.0, 0.3, 0.0, 0.0))
            episodes += 1
        episode_s = time.perf_counter() - start

    store_p50, store_p99 = percentiles_ms(store_t)
    raw_p50, raw_p99 = percentiles_ms(raw_t)
    return {
        "n": n,
        "ann": index.uses_ann,
        "insert_per_s": n / insert_s,
        "store_p50": store_p50,
        "store_p99": store_p99,
        "raw_p50": raw_p50,
        "raw_p99": raw_p99,
        "ratio_p50": store_p50 / raw_p50,
        "recall": hits / queries,
        "q_updates_per_s": updates / update_s,
        "episode_updates_per_s": episodes / episode_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=500)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for n in args.sizes:
        r = bench(n, args.queries, rng)
        print(
            f"n={r['n']:>7} index={'usearch' if r['ann'] else 'numpy'}: insert {r['insert_per_s']:,.0f} items/s | "
            f"top-k2 store p50 {r['store_p50']:.3f} ms p99 {r['store_p99']:.3f} ms | raw index p50 {r['raw_p50']:.3f} "
            f"ms p99 {r['raw_p99']:.3f} ms | store/raw p50 {r['ratio_p50']:.2f}x | target found {r['recall']:.0%} | "
            f"Q-updates {r['q_updates_per_s']:,.0f}/s (batches of 100), "
            f"{r['episode_updates_per_s']:,.0f} episodes/s (3 items)"
        )
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
