"""`ttlearn check` on the ScienceWorld-sized plug-in (`tests/plugins/simlab.py`): every rule reported, the shortlist
the player would show, undeclared non-determinism caught; and a run of it whose invalid steps are told apart by
cause in the summary and in `show`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ttlearn.cli import app

SIMLAB = str(Path(__file__).resolve().parents[1] / "plugins" / "simlab.py")
runner = CliRunner()


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """simlab caches its task list in ttlearn's cache: a fresh one per test."""
    monkeypatch.setenv("TTLEARN_CACHE", str(tmp_path / "cache"))


def invoke(*args: str):
    return runner.invoke(app, ["--plugin", SIMLAB, *args], env={"COLUMNS": "400"})


def shortlist_line(output: str) -> str:
    return next(line for line in output.splitlines() if line.startswith("the LLM player's shortlist"))


def test_check_reports_every_rule_the_time_and_the_ranked_shortlist():
    result = invoke("check", "simlab")
    assert result.exit_code == 0, result.output
    assert "on seeds 0–2, 2 restart(s) each" in result.output
    assert re.search(r"16 passed · 0 skipped · 0 failed in \d+\.\d\d s", result.output)
    assert "passed  reset(seed) must give the same instance again after other seeds were played" in result.output
    assert "legal actions: up to 533 a step (a partial list" in result.output
    ranked = shortlist_line(result.output)
    assert "64 of 533 actions (tier 0: 3, tier 1: 45, tier 2: 16;" in ranked
    assert "open door to kitchen, open door to workshop, look around" in ranked

    unranked = shortlist_line(invoke("check", "simlab", "-e", "rank=false", "--seeds", "1").output)
    assert "(tier 1: 64;" in unranked and "open door" not in unranked and "task, focus on" in unranked


def test_check_catches_undeclared_nondeterminism_over_several_seeds_and_restarts():
    assert invoke("check", "simlab", "-e", "unstable=true", "--seeds", "1", "--restarts", "1").exit_code == 0
    result = invoke("check", "simlab", "-e", "unstable=true")
    assert result.exit_code == 1
    assert "failed  restart() must return the instance's initial observation" in result.output
    assert "declare deterministic = False" in result.output and "· 1 failed" in result.output


def test_check_of_an_unknown_env_is_one_red_line():
    result = runner.invoke(app, ["check", "chess"], env={"COLUMNS": "400"})
    assert result.exit_code == 2 and "unknown environment 'chess'" in result.output


def test_a_run_tells_rejected_commands_from_overflows_in_the_summary_and_show(tmp_path):
    # A 1,700-character context: the hallway's first prompt (1,881) overflows, the shorter ones after it fit.
    result = invoke("run", "simlab", "--llm", "typist:dance@1700", "--games", "1", "--out", str(tmp_path / "r"))
    assert result.exit_code == 0, result.output
    assert "invalid 100.0% (rejected 29, overflow 1)" in result.output
    shown = invoke("show", str(tmp_path / "r"), "--unit", "1").output
    assert "step 1: (no move) → +0 (invalid: overflow)" in shown
    assert "step 2: dance → +0 (invalid: rejected: No known action matches that input.)" in shown
    assert "invalid 100.0% (rejected 29, overflow 1)" in invoke("show", str(tmp_path / "r")).output
