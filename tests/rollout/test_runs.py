"""Run directories: durable units, torn tails, kill -9 and resume, fork-free replay of scripted runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ttlearn.rollout.run import play as play_units, prepare
from ttlearn.runs import Run, RunConfig, SnapshotStore, canonical_hash, latest_state
from ttlearn.types import Episode


def scripted_config(**overrides) -> RunConfig:
    base = dict(
        env="rps",
        env_options={"opponent": "cycle3", "rounds": 10},
        memory="history",
        player="scripted:learner",
        units=4,
        attempts=1,
        carry_memory=True,
        seed=3,
    )
    return RunConfig(**{**base, **overrides})


def episodes(run: Run) -> list[Episode]:
    """Each unit's (one) attempt."""
    return [Episode.from_json(r["attempts"][-1]) for r in run.records]


def play(path: Path, config: RunConfig) -> Run:
    run = prepare(path, config)
    play_units(run)
    return run


def test_run_directory_holds_config_units_snapshots(tmp_path):
    run = play(tmp_path / "r", scripted_config())
    assert json.loads((run.path / "run.json").read_text())["env"] == "rps"
    files = ["run.json", "snapshots.jsonl", "summary.json", "units.jsonl"]
    assert sorted(p.name for p in run.path.iterdir()) == files
    units = [json.loads(line) for line in (run.path / "units.jsonl").read_text().splitlines()]
    assert [u["index"] for u in units] == [1, 2, 3, 4] and sum(len(u["attempts"][0]["steps"]) for u in units) == 40
    snap = run.snapshot(4)
    assert len(snap["state"]["memory"]["logs"]) == 2 and snap["hash"] == canonical_hash(snap["state"])
    assert [u["memory_hash"] for u in units] == [run.snapshot(u)["hash"] for u in (1, 2, 3, 4)]
    assert Run.open(run.path).snapshot(3) == run.snapshot(3)


def memrl_like_state(tasks: int) -> dict:
    """A carried memory after `tasks` tasks: one new item per task (a 1.5 kB text), and every task updates the Q of
    the three items it retrieved, as MemRL's does."""
    items = [{"id": i, "text": f"{i} " + "x" * 1500, "q": 0.0} for i in range(tasks)]
    for t in range(tasks):
        for i in (t * 7 % tasks, t * 13 % tasks, t * 29 % tasks):
            items[i]["q"] += 0.1
    return {"memories": {"items": items}, "retrieved": [1, 2], "rng": {"state": tasks}}


def test_snapshots_are_stored_once_by_content_and_grow_linearly(tmp_path):
    store = SnapshotStore(tmp_path / "snapshots.jsonl")
    sizes, keys = [0], []
    for tasks in range(1, 201):
        keys.append(store.put(memrl_like_state(tasks)))
        sizes.append(store.path.stat().st_size)
    first, second = sizes[100] - sizes[0], sizes[200] - sizes[100]
    assert second < 1.3 * first  # quadratic growth would make the second hundred tasks cost 3x the first
    whole = sum(len(json.dumps(memrl_like_state(t))) for t in range(1, 201))
    assert sizes[-1] < whole / 10  # what embedding every state in every record cost
    assert store.put(memrl_like_state(200)) == keys[-1] and store.path.stat().st_size == sizes[-1]  # stored once
    reread = SnapshotStore(store.path)
    assert [reread.get(keys[t - 1]) for t in (1, 77, 200)] == [memrl_like_state(t) for t in (1, 77, 200)]


def test_a_torn_snapshot_write_is_dropped_before_the_next_one(tmp_path):
    store = SnapshotStore(tmp_path / "snapshots.jsonl")
    kept = store.put(memrl_like_state(3))
    with open(store.path, "a") as fh:
        fh.write('{"hash": "abc", "val')  # a write cut by a kill
    store = SnapshotStore(store.path)
    later = store.put(memrl_like_state(4))
    reread = SnapshotStore(store.path)
    assert reread.get(kept) == memrl_like_state(3) and reread.get(later) == memrl_like_state(4)
    with pytest.raises(ValueError, match="reserve"):
        store.put({"notes": {"$chunks": []}})


def test_torn_tail_is_dropped_and_the_game_replayed(tmp_path):
    full = play(tmp_path / "full", scripted_config())
    torn = play(tmp_path / "torn", scripted_config(units=2))
    with open(torn.path / "units.jsonl", "a") as fh:
        fh.write('{"index": 3, "type": "task", "attempts": [{"steps')  # a write cut by a kill
    reopened = Run.open(torn.path)
    assert reopened.done == 2
    reopened.config = scripted_config()  # extend the run to the full length
    play_units(reopened)
    again = Run.open(torn.path)
    assert [r["index"] for r in again.records] == [1, 2, 3, 4]
    assert [e.score for e in episodes(again)] == [e.score for e in episodes(full)]


def test_existing_run_is_not_overwritten(tmp_path):
    play(tmp_path / "r", scripted_config(units=1))
    with pytest.raises(FileExistsError):
        Run.create(tmp_path / "r", scripted_config())


def cli(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    return subprocess.Popen(
        [sys.executable, "-m", "ttlearn", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def game_records(path: Path) -> list[int]:
    """The indices of the units on disk (a torn last line skipped)."""
    units = path / "units.jsonl"
    if not units.exists():
        return []
    out = []
    for line in units.read_text().splitlines():
        try:
            out.append(json.loads(line)["index"])
        except json.JSONDecodeError:
            continue
    return out


def test_kill_9_then_resume_matches_an_uninterrupted_run(tmp_path):
    args = [
        "run",
        "rps",
        "--opponent",
        "probe",
        "--rounds",
        "300",
        "--games",
        "12",
        "--memory",
        "history",
        "--llm",
        "scripted:learner",
        "--seed",
        "5",
    ]
    reference = cli(*args, "--out", str(tmp_path / "ref"))
    assert reference.wait(timeout=300) == 0, reference.stdout.read()

    victim = cli(*args, "--out", str(tmp_path / "killed"))
    deadline = time.time() + 120
    while len(game_records(tmp_path / "killed")) < 3 and time.time() < deadline:
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    done_before = len(game_records(tmp_path / "killed"))
    assert 3 <= done_before < 12, "the kill must land mid-run"

    resumed = cli("resume", str(tmp_path / "killed"))
    assert resumed.wait(timeout=300) == 0, resumed.stdout.read()
    games = game_records(tmp_path / "killed")
    assert games == list(range(1, 13))  # every game once, in order
    ref, killed = Run.open(tmp_path / "ref"), Run.open(tmp_path / "killed")
    assert [e.score for e in episodes(killed)] == [e.score for e in episodes(ref)]
    assert killed.snapshot(12)["hash"] == ref.snapshot(12)["hash"]


def test_kill_9_mid_flight_with_concurrency_resumes_exactly_as_a_sequential_run(tmp_path):
    """Three games in flight, killed: the directory holds a prefix of the games in order, and resuming (again with
    three in flight) ends identical to a run that played one game at a time."""
    # 30 quick games: a wide window for the kill to land mid-run on an idle machine (12 could all finish first)
    args = ["run", "rps", "--opponent", "nash", "--rounds", "400", "--games", "30", "--llm", "scripted:random"]
    reference = cli(*args, "--out", str(tmp_path / "ref"))
    assert reference.wait(timeout=300) == 0, reference.stdout.read()

    victim = cli(*args, "--concurrency", "3", "--out", str(tmp_path / "killed"))
    deadline = time.time() + 120
    while len(game_records(tmp_path / "killed")) < 3 and time.time() < deadline:
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    done_before = game_records(tmp_path / "killed")
    assert done_before == list(range(1, len(done_before) + 1)) and 3 <= len(done_before) < 30, done_before

    resumed = cli("resume", str(tmp_path / "killed"), "--concurrency", "3")
    assert resumed.wait(timeout=300) == 0, resumed.stdout.read()
    assert game_records(tmp_path / "killed") == list(range(1, 31))
    ref, killed = Run.open(tmp_path / "ref"), Run.open(tmp_path / "killed")
    assert [e.score for e in episodes(killed)] == [e.score for e in episodes(ref)]
    assert [[s.action for s in e.steps] for e in episodes(killed)] == [[s.action for s in e.steps] for e in episodes(ref)]


def test_concurrency_is_refused_where_games_depend_on_each_other(tmp_path):
    with pytest.raises(ValueError, match="depend on each other"):
        prepare(tmp_path / "r", scripted_config(), concurrency=2)


LEGACY = Path(__file__).parents[1] / "data" / "legacy"
"""Run directories written before snapshots were stored by content (by ttlearn at commit 677f6c8): a session with
snapshots/game_NNNN.json, a fork of its game 2, and a carried trial run whose records embed their memory."""


def test_an_old_session_still_reads_replays_and_resumes(tmp_path):
    import shutil

    from ttlearn.runs import latest_state

    old = Run.open(LEGACY / "session", repair=False)
    files = [json.loads((LEGACY / "session" / "snapshots" / f"game_{g:04d}.json").read_text()) for g in (1, 2, 3)]
    assert [old.snapshot(g)["state"] for g in (1, 2, 3)] == [f["state"] for f in files]
    fork_file = LEGACY / "fork" / "snapshots" / "game_0002.json"
    assert latest_state(LEGACY / "fork") == files[1]["state"] == latest_state(fork_file)
    replay = cli("replay", str(LEGACY / "session"), "--out", str(tmp_path / "replayed"))
    assert replay.wait(timeout=120) == 0 and "reproduced exactly" in replay.stdout.read()
    copy = tmp_path / "extended"
    shutil.copytree(LEGACY / "session", copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "games": 4}))
    run = Run.open(copy)
    play_units(run)
    reread = Run.open(copy)
    assert reread.snapshot(2)["state"] == files[1]["state"] and len(reread.snapshot(4)["state"]["memory"]["logs"]) == 2
    assert (copy / "snapshots.jsonl").exists()  # game 4 went into the content store, games 1-3 stay in their files


def test_an_old_trial_run_still_reads_and_resumes_where_it_stopped(tmp_path):
    import shutil

    old = [json.loads(line) for line in (LEGACY / "trials" / "tasks.jsonl").read_text().splitlines()]
    read = Run.open(LEGACY / "trials", repair=False)
    assert [read.state_after(i)["memory"] for i in (1, 2, 3)] == [r["memory"] for r in old]
    assert read.snapshot(3)["state"] == {"memory": old[2]["memory"]}
    copy = tmp_path / "t"
    shutil.copytree(LEGACY / "trials", copy)
    (copy / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old[:2]))  # stopped after task 2
    play_units(prepare(copy))
    resumed = Run.open(copy).records

    def played(record: dict) -> list:
        return [(a["steps"], a["score"], a["info"]["context"]) for a in record["attempts"]]

    assert played(resumed[2]) == played(old[2])  # task 3 started from task 2's embedded memory
    assert Run.open(copy).state_after(3)["memory"] == old[2]["memory"] and "memory" not in resumed[2]


def test_every_committed_config_still_loads():
    from ttlearn.runs import holds_run, read_config

    root = Path(__file__).parents[2]
    dirs = sorted({c.parent for name in ("trials.json", "run.json", "events.jsonl") for c in root.glob(f"**/{name}")})
    dirs = [d for d in dirs if holds_run(d) and ".git" not in d.parts]
    assert len(dirs) > 20
    seedings = {read_config(d).seeding for d in dirs}
    assert {"trials-v1", "session-v1"} <= seedings


def test_a_memory_that_reflects_between_attempts_is_refused_with_one_attempt_whoever_builds_it(tmp_path):
    """The memory declares it (`needs_trials`); the check is the config's, not a name list in the CLI."""
    with pytest.raises(ValueError, match="give --attempts N"):
        prepare(tmp_path / "r", scripted_config(memory="lamer"))


def test_a_config_checks_itself():
    """What needs no plug-in is checked by the config, wherever it is built (CLI, library, arena)."""
    from ttlearn.runs import parse_config

    assert parse_config({"env": "rps"}).seeding == "unit"
    with pytest.raises(ValueError, match="what memory 'none' already does"):
        RunConfig(env="sokoban", memory="none", control=True).check()
    with pytest.raises(ValueError, match="^units: Input should be greater than or equal to 1$"):
        parse_config({"env": "rps", "units": 0})
    with pytest.raises(ValueError, match="^games: Extra inputs are not permitted$"):
        parse_config({"env": "rps", "games": 2})


def test_control_on_a_session_of_games_and_memory_from_on_a_task_run(tmp_path):
    """Every option where it means something: a paired control beside a session of games, and a run of independent
    tasks that each start from another run's memory."""
    session = play(tmp_path / "s", scripted_config(memory="history", control=True, player="scripted:random"))
    records = Run.open(session.path).records
    assert all("control_first_success" in r for r in records)
    assert Run.open(session.path).snapshot(4)["state"]["memory"]["logs"]
    source = Run.open(session.path).snapshot(4)["state"]
    tasks = play(
        tmp_path / "t",
        scripted_config(memory_from=str(session.path), units=2, attempts=2, carry_memory=False, player="scripted:random"),
    )
    assert tasks.config.memory_from == str(session.path)
    first = Episode.from_json(Run.open(tasks.path).records[0]["attempts"][0])
    assert first.info["context"] and first.info["context"] == Episode.from_json(
        Run.open(tasks.path).records[1]["attempts"][0]
    ).info["context"]  # both tasks start from the forked memory, not from each other
    assert len(source["memory"]["logs"]) == 2


def test_a_trial_run_builds_its_environment_once_to_validate_and_once_to_play(tmp_path, monkeypatch):
    """Validation happens once, in one place: `ttlearn run --tasks` checks the config once before it plays."""
    from typer.testing import CliRunner

    from ttlearn.cli import app
    from ttlearn.rollout import parts

    built = []
    make_env = parts.make_env
    monkeypatch.setattr(parts, "make_env", lambda *args, **kwargs: built.append(args) or make_env(*args, **kwargs))
    args = ["run", "minesweeper", "--tasks", "2", "--attempts", "1", "--llm", "scripted:random"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    assert len(built) == 2  # one for the check, one for the worker that plays


@pytest.mark.parametrize("kind", ["--games", "--tasks"])
def test_every_command_reads_either_kind_of_run(tmp_path, kind):
    """run, show, show --unit, resume, replay and memory diff / fork take a session of games and a task run alike:
    both are runs of units."""
    from typer.testing import CliRunner

    from ttlearn.cli import app

    def ok(*args: str) -> str:
        result = CliRunner().invoke(app, list(args), env={"COLUMNS": "160"})
        assert result.exit_code == 0, result.output
        return result.output

    out = str(tmp_path / "r")
    ok("run", "minesweeper", "--memory", "history", kind, "3", "--llm", "scripted:random", "--out", out)
    assert "3 of 3 units finished" in ok("show", out)
    assert "step 1:" in ok("show", out, "--unit", "2") == ok("show", out, "--game", "2")
    assert "already complete" in ok("resume", out)
    assert "reproduced exactly" in ok("replay", out, "--out", str(tmp_path / "again"))
    assert "after unit 3" in ok("memory", "diff", out, "--from", "1", "--to", "3")
    ok("memory", "fork", out, "--unit", "2", "--out", str(tmp_path / "fork"))
    assert Run.open(out).snapshot(2)["state"] == latest_state(tmp_path / "fork")


def test_without_times_drops_every_wall_clock_field_and_nothing_else() -> None:
    from ttlearn.runs import without_times

    record = {
        "task": 1,
        "wall_s": 3.2,
        "calls": [{"wall_s": 1.0, "completion": {"text": "x", "latency_s": 0.9}}],
        "attempts": [{"info": {"llm_s": 0.5, "tokens": 7}}],
        "memories": {"items": [{"created": 1796237000.68, "text": "SELECT 1"}]},
    }
    kept = {
        "task": 1,
        "calls": [{"completion": {"text": "x"}}],
        "attempts": [{"info": {"tokens": 7}}],
        "memories": {"items": [{"text": "SELECT 1"}]},
    }
    assert without_times(record) == kept
