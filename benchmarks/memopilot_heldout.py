"""Held-out comparison of MemoPilot writers: mean per-round reward of games 2..T with a greedy writer vs no memory.

    python benchmarks/memopilot_heldout.py --run runs/mp --writer runs/mp/final --seeds 5000-5009 --json out.json

`--run` gives the training settings (its train.json, or config.json in older directories: env, opponents, T, rounds,
player, writer limits); `--writer` an adapter directory (omit it for the untrained writer = the base model). One row
per (opponent, seed); the summary gives the mean with a 95% t-interval over sequences, and the paired difference
writer − none.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TTLEARN_THREADS", "1")

import numpy as np
import torch

from ttlearn.runs import RunDir
from ttlearn.train.memopilot import MemoPilotTrainConfig, MemoPilotTrainer

T_975 = {
    1: 12.71,
    2: 4.30,
    3: 3.18,
    4: 2.78,
    5: 2.57,
    6: 2.45,
    7: 2.36,
    8: 2.31,
    9: 2.26,
    10: 2.23,
    14: 2.14,
    19: 2.09,
    29: 2.05,
}


def interval(values: list[float]) -> dict[str, float]:
    """mean ± t_{0.975, n−1} · s / √n (normal 1.96 beyond the table)."""
    x = np.asarray(values, float)
    n = len(x)
    if n < 2:
        return {"mean": float(x.mean()), "half_width": float("nan"), "n": n}
    t = T_975.get(n - 1, 1.96 if n > 30 else T_975[min(k for k in T_975 if k >= n - 1)])
    return {"mean": float(x.mean()), "half_width": float(t * x.std(ddof=1) / math.sqrt(n)), "n": n}


def seed_list(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True)
    parser.add_argument("--writer", default=None)
    parser.add_argument("--seeds", default="5000-5009")
    parser.add_argument("--opponents", default=None, help="comma list; default: the run's")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = json.loads(RunDir(args.run).trainer_config.read_text())
    if args.opponents:
        settings["opponents"] = args.opponents.split(",")
    settings.update(out=tempfile.mkdtemp(prefix="mp-heldout-"), eval_every=0)
    trainer = MemoPilotTrainer(MemoPilotTrainConfig(**settings))
    if args.writer:
        trainer.policy.load_adapter(args.writer)
    rows = []
    for opponent in trainer.config.opponents:
        for seed in seed_list(args.seeds):
            start = time.perf_counter()
            with_memory, none = trainer.heldout_rewards(opponent, seed)
            rows.append({"opponent": opponent, "seed": seed, "writer": with_memory, "none": none})
            print(json.dumps({**rows[-1], "s": round(time.perf_counter() - start, 1)}), flush=True)
    summary = {
        "writer": interval([r["writer"] for r in rows]),
        "none": interval([r["none"] for r in rows]),
        "writer_minus_none": interval([r["writer"] - r["none"] for r in rows]),
    }
    for opponent in trainer.config.opponents:
        summary[f"writer/{opponent}"] = interval([r["writer"] for r in rows if r["opponent"] == opponent])
        summary[f"none/{opponent}"] = interval([r["none"] for r in rows if r["opponent"] == opponent])
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"writer": args.writer, "rows": rows, "summary": summary}, f, indent=2)


if __name__ == "__main__":
    main()
