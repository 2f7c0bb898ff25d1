"""`ttlearn rejudge`: a recorded trial run's replies judged again by another metric, from its records alone."""

from __future__ import annotations

import json

from fakes import FakeLLM
from runhelp import play_run
from typer.testing import CliRunner

from ttlearn.cli import app
from ttlearn.data.sql_mini import QUESTIONS
from ttlearn.rollout.rejudge import first_solved
from ttlearn.runs import Run, RunConfig

SWAPPED = "SELECT count(*), city FROM students GROUP BY city"
"""Question 2's answer with its two columns the other way round: wrong for the strict judge, right for Spider's."""


def test_first_solved_is_the_first_true_attempt():
    assert (first_solved([False, True, True]), first_solved([False, False]), first_solved([])) == (2, None, None)


def test_a_strict_run_judged_again_by_the_official_metric(tmp_path, monkeypatch):
    monkeypatch.setenv("TTLEARN_CACHE", str(tmp_path / "cache"))
    question = next(i for i, q in enumerate(QUESTIONS) if q["question"].startswith("How many students live in each"))
    config = RunConfig(
        env="sql",
        env_options={"dataset": "mini", "task": question, "metric": "strict", "prefill": False},
        memory="history",
        player="qwen-coder",
        units=1,
        attempts=1,
        carry_memory=True,
        control=True,
    )
    fake = FakeLLM(lambda prompt: f"```sql\n{SWAPPED}\n```")
    before = play_run(tmp_path / "run", config, llm_factory=lambda spec: fake)
    assert before.control.rows[0].a == before.control.rows[0].b == 0.0  # strict: column order counts
    recorded = (tmp_path / "run" / "units.jsonl").read_text()

    result = CliRunner().invoke(app, ["rejudge", str(tmp_path / "run"), "-e", "metric=exec"])
    assert result.exit_code == 0, result.output
    assert "2 verdict(s) changed of 1 unit record(s)" in result.output
    assert "judged again with metric=exec" in result.output
    record = json.loads((tmp_path / "run" / "units.jsonl").read_text())
    assert record["first_success"] is None and record["control_first_success"] is None  # what was played stays
    assert record["rejudged"] == {"metric": "metric=exec", "first_success": 1, "control_first_success": 1}
    assert recorded.strip() == json.dumps({k: v for k, v in record.items() if k != "rejudged"}, ensure_ascii=False)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["rejudged"] == "metric=exec"  # the file, as `ttlearn results` reads it
    assert summary["control"]["rows"][0]["a"] == summary["control"]["rows"][0]["b"] == 1.0
    assert Run.open(tmp_path / "run").config.env_options["metric"] == "strict"  # the run's config is untouched
