"""Framework overhead of the session loop on the embedded model (target: ≤ 5 % of wall time).

Plays a short RPS session, then sends the very same recorded calls to the raw back end in a bare loop, and prints
    overhead  = (session wall − time inside the LLM) / session wall
    LLM calls/s in the session vs calls/s of the raw back end on the same prompts.

    python benchmarks/loop_overhead.py --games 2 --rounds 20 --memory none
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ttlearn.llm import make_llm
from ttlearn.rollout.parts import LLMPool
from ttlearn.rollout.run import play, prepare
from ttlearn.runs import RunConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="smollm2")
    parser.add_argument("--games", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--memory", default="none")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        config = RunConfig(
            env="rps",
            env_options={"opponent": "cycle3", "rounds": args.rounds},
            memory=args.memory,
            player=args.llm,
            units=args.games,
            attempts=1,
            carry_memory=True,
        )
        run = prepare(Path(tmp) / "run", config)
        pool = LLMPool()
        pool.get(args.llm)  # loaded before the clock starts
        start = time.perf_counter()
        play(run, pool=pool)
        wall = time.perf_counter() - start
        calls = run.calls()
        llm_s = sum(c["wall_s"] for c in calls)
        pool.close()

    raw = make_llm(args.llm)
    start = time.perf_counter()
    for call in calls:
        p = call["params"]
        raw.complete(
            call["messages"],
            max_tokens=p["max_tokens"],
            temperature=p["temperature"],
            seed=p["seed"],
            stop=p["stop"],
            choices=p["choices"],
        )
    raw_wall = time.perf_counter() - start
    raw.close()

    overhead = (wall - llm_s) / wall
    session_rate, raw_rate = len(calls) / wall, len(calls) / raw_wall
    print(f"calls: {len(calls)}  session wall: {wall:.2f}s  inside LLM: {llm_s:.2f}s")
    print(f"framework overhead: {overhead:.1%}  (target ≤ 5%)")
    print(f"LLM calls/s: session {session_rate:.2f}  raw back end {raw_rate:.2f}  ratio {session_rate / raw_rate:.3f}")


if __name__ == "__main__":
    main()
