"""What a model did in recorded `db_bench` runs: how its tasks ended, where it repeated itself, and whether the other
engine would have judged the same replies the same way.

    python benchmarks/db_bench_replies.py RUN_DIR [RUN_DIR ...]            # per run: outcomes, rounds, seconds
    python benchmarks/db_bench_replies.py RUN_DIR --replay mariadb          # the same replies judged on MariaDB
    python benchmarks/db_bench_replies.py RUN_DIR --tasks                   # one line per task

A run directory (or a results folder with its records compressed) of `ttlearn run db_bench`. Each task's replies are
replayed on an engine (the run's own, or `--replay`'s) through the environment, step by step, with the table's hash
read after every operation, so this script sees what the records alone do not: whether an operation changed the
table. From that it counts the tasks where the model sent **the same operation as its previous reply on a table that
reply left unchanged** (its answer can only be the same again), and what the stop rule `repeat_stop`
(`envs/db_bench.py`) would have changed: the task ends at the first such reply, judged on what it holds then.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttlearn.envs import make_env
from ttlearn.envs._db_bench_reply import read_reply
from ttlearn.runs import RunDir
from ttlearn.runs.durable import read_durable

ENDS = ("answer", "unreadable", "round limit", "repeat", "no reply")


def unit_records(folder: Path) -> list[dict[str, Any]]:
    """A run's unit records: `units.jsonl`, or compressed (a committed result)."""
    found = RunDir(folder).records_file(RunDir.UNITS)
    if found is None:
        raise SystemExit(f"{folder} holds no unit records")
    return read_durable(found, repair=False)


def run_config(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "run.json").read_text())


@dataclass
class Played:
    """One recorded attempt replayed: how it ended, its verdict on the replay engine, and the rounds where it
    repeated an operation on an unchanged table."""

    task_id: int
    kind: str
    skills: list[str]
    replies: list[str]
    recorded: bool
    end: str = ""
    verdict: bool | None = None
    repeats: list[int] = field(default_factory=list)
    verdict_at_first_repeat: bool | None = None
    player_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    arm: str = "memory"


def replay(env: Any, played: Played, place: int) -> None:
    """Play `played.replies` again on `env`'s task number `place` (the played task): its end, verdict and repeats
    there."""
    env.reset(place)
    previous: tuple[str, ...] | None = None
    previous_changed = True
    for number, reply in enumerate(played.replies, 1):
        action = read_reply(reply) if reply else None
        if action is None:
            result = env.invalid_step(reply)
            played.end = "no reply" if not reply else "unreadable"
            break
        if action.kind == "operation" and action.statements == previous and not previous_changed:
            if not played.repeats:
                played.verdict_at_first_repeat = _verdict_if_ended_now(env)
            played.repeats.append(number)
        before = env.table.table_hash() if action.kind == "operation" else None
        result = env.step(reply)
        if result.done:
            played.end = "answer" if action.kind == "answer" else "round limit"
            break
        previous, previous_changed = action.statements, env.table.table_hash() != before
    else:
        played.end = played.end or "cut short"
    played.verdict = bool(env.verdict)


def _verdict_if_ended_now(env: Any) -> bool:
    """The verdict the task would get if it ended before this reply (the round limit's rule): a mutation by its table,
    a SELECT by an empty answer."""
    from ttlearn.envs._llb_verdict import answer_matches

    expected = env.current.expected(env.engine.name)
    if expected.md5 is not None:
        return env.table.table_hash() == expected.md5
    return answer_matches("", expected.rows or ())


def attempts_of(folder: Path) -> list[Played]:
    """Every unit's first attempt, and its control arm's: a unit record keeps the memory arm's steps; the control's
    replies are its player calls, recorded after the memory arm's (`rollout/unit.py`)."""
    found = []
    for unit in unit_records(folder):
        calls = [c for c in unit.get("calls", []) if c.get("role") == "player"]
        instance = unit["instance"]
        used = 0
        for number, attempt in enumerate(unit["attempts"]):
            replies = [step.get("raw") or step.get("action") or "" for step in attempt["steps"]]
            if number == 0:  # the first attempt: what the protocol judges (greedy later ones repeat it)
                found.append(_played(instance, replies, bool(attempt["success"]), calls[: len(replies)], unit))
            used += len(replies)
        if "control_first_success" in unit:
            control = calls[used:]
            solved = unit["control_first_success"] is not None
            played = _played(instance, [c["completion"]["text"] for c in control], solved, control, unit)
            played.arm = "control"
            found.append(played)
    return found


def _played(instance: dict[str, Any], replies: list[str], recorded: bool, calls: list[dict], unit: dict) -> Played:
    return Played(
        instance["task_id"],
        instance["kind"],
        instance["skills"],
        replies,
        recorded,
        player_s=[c["completion"]["latency_s"] for c in calls if not c.get("cached")],
        wall_s=unit.get("wall_s", 0.0),
    )


def summarize(name: str, plays: list[Played], engine: str) -> None:
    n = len(plays)
    if not n:
        print(f"{name}: no tasks")
        return
    solved = sum(p.verdict for p in plays)
    answered = sum(any((a := read_reply(r)) is not None and a.kind == "answer" for r in p.replies) for p in plays)
    rounds = [len(p.replies) for p in plays]
    ends = Counter(p.end for p in plays)
    turns = [s for p in plays for s in p.player_s]
    print(
        f"{name} ({engine}): {n} tasks, solved {solved} ({solved / n:.0%}); "
        f"ever answered {answered} ({answered / n:.0%})"
    )
    print("  ends: " + ", ".join(f"{e} {ends[e]}" for e in (*ENDS, "cut short") if ends[e]))
    for kind in ("select", "insert", "update", "delete"):
        some = [p for p in plays if p.kind == kind]
        if some:
            print(f"  {kind}: {sum(p.verdict for p in some)}/{len(some)} solved, "
                  f"{sum(p.end == 'answer' for p in some)} answered")  # fmt: skip
    print(f"  rounds: mean {statistics.mean(rounds):.1f}, median {statistics.median(rounds):g}, max {max(rounds)}")
    if turns:
        print(f"  s/turn (player calls): mean {statistics.mean(turns):.1f}, median {statistics.median(turns):.1f}; "
              f"s/task (wall): mean {statistics.mean(p.wall_s for p in plays):.0f}")  # fmt: skip
    repeated = [p for p in plays if p.repeats]
    saved = sum(len(p.replies) - p.repeats[0] + 1 for p in repeated)
    changed = [p for p in repeated if p.verdict_at_first_repeat != p.verdict]
    print(f"  repeated an operation on an unchanged table: {len(repeated)} tasks; of these solved in the end "
          f"{sum(p.verdict for p in repeated)}; the stop rule would change {len(changed)} verdicts "
          f"({', '.join(f'task {p.task_id}: {p.verdict} -> {p.verdict_at_first_repeat}' for p in changed) or 'none'}) "
          f"and save {saved} of {sum(rounds)} rounds")  # fmt: skip
    disagree = [p for p in plays if p.verdict != p.recorded]
    if disagree:
        print(f"  verdict differs from the record: {len(disagree)} tasks "
              f"({', '.join(f'{p.task_id}: {p.recorded} -> {p.verdict}' for p in disagree)})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--replay", choices=("sqlite", "mariadb"), help="judge the replies on this engine instead")
    parser.add_argument("--tasks", action="store_true", help="print one line per task")
    args = parser.parse_args()
    for folder in args.runs:
        config = run_config(folder)
        engine = args.replay or config["env_options"].get("engine", "sqlite")
        options = {k: v for k, v in config["env_options"].items() if k not in ("engine", "split", "task")}
        plays = attempts_of(folder)
        # One environment over every task the engine plays, so one server serves the whole run (a run of hundreds of
        # tasks with a server each ran this machine out of memory); a task is reached by its place in that list.
        env = make_env("db_bench", **options, engine=engine, split="all")
        place = {task.id: number for number, task in enumerate(env.tasks)}
        kept = []
        try:
            for played in plays:
                if played.task_id not in place:
                    print(f"  task {played.task_id} skipped: left out on {engine}")
                    continue
                replay(env, played, place[played.task_id])
                kept.append(played)
        finally:
            env.close()
        for arm in ("memory", "control"):
            some = [p for p in kept if p.arm == arm]
            if some:
                summarize(
                    f"{folder.name} [{arm}]" if any(p.arm == "control" for p in kept) else folder.name, some, engine
                )
        if args.tasks:
            for p in kept:
                more = "…" if len(p.repeats) > 3 else ""
                print(
                    f"    {p.arm:7} task {p.task_id:3} {p.kind:6} {'solved' if p.verdict else 'failed':6} "
                    f"{p.end:11} rounds {len(p.replies):2} repeats {p.repeats[:3]}{more}"
                )


if __name__ == "__main__":
    main()
