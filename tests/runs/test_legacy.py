"""The one adapter for run directories written before one config existed: they still read, replay and resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from runhelp import cli

from ttlearn.rollout.run import play as play_units
from ttlearn.rollout.run import prepare
from ttlearn.runs import Run, holds_run, latest_state, read_config

LEGACY = Path(__file__).parents[1] / "data" / "legacy"
"""Run directories written before snapshots were stored by content (by ttlearn at commit 677f6c8): a session with
snapshots/game_NNNN.json, a fork of its game 2, and a carried trial run whose records embed their memory."""


def test_an_old_session_still_reads_replays_and_resumes(tmp_path):
    old = Run.open(LEGACY / "session")
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
    with Run.open(copy, write=True) as run:
        play_units(run)
    reread = Run.open(copy)
    assert reread.snapshot(2)["state"] == files[1]["state"] and len(reread.snapshot(4)["state"]["memory"]["logs"]) == 2
    assert (copy / "snapshots.jsonl").exists()  # game 4 went into the content store, games 1-3 stay in their files


def test_an_old_trial_run_still_reads_and_resumes_where_it_stopped(tmp_path):
    old = [json.loads(line) for line in (LEGACY / "trials" / "tasks.jsonl").read_text().splitlines()]
    read = Run.open(LEGACY / "trials")
    assert [read.state_after(i)["memory"] for i in (1, 2, 3)] == [r["memory"] for r in old]
    assert read.snapshot(3)["state"] == {"memory": old[2]["memory"]}
    copy = tmp_path / "t"
    shutil.copytree(LEGACY / "trials", copy)
    (copy / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old[:2]))  # stopped after task 2
    with prepare(copy) as run:
        play_units(run)
    resumed = Run.open(copy).records

    def played(record: dict) -> list:
        return [(a["steps"], a["score"], a["info"]["context"]) for a in record["attempts"]]

    assert played(resumed[2]) == played(old[2])  # task 3 started from task 2's embedded memory
    assert Run.open(copy).state_after(3)["memory"] == old[2]["memory"] and "memory" not in resumed[2]


def test_every_committed_config_still_loads():
    root = Path(__file__).parents[2]
    dirs = sorted({c.parent for name in ("trials.json", "run.json", "events.jsonl") for c in root.glob(f"**/{name}")})
    dirs = [d for d in dirs if holds_run(d) and ".git" not in d.parts]
    assert len(dirs) > 20
    seedings = {read_config(d).seeding for d in dirs}
    assert {"trials-v1", "session-v1"} <= seedings
