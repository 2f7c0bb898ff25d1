"""The README's first run under the driver before issue 30 and under today's: wall time, and whether every record
is the same.

    before  one llama.cpp thread (the rule before), each task's control arm after its memory arm, every call
            evaluated;
    today   threads from what is idle (`default_threads`), the last epoch's control arms played ahead of their units,
            beside the memory arm's first epoch (a context of their own), and a greedy prompt answered before — the
            control asks what the memory arm asked whenever the memory showed nothing — answered again without
            evaluating it (`llm.llamacpp.GreedyReplies`).

Both play the README's config (Spider `split=test`, one database, memory `memrl`, `--control`, `--epochs 2`) from
scratch into fresh directories, one after the other; the model is loaded before each clock starts. The records are
compared with their wall times dropped (`without_times`), the memory state after every task included. The memory
arm is sequential (MemRL carries from question to question), so what can overlap is the controls, and once they are
done an idle machine's second core helps the memory arm; `--memory-arm-only` also times the memory arm alone on every
idle core (no control): the floor for any driver that keeps its records.

    python benchmarks/first_run.py [--database museum_visit] [--tasks 18] [--epochs 2] [--memory-arm-only]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from ttlearn.rollout.parts import LLMPool
from ttlearn.rollout.run import play, prepare
from ttlearn.runs import Run, RunConfig, without_times


def timed(config: RunConfig, out: Path, threads: str | None, today: bool) -> tuple[float, list[dict[str, Any]]]:
    """Wall seconds of playing `config` into `out` (`threads`: TTLEARN_THREADS at load, None: from what is idle)."""
    saved = os.environ.pop("TTLEARN_THREADS", None)
    if threads is not None:
        os.environ["TTLEARN_THREADS"] = threads
    pool = LLMPool()
    try:
        llm = pool.get(config.player)  # loaded, and its threads chosen, before the clock
        if not today:
            llm.greedy_replies = None
        run = prepare(out, config)
        start = time.perf_counter()
        play(run, pool=pool, control_ahead=today)
        wall = time.perf_counter() - start
    finally:
        pool.close()
        os.environ.pop("TTLEARN_THREADS", None)
        if saved is not None:
            os.environ["TTLEARN_THREADS"] = saved
    # a record names its memory state by a hash that covers the items' creation times: compare the states instead
    records = [{key: value for key, value in r.items() if key != "memory_hash"} for r in Run.open(out).records]
    states = [run.state_after(unit) for unit in range(1, run.done + 1)]
    return wall, without_times([records, states])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", default="museum_visit")
    parser.add_argument("--tasks", type=int, default=18)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--player", default="qwen-coder")
    parser.add_argument("--memory-arm-only", action="store_true", help="also time the memory arm alone (the floor)")
    args = parser.parse_args()
    config = RunConfig(
        env="sql",
        env_options={"split": "test", "database": args.database},
        memory="memrl",
        player=args.player,
        units=args.tasks,
        epochs=args.epochs,
        control=True,
    )
    with tempfile.TemporaryDirectory() as folder:
        # one run name in two folders: MemRL's provenance (so its `memory_hash`) holds the run's name
        before, old = timed(config, Path(folder) / "before" / "run", "1", today=False)
        today, new = timed(config, Path(folder) / "today" / "run", None, today=True)
        if args.memory_arm_only:
            alone = config.model_copy(update={"control": False})
            floor, _ = timed(alone, Path(folder) / "alone" / "run", None, today=True)
    units = f"{args.tasks * args.epochs} memory-arm tasks + {args.tasks} controls"
    print(f"{args.database} · {args.player} · {units}")
    print(f"before  {before:8.1f} s\ntoday   {today:8.1f} s   ratio today/before {today / before:.2f}")
    print(f"records identical (wall times aside): {'yes' if old == new else 'NO'}")
    if args.memory_arm_only:
        floor_ratio = floor / before
        print(f"memory arm alone {floor:8.1f} s   ratio floor/before {floor_ratio:.2f} (no control arm)")


if __name__ == "__main__":
    main()
