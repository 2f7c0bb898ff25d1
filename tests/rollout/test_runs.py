"""Run directories: durable units, torn tails, kill -9 and resume, fork-free replay of scripted runs."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from runhelp import cli, scripted_config

from ttlearn.rollout.run import play as play_units
from ttlearn.rollout.run import prepare
from ttlearn.runs import Run, RunConfig, canonical_hash, latest_state
from ttlearn.types import Episode


def episodes(run: Run) -> list[Episode]:
    """Each unit's (one) attempt."""
    return [Episode.from_json(r["attempts"][-1]) for r in run.records]


def play(path: Path, config: RunConfig) -> Run:
    """The run played to its end, its lock released (its records stay readable)."""
    with prepare(path, config) as run:
        play_units(run)
    return run


def test_run_directory_holds_config_units_snapshots(tmp_path):
    run = play(tmp_path / "r", scripted_config())
    assert json.loads((run.path / "run.json").read_text())["env"] == "rps"
    files = [".lock", "run.json", "snapshots.jsonl", "summary.json", "units.jsonl"]
    assert sorted(p.name for p in run.path.iterdir()) == files
    units = [json.loads(line) for line in (run.path / "units.jsonl").read_text().splitlines()]
    assert [u["index"] for u in units] == [1, 2, 3, 4] and sum(len(u["attempts"][0]["steps"]) for u in units) == 40
    snap = run.snapshot(4)
    assert len(snap["state"]["memory"]["logs"]) == 2 and snap["hash"] == canonical_hash(snap["state"])
    assert [u["memory_hash"] for u in units] == [run.snapshot(u)["hash"] for u in (1, 2, 3, 4)]
    assert Run.open(run.path).snapshot(3) == run.snapshot(3)


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
    assert [[s.action for s in e.steps] for e in episodes(killed)] == [
        [s.action for s in e.steps] for e in episodes(ref)
    ]


def test_concurrency_is_refused_where_games_depend_on_each_other(tmp_path):
    with pytest.raises(ValueError, match="depend on each other"):
        prepare(tmp_path / "r", scripted_config(), concurrency=2)


def test_a_memory_that_reflects_between_attempts_is_refused_with_one_attempt_whoever_builds_it(tmp_path):
    """The memory declares it (`needs_trials`); the check is the config's, not a name list in the CLI."""
    with pytest.raises(ValueError, match="give --attempts N"):
        prepare(tmp_path / "r", scripted_config(memory="lamer"))


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
        scripted_config(
            memory_from=str(session.path), units=2, attempts=2, carry_memory=False, player="scripted:random"
        ),
    )
    assert tasks.config.memory_from == str(session.path)
    first = Episode.from_json(Run.open(tasks.path).records[0]["attempts"][0])
    assert (
        first.info["context"]
        and first.info["context"] == Episode.from_json(Run.open(tasks.path).records[1]["attempts"][0]).info["context"]
    )  # both tasks start from the forked memory, not from each other
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
