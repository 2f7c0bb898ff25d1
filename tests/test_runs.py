"""Run directories: durable games, torn tails, kill -9 and resume, fork-free replay of scripted runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ttlearn.rollout.session import open_session
from ttlearn.runs import Run, RunConfig


def scripted_config(**overrides) -> RunConfig:
    base = dict(
        env="rps",
        env_options={"opponent": "cycle3", "rounds": 10},
        memory="history",
        player="scripted:learner",
        games=4,
        seed=3,
    )
    return RunConfig(**{**base, **overrides})


def play(path: Path, config: RunConfig) -> Run:
    run = Run.create(path, config)
    open_session(run).play()
    return run


def test_run_directory_holds_config_events_snapshots(tmp_path):
    run = play(tmp_path / "r", scripted_config())
    assert json.loads((run.path / "config.json").read_text())["env"] == "rps"
    assert sorted(p.name for p in (run.path / "snapshots").iterdir()) == [f"game_{i:04d}.json" for i in range(1, 5)]
    kinds = [e["type"] for e in run.events()]
    assert kinds.count("game") == 4 and kinds.count("step") == 40
    snap = run.snapshot(4)
    assert len(snap["state"]["memory"]["logs"]) == 2 and snap["hash"]


def test_torn_tail_is_dropped_and_the_game_replayed(tmp_path):
    full = play(tmp_path / "full", scripted_config())
    torn = play(tmp_path / "torn", scripted_config(games=2))
    with open(torn.path / "events.jsonl", "a") as fh:
        fh.write('{"type": "step", "game": 3, "step": 1, "act')  # a write cut by a kill
    reopened = Run.open(torn.path)
    assert len(reopened.episodes) == 2
    reopened.config = scripted_config()  # extend the run to the full length
    open_session(reopened).play()
    again = Run.open(torn.path)
    assert [e.index for e in again.episodes] == [1, 2, 3, 4]
    assert [e.score for e in again.episodes] == [e.score for e in full.episodes]


def test_existing_run_is_not_overwritten(tmp_path):
    play(tmp_path / "r", scripted_config(games=1))
    with pytest.raises(FileExistsError):
        Run.create(tmp_path / "r", scripted_config())


def cli(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    return subprocess.Popen(
        [sys.executable, "-m", "ttlearn", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def game_records(path: Path) -> list[int]:
    events = path / "events.jsonl"
    if not events.exists():
        return []
    out = []
    for line in events.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("type") == "game":
            out.append(record["game"])
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
    assert [e.score for e in killed.episodes] == [e.score for e in ref.episodes]
    assert killed.snapshot(12)["hash"] == ref.snapshot(12)["hash"]


def test_kill_9_mid_flight_with_concurrency_resumes_exactly_as_a_sequential_run(tmp_path):
    """Three games in flight, killed: the directory holds a prefix of the games in order, and resuming (again with
    three in flight) ends identical to a run that played one game at a time."""
    args = ["run", "rps", "--opponent", "nash", "--rounds", "400", "--games", "12", "--llm", "scripted:random"]
    reference = cli(*args, "--out", str(tmp_path / "ref"))
    assert reference.wait(timeout=300) == 0, reference.stdout.read()

    victim = cli(*args, "--concurrency", "3", "--out", str(tmp_path / "killed"))
    deadline = time.time() + 120
    while len(game_records(tmp_path / "killed")) < 3 and time.time() < deadline:
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    done_before = game_records(tmp_path / "killed")
    assert done_before == list(range(1, len(done_before) + 1)) and 3 <= len(done_before) < 12

    resumed = cli("resume", str(tmp_path / "killed"), "--concurrency", "3")
    assert resumed.wait(timeout=300) == 0, resumed.stdout.read()
    assert game_records(tmp_path / "killed") == list(range(1, 13))
    ref, killed = Run.open(tmp_path / "ref"), Run.open(tmp_path / "killed")
    assert [e.score for e in killed.episodes] == [e.score for e in ref.episodes]
    assert [[s.action for s in e.steps] for e in killed.episodes] == [[s.action for s in e.steps] for e in ref.episodes]


def test_concurrency_is_refused_where_games_depend_on_each_other(tmp_path):
    with pytest.raises(ValueError, match="depend on each other"):
        open_session(Run.create(tmp_path / "r", scripted_config()), concurrency=2)
