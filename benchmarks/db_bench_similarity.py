"""Calibrate MemRL's retrieval on db_bench for an embedder, on development tasks only (never `val`).

The LLB runner retrieves by the task's instruction (`DBBench.task`, its `_task_description_from_entry`) with a
similarity bar δ chosen for text-embedding-3-large. This script embeds that same text for every task of a development
split, one intent key per task (what a memory that has met each task once holds), and labels each pair by the
benchmark's own skill list: *same-skill* when two tasks have the same set of skills, *other-skill* otherwise. It
prints:

- the quantiles of cosine similarity of same-skill and other-skill pairs, and the mean and standard deviation over all
  pairs (MemRL's z_sim statistics for this corpus and embedder);
- for each δ, over the tasks that have a same-skill partner: the share whose nearest same-skill key clears δ, the
  share for which one reaches the prompt (among the top k2 keys above δ, ranked by similarity: at the start every
  item has the same Q, so phase B ranks by similarity), the mean number of other-skill keys shown beside it, and the
  share of all other-skill pairs that clear δ;
- the δ that maximises (same-skill shown) − (other-skill pairs clearing δ).

Skills only label the pairs; they never reach a memory or a prompt.

    python benchmarks/db_bench_similarity.py [--embedder minilm] [--split train] [--k2 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Hashable

import numpy as np

from ttlearn.data.db_bench import Task, in_split, load_tasks
from ttlearn.envs.db_bench import DBBench
from ttlearn.memory.embed import make_embedder

DEVELOPMENT_SPLITS = ("dev", "build", "train")
"""`train` is `dev` + `build` (docs/data-register.md); `val` is held out and `all` holds it, so neither is offered."""
QUANTILES = (0.05, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95)


def query_texts(tasks: list[Task]) -> list[str]:
    """What the `memrl` memory retrieves by: the environment's `task()` for each task."""
    env = DBBench(split="dev")
    try:
        texts = []
        for task in tasks:
            env.current = task
            texts.append(env.task())
        return texts
    finally:
        env.close()


def measure(vectors: np.ndarray, labels: list[Hashable], k2: int, deltas: np.ndarray) -> dict:
    sims = vectors @ vectors.T
    same = np.array([[a == b for b in labels] for a in labels])
    upper = np.triu_indices(len(labels), 1)
    np.fill_diagonal(sims, -np.inf)  # a task never retrieves its own key
    has_partner = same.sum(axis=1) > 1
    rows = []
    for delta in deltas:
        reached, nearest_clears, others_shown = 0, 0, 0
        for i in np.flatnonzero(has_partner):
            others = np.flatnonzero(~same[i])
            partners = np.flatnonzero(same[i] & (np.arange(len(labels)) != i))
            nearest_clears += sims[i, partners].max() >= delta
            above = np.flatnonzero(sims[i] >= delta)
            shown = above[np.argsort(-sims[i, above], kind="stable")[:k2]]
            reached += bool(np.isin(shown, partners).any())
            others_shown += int(np.isin(shown, others).sum())
        n = int(has_partner.sum())
        other_pairs = sims[upper][~same[upper]]
        rows.append(
            (float(delta), nearest_clears / n, reached / n, others_shown / n, float(np.mean(other_pairs >= delta)))
        )
    pair_sims = sims[upper]
    return {
        "same": pair_sims[same[upper]],
        "other": pair_sims[~same[upper]],
        "tasks": len(labels),
        "with_partner": int(has_partner.sum()),
        "rows": rows,
        "best": max(rows, key=lambda r: (r[2] - r[4], r[0])),
    }


LABELS = {
    "skill set": lambda task: frozenset(task.skills),
    "kind": lambda task: task.kind,
}
"""How a pair is labelled same-skill: the same set of the benchmark's skills (the strict label), or the same kind of
statement (select / insert / update / delete: the coarse one)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--split", default="train", choices=DEVELOPMENT_SPLITS)
    parser.add_argument("--k2", type=int, default=5, help="items shown (phase B; the runner's 5)")
    parser.add_argument("--step", type=float, default=0.05, help="spacing of the δ grid")
    args = parser.parse_args()
    tasks = [task for task in load_tasks() if in_split(task, args.split)]
    start = time.perf_counter()
    vectors = make_embedder(args.embedder).embed(query_texts(tasks))
    print(
        f"{args.embedder} · db_bench {args.split} · {len(tasks)} tasks · {time.perf_counter() - start:.1f} s to embed"
    )
    every = (vectors @ vectors.T)[np.triu_indices(len(tasks), 1)]
    print(f"similarity over all pairs: mean {every.mean():.3f}  std {every.std():.3f}")
    for label, of in LABELS.items():
        out = measure(vectors, [of(t) for t in tasks], args.k2, np.round(np.arange(0.2, 0.9 + 1e-9, args.step), 3))
        print(
            f"\nsame-skill = same {label}: {out['with_partner']} of {out['tasks']} tasks have a partner · k2 {args.k2}"
        )
        print("pairs          n      " + "  ".join(f"q{round(q * 100):02d}" for q in QUANTILES))
        for name in ("same", "other"):
            cells = "  ".join(f"{v:.2f}" for v in np.quantile(out[name], QUANTILES))
            print(f"{name + '-skill':12s} {len(out[name]):6d}   {cells}")
        print("delta   nearest same clears   same shown   other shown / task   other pairs clear")
        for row in out["rows"]:
            delta, nearest, reached, others, other_pairs = row
            mark = "  <- max(same shown - other pairs)" if row == out["best"] else ""
            print(f"{delta:5.2f}   {nearest:19.2f}   {reached:10.2f}   {others:18.2f}   {other_pairs:17.3f}{mark}")


if __name__ == "__main__":
    main()
