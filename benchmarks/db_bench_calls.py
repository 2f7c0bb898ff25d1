"""Where a `db_bench` task's seconds go, today's llama.cpp path against the prefix store (`PrefixStore`), same run.

    python benchmarks/db_bench_calls.py [--llm qwen-coder|qwen-coder-1.5b] [--tasks 3] [--engine sqlite|mariadb]

Plays the protocol's evaluation on `dev` tasks (development data; never `val`): MemRL with the `llb` preset, frozen,
from the memory the pre-registered building run left (`results/db-bench-llb-build`: 10 failure reflections), and the
control arm, `stop_repeats=true`, greedy, through the run driver (`rollout.run.play`) as `ttlearn run … --control`
plays it. Each path plays the same run in a child process of its own (its own model, greedy-reply book and peak
RSS), today's first; the model's llama.cpp threads are what `TTLEARN_THREADS` says (default 1: the machine is shared).

Printed per path: seconds per task (both arms) and per call by phase — prefill (prompt tokens evaluated), decode
(tokens generated), statements (the engine: the task's table opened, the reply's SQL, the verdict), the rest (the
memory's retrieval, the driver) — from the units' wall time (the model and the embedder load before it) — the prompt
tokens evaluated and reused per call, ms per prefill and per decode token, peak RSS; then the ratios to
today's path and whether every reply and verdict is the same. The machine's load (`uptime`) is printed before and
after: on a shared machine, the seconds are what it gave, and the token counts are what moves, so the new path is also
priced at today's per-token costs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BUILD = Path(__file__).resolve().parent.parent / "results" / "db-bench-llb-build"
PATHS = ("today", "store")


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def unpacked_memory(into: Path) -> Path:
    """The building run's records, uncompressed where `--memory-from` reads them."""
    into.mkdir(parents=True, exist_ok=True)
    for source in BUILD.iterdir():
        if source.suffix == ".gz":
            with gzip.open(source) as packed, open(into / source.stem, "wb") as plain:
                shutil.copyfileobj(packed, plain)
        else:
            shutil.copy(source, into / source.name)
    return into


class Phases:
    """Seconds and tokens by phase, from llama.cpp's `Llama.eval` and the environment's reset and step: inside
    `create_completion` the first evaluation is the prompt's last block, every later one a generated token; outside
    it, an evaluation is prompt blocks (the store's whole blocks, or a scored prompt)."""

    def __init__(self) -> None:
        self.seconds = {"prefill": 0.0, "decode": 0.0, "statements": 0.0}
        self.tokens = {"prefill": 0, "decode": 0, "prompt": 0}
        self.calls = 0
        self._local = threading.local()
        self._lock = threading.Lock()

    def add(self, phase: str, seconds: float, tokens: int = 0) -> None:
        with self._lock:
            self.seconds[phase] += seconds
            if phase in self.tokens:
                self.tokens[phase] += tokens

    def install(self) -> None:
        from llama_cpp import Llama

        from ttlearn.envs.db_bench import DBBench
        from ttlearn.llm.llamacpp import LlamaCpp

        phases, local = self, self._local
        evaluate, complete, generate = Llama.eval, LlamaCpp._complete, Llama.create_completion

        def timed_eval(llama, tokens):
            started = time.perf_counter()
            evaluate(llama, tokens)
            phase = "decode" if getattr(local, "evals", None) else "prefill"
            if getattr(local, "evals", None) is not None:
                local.evals += 1
            phases.add(phase, time.perf_counter() - started, len(tokens))

        def counted_complete(llm, text, *args):
            reply = complete(llm, text, *args)
            with phases._lock:
                phases.calls += 1
                phases.tokens["prompt"] += reply.prompt_tokens
            return reply

        def in_completion(llama, *args, **kwargs):
            local.evals = 0
            try:
                return generate(llama, *args, **kwargs)
            finally:
                local.evals = None

        def timed(method):
            def run(env, *args, **kwargs):
                started = time.perf_counter()
                try:
                    return method(env, *args, **kwargs)
                finally:
                    phases.add("statements", time.perf_counter() - started)

            return run

        Llama.eval, LlamaCpp._complete, Llama.create_completion = timed_eval, counted_complete, in_completion
        DBBench.reset, DBBench.step = timed(DBBench.reset), timed(DBBench.step)


def play_path(path: str, args: argparse.Namespace, memory: Path, out: Path) -> dict:
    """One path's run (in this process, a child of `main`): its phases, wall time and records' replies."""
    from ttlearn.llm import make_llm
    from ttlearn.llm.llamacpp import LlamaCpp
    from ttlearn.llm.models import EMBEDDED, model_path
    from ttlearn.rollout.run import play, prepare
    from ttlearn.runs import RunConfig

    phases = Phases()
    phases.install()

    def factory(spec: str):
        if path == "store":
            return make_llm(spec)
        # each slot reuses only its own cache, as before the store
        return LlamaCpp(model_path(spec), spec, choice_method=EMBEDDED[spec].choice_method, prefix_bytes=0)

    config = RunConfig(
        env="db_bench",
        env_options={"split": "dev", "engine": args.engine, "stop_repeats": True, "max_round": args.max_round},
        memory="memrl",
        memory_options={"preset": "llb"},
        player=args.llm,
        seed=1,
        units=args.tasks,
        attempts=1,
        carry_memory=False,
        control=True,
        memory_from=str(memory),
    )
    import torch

    from ttlearn.memory.embed import MiniLMEmbedder

    torch.set_num_threads(1)
    MiniLMEmbedder().embed(["loaded before the clock starts"])
    with prepare(out, config) as run:
        play(run, llm_factory=factory)
        records = list(run.records)
    return {
        "wall_s": sum(r["wall_s"] for r in records),
        "seconds": phases.seconds,
        "tokens": phases.tokens,
        "calls": phases.calls,
        "turns": sum(len(a["steps"]) for r in records for a in r["attempts"])
        + sum(r["control_steps"] for r in records),
        "replies": [c["completion"]["text"] for r in records for c in r["calls"]],
        "verdicts": [(r["first_success"], r.get("control_first_success")) for r in records],
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def report(path: str, result: dict, tasks: int, today: dict | None) -> None:
    s, t, calls = result["seconds"], result["tokens"], max(result["calls"], 1)
    rest = result["wall_s"] - sum(s.values())
    ratio = "" if today is None else f" (today's ÷ this: {today['wall_s'] / result['wall_s']:.2f}×)"
    print(f"{path:6} {result['wall_s'] / tasks:7.1f} s per task{ratio}, {result['calls']} calls, "
          f"{result['turns']} turns, peak RSS {result['peak_rss_mb']:.0f} MB")  # fmt: skip
    print(f"       per call: {result['wall_s'] / calls:5.2f} s = prefill {s['prefill'] / calls:5.2f} s "
          f"+ decode {s['decode'] / calls:5.2f} s + statements {s['statements'] / calls:5.2f} s "
          f"+ rest {rest / calls:5.2f} s")  # fmt: skip
    reused = t["prompt"] - t["prefill"]
    print(f"       per call: {t['prompt'] / calls:6.0f} prompt tokens, {t['prefill'] / calls:6.0f} evaluated, "
          f"{reused / calls:6.0f} reused ({reused / max(t['prompt'], 1):.0%}); {t['decode'] / calls:5.1f} generated; "
          f"{1000 * s['prefill'] / max(t['prefill'], 1):5.1f} ms per prompt token evaluated, "
          f"{1000 * s['decode'] / max(t['decode'], 1):5.1f} ms per generated token")  # fmt: skip
    shares = {k: v / result["wall_s"] for k, v in s.items()}
    print(f"       shares of the wall time: prefill {shares['prefill']:.0%}, decode {shares['decode']:.0%}, "
          f"statements {shares['statements']:.0%}, rest {rest / result['wall_s']:.0%}")  # fmt: skip
    if today is not None:
        for phase in s:
            print(f"       {phase}: today's ÷ this {today['seconds'][phase] / max(s[phase], 1e-9):5.2f}×", end="")
        print(f"; prompt tokens evaluated: today's ÷ this {today['tokens']['prefill'] / max(t['prefill'], 1):.2f}×")
        at_today = projected(result, today)
        print(f"       at today's per-token costs (what the load cannot move): {at_today / tasks:.1f} s per task, "
              f"today's ÷ this {today['wall_s'] / at_today:.2f}×")  # fmt: skip


def projected(result: dict, today: dict) -> float:
    """`result`'s wall time had its prompt and generated tokens cost what they cost on today's path."""
    cost = {phase: today["seconds"][phase] / max(today["tokens"][phase], 1) for phase in ("prefill", "decode")}
    other = today["wall_s"] - today["seconds"]["prefill"] - today["seconds"]["decode"]
    return other + sum(cost[phase] * result["tokens"][phase] for phase in cost)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="qwen-coder", help="an embedded llama.cpp model (qwen-coder-1.5b: ~1 GB)")
    parser.add_argument("--tasks", type=int, default=3, help="dev tasks, each played by both arms (default 3)")
    parser.add_argument("--engine", default="sqlite", choices=("sqlite", "mariadb"))
    parser.add_argument("--max-round", type=int, default=15, help="the task's round limit (the runner's 15)")
    parser.add_argument("--path", choices=PATHS, help=argparse.SUPPRESS)  # a child's one path
    parser.add_argument("--scratch", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.path is not None:
        result = play_path(args.path, args, args.scratch / "memory", args.scratch / args.path)
        (args.scratch / f"{args.path}.json").write_text(json.dumps(result))
        return

    os.environ.setdefault("TTLEARN_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(f"load before: {load()}")
    print(f"{args.llm}, llama.cpp threads {os.environ['TTLEARN_THREADS']}, {args.engine}, {args.tasks} dev tasks "
          "× (memory arm + control), MemRL llb frozen from results/db-bench-llb-build, "
          "stop_repeats, greedy")  # fmt: skip
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="db-bench-calls-") as scratch:
        unpacked_memory(Path(scratch) / "memory")
        for path in PATHS:
            child = [sys.executable, __file__, "--path", path, "--scratch", scratch, "--llm", args.llm]
            options = ["--tasks", str(args.tasks), "--engine", args.engine, "--max-round", str(args.max_round)]
            subprocess.run([*child, *options], check=True)
            results[path] = json.loads((Path(scratch) / f"{path}.json").read_text())
    for path, result in results.items():
        report(path, result, args.tasks, None if path == "today" else results["today"])
    same = all(results[p]["replies"] == results["today"]["replies"] for p in PATHS) and all(
        results[p]["verdicts"] == results["today"]["verdicts"] for p in PATHS
    )
    print(f"every reply and verdict identical to today's path: {'yes' if same else 'NO'}")
    print(f"load after: {load()}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
