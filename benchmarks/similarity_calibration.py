"""Calibrate MemRL's similarity settings for an embedder on development data: Spider's train-split databases.

MemRL normalises similarity with per-corpus statistics (z_sim = (sim − mean) / std) and gates retrieval with a
threshold δ. Both depend on the embedder, so the released numbers (measured with text-embedding-3-large) do not carry
over. This script measures, for every question of a train-split database against the other questions of the same
database (what a memory working on one database holds):

- the mean and standard deviation of query–key cosine similarity (→ `SIMILARITY_STATS`);
- for a one-item memory carried through a database in random order (k2 = 1: the most similar earlier *solved*
  question shown when sim ≥ δ; each question solved with probability `--solved-rate`), the share of questions
  shown a *paraphrase* (another question with the same gold query) and the share shown a *distractor* (any other
  question), for each δ; and the δ that maximises the expected gain measured by the oracle-retrieval probe:
  +10/30 for a paraphrase shown, −4/30 for a distractor shown (docs/memrl.md).

Gold queries only label which pairs are paraphrases on the train split; they never reach a memory or a prompt.
The key's text is the environment's `task()` (the retrieval query of a run); `--plain` compares the bare question.

    python benchmarks/similarity_calibration.py [--embedder minilm] [--split train]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np

from ttlearn.envs.sql import SQLEnv, answer_key
from ttlearn.memory.embed import make_embedder

GAIN_PARAPHRASE, LOSS_DISTRACTOR = 10 / 30, 4 / 30
"""The probe's effect per question shown each kind of item (the oracle-retrieval probe in docs/memrl.md, on
concert_singer and pets_1, not committed: 19 → 29 of 30 with the paraphrase's verified query, 19 → 15 with the most
similar non-paraphrase)."""


def measure(texts: list[str], golds: list[str], dbs: list[str], embedder: str, solved_rate: float, orders: int) -> dict:
    vectors = make_embedder(embedder).embed(texts)
    by_db: dict[str, list[int]] = defaultdict(list)
    for i, db in enumerate(dbs):
        by_db[db].append(i)
    all_sims = []
    for members in by_db.values():
        block = vectors[members] @ vectors[members].T
        all_sims.extend(block[np.triu_indices(len(members), 1)].tolist())
    # A carried run in order: each question sees the earlier questions of its database that were solved (each with
    # probability `solved_rate`); the memory shows the most similar one when sim ≥ δ.
    rng = np.random.default_rng(0)
    tops = []  # (top similarity, whether the top key is a paraphrase) for every question that has a candidate
    asked = 0
    for _ in range(orders):
        for members in by_db.values():
            order = rng.permutation(members)
            solved = rng.random(len(order)) < solved_rate
            for position, i in enumerate(order):
                asked += 1
                earlier = [int(j) for j, ok in zip(order[:position], solved[:position]) if ok]
                if not earlier:
                    continue
                sims = vectors[earlier] @ vectors[i]
                top = earlier[int(np.argmax(sims))]
                tops.append((float(sims.max()), golds[top] == golds[i]))
    rows = []
    for delta in np.round(np.arange(0.30, 0.96, 0.025), 3):
        para = sum(s >= delta and p for s, p in tops) / asked
        distract = sum(s >= delta and not p for s, p in tops) / asked
        rows.append((float(delta), para, distract, GAIN_PARAPHRASE * para - LOSS_DISTRACTOR * distract))
    return {
        "mean": float(np.mean(all_sims)),
        "std": float(np.std(all_sims)),
        "questions": len(texts),
        "with_paraphrase": sum(golds.count(g) > 1 for g in golds),
        "rows": rows,
        "best": max(rows, key=lambda r: r[3]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--split", default="train", choices=("train", "test"))
    parser.add_argument("--plain", action="store_true", help="also measure the bare question as the key")
    parser.add_argument("--solved-rate", type=float, default=0.45, help="share of questions solved (control: ~0.45)")
    parser.add_argument("--orders", type=int, default=20, help="random question orders simulated per database")
    args = parser.parse_args()
    env = SQLEnv(split=args.split)
    questions = env.questions
    golds = [answer_key(q) for q in questions]
    dbs = [q.db for q in questions]
    forms = {"task()": [None] * len(questions)}
    for index, question in enumerate(questions):
        env.question = question
        forms["task()"][index] = env.task()
    if args.plain:
        forms["question only"] = [q.question for q in questions]
    for name, texts in forms.items():
        start = time.perf_counter()
        out = measure(texts, golds, dbs, args.embedder, args.solved_rate, args.orders)
        print(
            f"\n{args.embedder} · Spider {args.split} · key = {name} · {out['questions']} questions "
            f"({out['with_paraphrase']} with a paraphrase) · {time.perf_counter() - start:.1f} s"
        )
        print(f"similarity mean {out['mean']:.3f}  std {out['std']:.3f}")
        print("delta   paraphrase shown   distractor shown   expected gain")
        for delta, para, distract, gain in out["rows"]:
            mark = "  <- best" if (delta, para, distract, gain) == out["best"] else ""
            print(f"{delta:5.3f}   {para:16.3f}   {distract:16.3f}   {gain:+13.3f}{mark}")


if __name__ == "__main__":
    main()
