"""Seconds per task and per turn of `db_bench` on both engines, and the wall time of the whole `db_val` evaluation.

    python benchmarks/db_bench_speed.py [--llm qwen-coder] [--tasks 4] [-e stop_repeats=true] [--run RUN_DIR]

Each measurement is printed beside its raw baseline, measured in the same run:

1. The engines. The gold SQL of the first `--tasks` `dev` tasks (development data; never `val`), run as the agent's
   SQL runs — its table opened, the reply's statements, the table closed — on SQLite (a sandboxed child per reply)
   and on MariaDB (a query on the server this script starts; its start time is printed): seconds per reply, against
   the same statements run by `sqlite3` in this process (raw).
2. The model in the loop. The same tasks played by `--llm` (greedy, no memory; `-e` sets environment options, e.g.
   the protocol's) on each engine: seconds per task and per turn, against the model's own time in its calls (raw).
3. The evaluation. With `--run` (a run of the protocol's evaluation, memory arm and control): its wall time from its
   records, its tasks and turns, against the issue's target of 30 minutes. Without it, the evaluation projected
   from (2): 2 arms × 136 tasks × the seconds per task on MariaDB.

The machine's load (`uptime`) is printed before and after: on a shared machine, the times are what it gave.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from db_bench_replies import attempts_of, unit_records  # noqa: E402

from ttlearn.cli.common import parse_options  # noqa: E402
from ttlearn.data.db_bench import in_split, load_tasks  # noqa: E402
from ttlearn.envs import make_env  # noqa: E402
from ttlearn.envs._db_bench_engine import open_engine  # noqa: E402
from ttlearn.envs._db_bench_reply import read_reply  # noqa: E402
from ttlearn.llm import make_llm  # noqa: E402
from ttlearn.llm.cache import RecordingLLM  # noqa: E402
from ttlearn.players.llm import LLMPlayer  # noqa: E402
from ttlearn.rollout.loop import play_episode  # noqa: E402
from ttlearn.sandbox.statements import StatementLimits  # noqa: E402

TARGET_S = 30 * 60
VAL_TASKS = 136
"""`db_val` tasks with a ground truth on MariaDB, the protocol's engine."""


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def dev_tasks(count: int, engine: str) -> list:
    return [t for t in load_tasks() if in_split(t, "dev") and t.truth[engine].source != "none"][:count]


def raw_seconds(task) -> float:
    """The gold's statements on the task's table in an in-memory SQLite of this process: no sandbox, no server."""
    with closing(sqlite3.connect(":memory:")) as connection:
        names = ", ".join(f'"{n}"' for n, _ in task.columns)
        connection.execute(
            f'CREATE TABLE "{task.table}" ({", ".join(f"{chr(34)}{n}{chr(34)} {k}" for n, k in task.columns)})'
        )
        marks = ", ".join("?" * len(task.columns))
        connection.executemany(
            f'INSERT INTO "{task.table}" ({names}) VALUES ({marks})', [tuple(map(str, r)) for r in task.rows]
        )
        action = read_reply(f"Action: Operation\n```sql\n{task.gold}\n```")
        started = time.perf_counter()
        for statement in action.statements:
            try:
                connection.execute(statement).fetchall()
            except sqlite3.Error:
                pass
        return time.perf_counter() - started


def engine_seconds(task, engine) -> tuple[float, float]:
    """(seconds to open and close the task's table, seconds to run its gold as one reply) on `engine`."""
    action = read_reply(f"Action: Operation\n```sql\n{task.gold}\n```")
    started = time.perf_counter()
    table = engine.open_table(task)
    opened = time.perf_counter()
    table.execute(action.statements)
    ran = time.perf_counter()
    table.close()
    return (opened - started) + (time.perf_counter() - ran), ran - opened


def play(llm_spec: str, tasks: list, engine: str, options: dict) -> list[dict]:
    """Each task played once by the model: its wall seconds, turns and the model's own seconds."""
    calls: list[dict] = []
    llm = RecordingLLM(make_llm(llm_spec), "player", calls.append, llm_spec)
    player = LLMPlayer(llm)
    played = []
    for task in tasks:
        env = make_env("db_bench", **options, engine=engine, task=task.id)
        calls.clear()
        started = time.perf_counter()
        episode = play_episode(env, player, lambda _query: "", index=1, seed=0, act_seed=lambda step: step)
        model_s = sum(c["completion"]["latency_s"] for c in calls)
        seconds = time.perf_counter() - started
        played.append(
            {"task": task.id, "s": seconds, "turns": len(episode.steps), "model_s": model_s, "solved": episode.success}
        )
        env.close()
    llm.close()
    return played


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="qwen-coder")
    parser.add_argument("--tasks", type=int, default=4, help="dev tasks to time (default 4)")
    parser.add_argument("-e", "--env-opt", action="append", default=[], help="environment option KEY=VALUE")
    parser.add_argument("--run", type=Path, help="a run of the protocol's evaluation: its wall time")
    parser.add_argument("--no-model", action="store_true", help="time the engines only")
    args = parser.parse_args()
    options = parse_options(args.env_opt, "-e")
    print(f"load before: {load()}")
    print(f"threads: TTLEARN_THREADS={os.environ.get('TTLEARN_THREADS', 'auto')}")

    engines = {name: open_engine(name, StatementLimits()) for name in ("sqlite", "mariadb")}
    tasks = dev_tasks(args.tasks, "mariadb")
    started = time.perf_counter()
    engines["mariadb"].open_table(tasks[0]).close()  # its server starts at its first table
    print(f"MariaDB server start: {time.perf_counter() - started:.2f} s")
    try:
        raw = [raw_seconds(t) for t in tasks]
        per_engine = {name: [engine_seconds(t, engine) for t in tasks] for name, engine in engines.items()}
        print(f"engines, {len(tasks)} dev tasks' gold SQL, median per reply (raw: in-process sqlite3 "
              f"{statistics.median(raw) * 1000:.2f} ms):")  # fmt: skip
        for engine, times in per_engine.items():
            run_s = statistics.median(s for _, s in times)
            table_s = statistics.median(s for s, _ in times)
            ratio = run_s / max(statistics.median(raw), 1e-6)
            print(
                f"  {engine:8} statements {run_s * 1000:8.1f} ms (ratio to raw {ratio:7.0f}), "
                f"table open + close {table_s * 1000:7.1f} ms"
            )

        per_task_s: dict[str, float] = {}
        if not args.no_model:
            for engine in ("sqlite", "mariadb"):
                played = play(args.llm, tasks, engine, options)
                turns = sum(p["turns"] for p in played)
                wall, model = sum(p["s"] for p in played), sum(p["model_s"] for p in played)
                per_task_s[engine] = wall / len(played)
                print(
                    f"model in the loop ({args.llm}, {engine}, {json.dumps(options)}): {len(played)} tasks, "
                    f"{turns} turns, {wall / len(played):.1f} s per task, {wall / turns:.1f} s per turn; the model's "
                    f"own time {model / turns:.1f} s per turn (ratio of a turn to it {wall / max(model, 1e-9):.2f}); "
                    f"solved {sum(p['solved'] for p in played)}"
                )
    finally:
        for engine in engines.values():
            engine.close()

    if args.run is not None:
        plays = attempts_of(args.run)
        units = unit_records(args.run)
        wall = sum(u["wall_s"] for u in units)
        turns = sum(len(p.replies) for p in plays)
        print(f"the evaluation {args.run}: {len(units)} units, {len(plays)} tasks played (both arms), {turns} turns; "
              f"wall {wall / 60:.0f} min ({wall / len(plays):.0f} s per task, {wall / turns:.1f} s per turn); "
              f"ratio to the 30-minute target {wall / TARGET_S:.1f}")  # fmt: skip
    elif per_task_s:
        projected = 2 * VAL_TASKS * per_task_s["mariadb"]
        print(f"the evaluation projected: 2 arms × {VAL_TASKS} tasks × {per_task_s['mariadb']:.1f} s = "
              f"{projected / 60:.0f} min; ratio to the 30-minute target {projected / TARGET_S:.1f}")  # fmt: skip
    print(f"load after: {load()}")


if __name__ == "__main__":
    main()
