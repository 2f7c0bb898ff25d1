"""How many held-out sequences a MemoPilot test needs, from a training run's development evaluation.

    python benchmarks/memopilot_power.py RUN_DIR [--step N] [--effect E --sd S] [--opponents 9]

The trainer's development evaluation (`metrics.jsonl`: `eval_start` before the first step, `eval` every `eval_every`
steps) holds, per (opponent, seed) sequence, the greedy writer's mean score a round in games 2..T. The paired
differences between the evaluation after step N (default: the run's best) and the one before the first step are the
effect the held-out test looks for, in score a game (× rounds). Printed: their mean and standard deviation, and the
sequences a two-sided paired test at 0.05 needs for 0.8 power (`paired_sample_size`), rounded up to whole seeds of
`--opponents` sequences each. `--effect` / `--sd` (score a game) replace either figure, e.g. with a held-out test's
observed ones, so the protocol can state both.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from ttlearn.eval.metrics import paired_sample_size


def evaluations(run: Path) -> dict[int, dict]:
    """Every development evaluation's record (per-sequence `rewards` a round, `notes`, …), by the step it followed
    (0: before any)."""
    found: dict[int, dict] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        metrics = json.loads(line)
        for key in ("eval_start", "eval"):
            if key in metrics:
                found[metrics[key]["after_step"]] = metrics[key]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--step", type=int, help="the evaluation to compare with step 0 (default: the best)")
    parser.add_argument("--effect", type=float, help="replace the development effect (score a game)")
    parser.add_argument("--sd", type=float, help="replace the development spread (score a game)")
    parser.add_argument("--opponents", type=int, default=9, help="sequences a held-out seed adds (default 9)")
    args = parser.parse_args()
    rounds = json.loads((args.run / "train.json").read_text())["rounds"]
    found = {step: record["rewards"] for step, record in evaluations(args.run).items()}
    if 0 not in found or len(found) < 2:
        raise SystemExit(f"{args.run} has no evaluation before its first step and after one: nothing to compare")
    step = args.step if args.step is not None else max((s for s in found if s), key=lambda s: statistics.mean(found[s]))
    diffs = [rounds * (after - before) for after, before in zip(found[step], found[0], strict=True)]
    mean, sd = statistics.mean(diffs), statistics.stdev(diffs)
    print(f"development evaluation after step {step} vs step 0: {len(diffs)} sequences, "
          f"{sum(d > 1e-9 for d in diffs)} rose / {sum(d < -1e-9 for d in diffs)} fell; "
          f"difference a game mean {mean:+.3f}, sd {sd:.3f}")  # fmt: skip
    effect = args.effect if args.effect is not None else mean
    spread = args.sd if args.sd is not None else sd
    n = paired_sample_size(effect, spread)
    seeds = math.ceil(n / args.opponents)
    print(f"effect {effect:+.3f}, sd {spread:.3f} a game: {n} sequences for 0.8 power at alpha 0.05 "
          f"= {seeds} seeds × {args.opponents} opponents ({seeds * args.opponents} sequences)")  # fmt: skip


if __name__ == "__main__":
    main()
