"""The real embedded model end to end: a short run, its record, and an exact replay without the model."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ttlearn.llm.cache import ReplayBook
from ttlearn.rollout.run import play as play_units
from ttlearn.rollout.run import prepare
from ttlearn.runs import Run, RunConfig

pytestmark = pytest.mark.model


def test_choice_scoring_returns_normalised_choice_logprobs(smollm2):
    messages = [{"role": "system", "content": "Rock-paper-scissors."}, {"role": "user", "content": "Your move?"}]
    reply = smollm2.complete(messages, choices=["rock", "paper", "scissors"], seed=0)
    assert reply.text in ("rock", "paper", "scissors")
    assert set(reply.choice_logprobs) == {"rock", "paper", "scissors"}
    assert all(lp < 0 for lp in reply.choice_logprobs.values())
    assert reply.text == max(reply.choice_logprobs, key=reply.choice_logprobs.get)
    # prefix reuse must not change the numbers: the same call again, after an unrelated one
    smollm2.complete([{"role": "user", "content": "Say hi."}], max_tokens=4)
    again = smollm2.complete(messages, choices=["rock", "paper", "scissors"], seed=0)
    for k, v in reply.choice_logprobs.items():
        assert math.isclose(again.choice_logprobs[k], v, abs_tol=1e-3)


def test_short_real_run_then_exact_replay(tmp_path):
    config = RunConfig(
        env="rps",
        env_options={"opponent": "cycle3", "rounds": 4},
        memory="reflexion",
        player="smollm2",
        units=2,
        attempts=1,
        carry_memory=True,
        seed=11,
        temperature=0.7,
    )
    run = prepare(tmp_path / "real", config)
    play_units(run)
    calls = run.calls()
    roles = [c["role"] for c in calls]
    assert roles.count("player") == 8 and roles.count("memory") == 2
    assert all(c["completion"]["prompt_tokens"] > 0 for c in calls)
    assert len({r["memory_hash"] for r in Run.open(run.path).records}) == 2
    assert Run.open(run.path).snapshot(2)["state"]["memory"]["reflections"]

    def moves(played: Run) -> list[str]:
        return [s["action"] for r in played.records for a in r["attempts"] for s in a["steps"]]

    replayed = prepare(tmp_path / "replay", config)
    play_units(replayed, replay=ReplayBook(calls))
    assert [r["score"] for r in replayed.records] == [r["score"] for r in run.records]
    assert moves(replayed) == moves(run) and len(moves(run)) == 8
    assert replayed.outcomes() == run.outcomes()
    assert all(c["cached"] for c in replayed.calls())


def test_cli_run_prints_summary_and_writes_the_run(tmp_path):
    out = tmp_path / "cli"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src"), "COLUMNS": "120"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ttlearn",
            "run",
            "rps",
            "--opponent",
            "constant",
            "--rounds",
            "3",
            "--games",
            "2",
            "--memory",
            "history",
            "--out",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cumulative" in done.stdout and str(out) in done.stdout.replace("\n", "")
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["units"]) == 2 and summary["llm_s"] > 0  # the file, as written
