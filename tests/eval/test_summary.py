"""The summary maths, by hand: success@k, pass@k, trajectory entropy, instance ceilings, the memory's gain against
the greedy control, the last epoch against the first, success by skill and kind — and one summary, read everywhere."""

from __future__ import annotations

import json
import math

import pytest
from fakes import FakeLLM
from typer.testing import CliRunner

import ttlearn
from ttlearn.cli import app
from ttlearn.eval.metrics import wilson_interval
from ttlearn.eval.report.sections import DIGITS, build_report
from ttlearn.eval.summary import (
    MemoryGain,
    RunSummary,
    SkillRow,
    greedy_control_applies,
    memory_gain,
    summarize_units,
)
from ttlearn.runs import NO_OPPONENT, RunConfig, RunDir, arena_run
from ttlearn.types import Completion, Episode, Step


def _record(actions_and_success: list[tuple[list[str], bool]], instance: dict) -> dict:
    attempts = [
        Episode(i, 0, "t", tuple(Step("o", a, -0.1) for a in actions), 1.0 if ok else -1.0, ok).to_json()
        for i, (actions, ok) in enumerate(actions_and_success, start=1)
    ]
    first = next((i for i, (_, ok) in enumerate(actions_and_success, start=1) if ok), None)
    score = attempts[-1]["score"]
    return {
        "index": 1,
        "type": "task",
        "epoch": 1,
        "first_success": first,
        "score": score,
        "calls": [],
        "attempts": attempts,
        "instance": instance,
        "wall_s": 2.0,
    }


def test_summary_numbers_by_hand() -> None:
    up, down = ["up"], ["down"]
    records = [
        _record([(up, False), (up, True), (down, False)], {"optimal_length": 5, "budget": 21}),
        _record([(up, True), (up, True), (up, True)], {"optimal_length": 9, "budget": 21}),
        _record([(up, False), (up, False), (up, False)], {"optimal_length": 12, "budget": 21}),
        _record([(down, False), (down, False), (down, True)], {"optimal_length": 30, "budget": 21}),
    ]
    summary = summarize_units(records, RunConfig(env="sokoban", memory="none", units=4, attempts=3))
    assert summary.success_at_k == pytest.approx([1 / 4, 2 / 4, 3 / 4])  # first successes 2, 1, never, 3
    assert summary.success_at_k_ci95 == [wilson_interval(c, 4) for c in (1, 2, 3)]
    # c = 1, 3, 0, 1 of n = 3: pass@1 = mean(c/n); pass@2 = mean(1 - C(n-c, 2)/C(3, 2)) = (2/3 + 1 + 0 + 2/3)/4
    assert summary.pass_at_k == pytest.approx([5 / 12, 7 / 12, 3 / 4])
    h = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))  # task 1: two "up" runs, one "down"
    assert summary.trajectory_entropy == pytest.approx(h / 4)
    assert summary.instances["optimal_length"] == {"mean": 14.0, "min": 5.0, "max": 30.0}
    assert summary.instances["within_budget_rate"] == 0.75
    lamer = summarize_units(records, RunConfig(env="sokoban", memory="lamer", units=4, attempts=3))
    assert lamer.pass_at_k is None  # sequential attempts with feedback are not independent samples


def test_memory_gain_against_the_greedy_control_by_hand() -> None:
    # first successes 1, 2, never, 3, 1 of 3 attempts: the control (attempt 1 repeated) solves 2 of 5, the memory
    # adds 2 more; McNemar with b = 2, c = 0: p = 2 · C(2, 0) / 2² = 0.5
    gain = memory_gain([1, 2, None, 3, 1], 3)
    assert gain == MemoryGain(k=3, control=0.4, with_memory=0.8, solved_only_with_memory=2, p_value=0.5)
    assert memory_gain([1, 2, 3], 2).solved_only_with_memory == 1  # a success after attempt k does not count
    assert greedy_control_applies(RunConfig(env="code", memory="lamer", player="qwen-coder"))
    assert not greedy_control_applies(RunConfig(env="code", memory="lamer", player="qwen-coder", temperature=0.7))
    assert not greedy_control_applies(RunConfig(env="code", memory="none", player="qwen-coder"))
    assert not greedy_control_applies(RunConfig(env="code", memory="lamer", player="scripted:random"))


class CountingFake(FakeLLM):
    """Names a cell on most turns and writes nothing useful on some, with token counts, so a run has successes,
    invalid steps and tokens to report."""

    def complete(self, messages, **kwargs):
        reply = super().complete(messages, **kwargs).text
        return Completion(reply, prompt_tokens=len(messages[-1]["content"]) // 4, completion_tokens=len(reply))


def test_show_the_report_and_results_give_the_same_figures_for_a_run_of_three_attempts(tmp_path) -> None:
    """One summary, read everywhere: success (within the attempts), invalid steps and tokens of a 3-attempt run are
    the same in `ttlearn show`, in the arena report and in the summary file `ttlearn results` reads."""
    turn = iter(range(10_000))

    def reply(prompt: str) -> str:
        cells = [line for line in prompt.split("Legal actions: ")[-1].split(", ") if line.startswith("reveal")]
        return "I am not sure." if next(turn) % 5 == 0 else cells[(7 * next(turn)) % len(cells)]

    fields = {"memory": "none", "player": "smollm2", "retries": 0}  # the player is the fake
    config = RunConfig(env="minesweeper", **fields, units=4, attempts=3, seed=1)
    run_dir = arena_run(tmp_path, "none", NO_OPPONENT, config.seed)
    summary = ttlearn.run(config, run_dir, llm_factory=lambda spec: CountingFake(reply))
    assert summary.config.attempts == 3 and summary.tokens > 0 and summary.invalid.rate > 0
    assert summary.success is not None and 0 < summary.mean_attempts <= 3
    assert RunSummary.from_json(json.loads(RunDir(run_dir).summary.read_text()), summary.config) == summary

    (costs,) = build_report(tmp_path)["costs"]
    assert costs["success_rate"] == round(summary.success, DIGITS)
    assert costs["invalid"] == {"rate": round(summary.invalid.rate, DIGITS), "causes": summary.invalid.causes}
    assert costs["tokens"] == summary.tokens and costs["steps"] == sum(row.steps for row in summary.units)

    shown = CliRunner().invoke(app, ["show", str(run_dir)], env={"COLUMNS": "200"}).output
    assert f"3  {summary.success:<11.3f}" in shown  # success@3: solved within the three attempts
    assert f"invalid {summary.invalid.text()}" in shown and f"{summary.tokens} tokens" in shown


def test_success_by_skill_is_a_section_of_the_last_epoch_with_its_control_by_hand() -> None:
    """Three units tagged with skills (db_bench's instances), each with its control: select 2 units, 1 solved (the
    control 0); insert 1 unit, solved (the control too). Shown with the most common skill first, and read back."""
    records = []
    for index, (skills, solved, control) in enumerate([(["select"], 1, None), (["select", "insert"], None, None),
                                                      (["insert"], 2, 1)], start=1):  # fmt: skip
        record = _record([(["up"], solved is not None)], {"skills": skills, "kind": skills[-1]})
        records.append({**record, "index": index, "first_success": solved, "control_first_success": control,
                        "control_steps": 1, "control_invalid_steps": 0})  # fmt: skip
    config = RunConfig(env="sokoban", memory="history", player="scripted:random", units=3, attempts=2, control=True)
    summary = summarize_units(records, config)
    assert summary.by_skill.rows == {
        "insert": SkillRow(tasks=2, solved=1, success=0.5, control=0.5),
        "select": SkillRow(tasks=2, solved=1, success=0.5, control=0.0),
    }
    assert summary.validation_by_skill is None
    assert summary.by_skill.lines(summary) == [
        "success by skill (tasks: success / control):",
        "  insert     2  0.500 / 0.500",
        "  select     2  0.500 / 0.000",
    ]
    assert summary.by_kind.rows == {  # one kind a unit: the second unit counts as an insert only
        "insert": SkillRow(tasks=2, solved=1, success=0.5, control=0.5),
        "select": SkillRow(tasks=1, solved=1, success=1.0, control=0.0),
    }
    assert RunSummary.from_json(json.loads(json.dumps(summary.to_json())), config) == summary


def test_the_last_epoch_against_the_first_is_paired_by_task_by_hand() -> None:
    """Four tasks over three epochs; epoch 1 solves tasks 1 and 2, epoch 3 solves 2, 3 and 4 (task 4 at attempt 2):
    at k = 1 only epoch 3 solves task 3 and only epoch 1 task 1 (p = 1); at k = 2 epoch 3 adds task 4 (2 vs 1)."""
    firsts = {1: [1, 1, None, None], 2: [None, None, None, None], 3: [None, 1, 1, 2]}
    records = [
        {**_record([(["up"], False)], {}), "index": 4 * (epoch - 1) + task, "epoch": epoch, "task": task,
         "first_success": first}
        for epoch, row in firsts.items() for task, first in enumerate(row, start=1)
    ]  # fmt: skip
    config = RunConfig(env="sokoban", memory="history", player="scripted:random", units=4, epochs=3, attempts=2)
    learning = summarize_units(records, config).learning
    assert (learning.tasks, learning.first, learning.last) == (4, 1, 3)
    assert [(r.k, r.a, r.b, r.only_a, r.only_b, r.p_value) for r in learning.rows] == [
        (1, 0.5, 0.5, 1, 1, 1.0),
        (2, 0.75, 0.5, 2, 1, 1.0),
    ]
    assert summarize_units([r for r in records if r["epoch"] == 2], config).learning is None
    summary = summarize_units(records, config)
    assert RunSummary.from_json(json.loads(json.dumps(summary.to_json())), config) == summary
