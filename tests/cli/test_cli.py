"""The command line: help texts, clear errors for bad input, and the memory fork / diff commands."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from ttlearn.cli import app
from ttlearn.runs import Run

runner = CliRunner()
SCRIPTED = ["--llm", "scripted:learner", "--rounds", "6"]


def invoke(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "160"})


def test_help_explains_the_commands():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("run", "resume", "replay", "show", "memory", "list"):
        assert command in result.output
    run_help = invoke("run", "--help").output
    assert "--opponent" in run_help and "--concurrency" in run_help
    assert "--units" in run_help and "Attempts per unit" in run_help and "A session of N games" in run_help


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "chess"], "unknown environment 'chess'"),
        (["run", "rps", "--opponent", "nobody"], "nobody"),
        (["run", "rps", "--memory", "magic"], "unknown memory method 'magic'"),
        (["run", "rps", "--env-opt", "colour=red"], "has no option colour"),
        (["run", "rps", "--env-opt", "oops"], "KEY=VALUE"),
        (["run", "rps", "--llm", "warp:9"], "unknown LLM back end 'warp'"),
        (["run", "rps", "--llm", "scripted:genius"], "unknown scripted player 'genius'"),
        (["resume", "/nonexistent/run"], "not a run directory"),
        (["run", "sokoban", "--memory-from", "/nonexistent/fork"], "--memory-from /nonexistent/fork does not exist"),
        (["run", "sokoban", "--memory", "lamer", "--games", "3"], "give --attempts N (N > 1)"),
        (["run", "sokoban", "--units", "2", "--memory", "lamer", "--attempts", "1"], "give --attempts N (N > 1)"),
        (["run", "sokoban", "--carry-memory", "--control"], "what memory 'none' already does"),
        (["run", "sokoban", "--tasks", "2", "--control"], "what memory 'none' already does"),
        (
            ["run", "sokoban", "--tasks", "2", "--memory", "history", "--carry-memory", "--concurrency", "2"],
            "--no-carry-memory makes every unit start afresh",
        ),
        (["run", "sokoban", "--tasks", "2", "--games", "3"], "give --units or --games"),
        (["run", "rps", "--memory", "history", "--games", "6", "--concurrency", "2"], "depend on each other"),
        (["run", "rps", "--note-at", "sidebar"], "note_at"),
    ],
)
def test_bad_input_is_one_clear_line(args, message, tmp_path):
    result = invoke(*args, "--out", str(tmp_path / "x")) if args[0] == "run" else invoke(*args)
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and message in result.output
    assert "Traceback" not in result.output


def test_options_once_bound_to_one_kind_of_run_work_on_a_session_of_games(tmp_path):
    """--attempts and --control, once refused on a session, are options of every run: a game is a unit."""
    out = tmp_path / "g"
    args = ["--games", "2", "--attempts", "2", "--memory", "history", "--control", "--llm", "scripted:random"]
    result = invoke("run", "minesweeper", *args, "--out", str(out))
    assert result.exit_code == 0, result.output
    run = Run.open(out)
    assert (run.config.units, run.config.attempts, run.config.carry_memory) == (2, 2, True)
    assert run.done == 2 and all("control_first_success" in r for r in run.records)
    assert "vs the same player without memory on the same tasks and seeds (--control)" in result.output


def test_fork_continues_from_game_k_and_diverges_after(tmp_path):
    source = tmp_path / "src"
    assert (
        invoke(
            "run", "rps", "--opponent", "cycle3", "--memory", "history", "--games", "4", *SCRIPTED, "--out", str(source)
        ).exit_code
        == 0
    )
    result = invoke("memory", "fork", str(source), "--unit", "2", "--out", str(tmp_path / "fork"))
    assert result.exit_code == 0, result.output
    forked_hash = json.loads((tmp_path / "fork" / "fork.json").read_text())["hash"]
    original = Run.open(source)
    assert forked_hash == original.snapshot(2)["hash"]  # games 1..2's memory reproduced exactly

    result = invoke(
        "run",
        "rps",
        "--opponent",
        "cycle3",
        "--memory",
        "history",
        "--games",
        "2",
        *SCRIPTED,
        "--memory-from",
        str(tmp_path / "fork"),
        "--seed",
        "9",
        "--out",
        str(tmp_path / "cont"),
    )
    assert result.exit_code == 0, result.output
    cont = Run.open(tmp_path / "cont")
    first_log = cont.snapshot(1)["state"]["memory"]["logs"]
    assert first_log[0] == original.snapshot(2)["state"]["memory"]["logs"][-1]  # starts from the fork
    assert cont.snapshot(2)["hash"] != original.snapshot(4)["hash"]  # and diverges afterwards

    diff = invoke("memory", "diff", str(source), "--from", "1", "--to", "3")
    assert diff.exit_code == 0 and "+" in diff.output and "after unit 3" in diff.output


def test_memrl_inspect_and_explain(tmp_path):
    from fakes import FakeLLM

    from ttlearn.rollout.run import play as play_units
    from ttlearn.rollout.run import prepare
    from ttlearn.runs import RunConfig

    config = RunConfig(
        env="rps",
        env_options={"opponent": "beat-last", "rounds": 4},
        memory="memrl",
        memory_options={"embedder": "hash", "epsilon": 0.0},
        player="scripted:random",
        writer="smollm2",
        units=3,
        attempts=1,
        carry_memory=True,
    )  # validated, but built by the fake factory below
    run = prepare(tmp_path / "m", config)
    play_units(run, llm_factory=lambda spec: FakeLLM(lambda prompt: "1. Play paper."))

    listing = invoke("memory", "inspect", str(run.path))
    assert listing.exit_code == 0, listing.output
    assert listing.output.count("Rock-paper-scissors") >= 3  # one memory per game, newest first
    overall = invoke("memory", "explain", str(run.path))
    assert overall.exit_code == 0, overall.output
    total = int(re.search(r"(\d+) retrievals", overall.output).group(1))
    shown = {}
    for unit in (1, 2, 3):
        explained = invoke("memory", "explain", str(run.path), "--unit", str(unit))
        assert explained.exit_code == 0, explained.output
        shown[unit] = len(re.findall(rf"retrieval \d+ of unit {unit}\b", explained.output))
    # each unit's own retrievals: the last game's are there, and the units' together are the run's, none twice
    assert shown[3] >= 1 and sum(shown.values()) == total, (shown, total)
    assert "sim" in explained.output and "→" in explained.output


def test_show_prints_the_summary_and_one_units_steps(tmp_path):
    out = tmp_path / "s"
    assert invoke("run", "rps", "--opponent", "constant", "--games", "2", *SCRIPTED, "--out", str(out)).exit_code == 0
    summary = invoke("show", str(out))
    assert summary.exit_code == 0 and "cumulative" in summary.output and "mean score" in summary.output
    game = invoke("show", str(out), "--unit", "2", "--prompts")
    assert game.exit_code == 0 and game.output.count("step ") == 6 and "unit 2 score" in game.output
    assert "between 1 and 2" in invoke("show", str(out), "--unit", "3").output
    assert invoke("show", str(out), "--game", "2").output == invoke("show", str(out), "--unit", "2").output


def test_show_reads_a_trial_run_with_its_confidence_intervals(tmp_path):
    out = tmp_path / "t"
    args = ["run", "minesweeper", "--attempts", "2", "--tasks", "3", "--llm", "scripted:random", "--out", str(out)]
    assert invoke(*args).exit_code == 0
    summary = invoke("show", str(out))
    assert summary.exit_code == 0 and "95% CI" in summary.output and "3 of 3 units finished" in summary.output
    task = invoke("show", str(out), "--unit", "2")
    record = [json.loads(line) for line in (out / "units.jsonl").read_text().splitlines()][1]
    moves = [step["action"] for attempt in record["attempts"] for step in attempt["steps"]]
    assert task.exit_code == 0 and task.output.count("attempt ") == 2
    assert all(move in task.output for move in moves)
    assert "between 1 and 3" in invoke("show", str(out), "--unit", "4").output
    same = invoke("show", str(out), "--against", str(out))
    assert same.exit_code == 0 and "paired on 3 shared tasks" in same.output and "+0.000" in same.output
    assert "score of attempt k" in same.output and same.output.rstrip().endswith("0         0         1")
    epochs = tmp_path / "e"
    args = ["run", "minesweeper", "--memory", "history", "--tasks", "3", "--epochs", "2", "--llm", "scripted:random"]
    assert invoke(*args, "--out", str(epochs)).exit_code == 0
    assert "paired on 6 shared tasks" in invoke("show", str(epochs), "--against", str(epochs)).output
    assert "paired on 3 shared tasks" in invoke("show", str(epochs), "--against", str(epochs), "--epoch", "2").output
    second = invoke("show", str(epochs), "--epoch", "2")
    assert second.exit_code == 0 and "the summary of 3 of the run's 6 finished units: epoch 2" in second.output
    assert "epoch 2 vs epoch 1 on the same 3 tasks" in invoke("show", str(epochs)).output
    assert "is left" in invoke("show", str(epochs), "--not-in", str(out)).output  # the same three instances
    reseeded = tmp_path / "r"  # another run seed: the same instance seeds name other boards
    assert (
        invoke(
            "run", "minesweeper", "--tasks", "1", "--seed", "1", "--llm", "scripted:random", "--out", str(reseeded)
        ).exit_code
        == 0
    )
    assert "other instances" in invoke("show", str(epochs), "--not-in", str(reseeded)).output


def test_train_commands_come_from_the_trainer_registry(tmp_path):
    listing = invoke("train", "--help")
    assert listing.exit_code == 0 and "lamer" in listing.output and "memopilot" in listing.output
    options = invoke("train", "memopilot", "--help").output
    assert "--opponents" in options and "Comma-separated" in options and "--loss-type" in options
    bad = invoke("train", "lamer", "--algo", "magic", "--out", str(tmp_path / "t"))
    assert bad.exit_code == 2 and "algo" in bad.output and "Traceback" not in bad.output
    assert not (tmp_path / "t").exists()  # refused before a directory was written


def test_fork_and_diff_work_on_trial_runs(tmp_path):
    from ttlearn.runs import latest_state

    out = tmp_path / "t"
    args = ["run", "minesweeper", "--memory", "history", "--tasks", "3", "--attempts", "1", "--carry-memory"]
    assert invoke(*args, "--llm", "scripted:random", "--out", str(out)).exit_code == 0
    diff = invoke("memory", "diff", str(out), "--from", "1", "--to", "3")
    assert diff.exit_code == 0 and "after unit 3" in diff.output and "\n+" in diff.output
    assert invoke("memory", "fork", str(out), "--game", "2", "--out", str(tmp_path / "f")).exit_code == 0
    state_two = Run.open(out).state_after(2)
    after_two = state_two["memory"]
    assert after_two["logs"] and latest_state(tmp_path / "f") == state_two
    # a session started from the fork starts from task 2's memory
    session = ["run", "minesweeper", "--memory", "history", "--games", "1", "--llm", "scripted:random"]
    assert invoke(*session, "--memory-from", str(tmp_path / "f"), "--out", str(tmp_path / "s")).exit_code == 0
    assert Run.open(tmp_path / "s").snapshot(1)["state"]["memory"]["logs"][0] == after_two["logs"][-1]
    assert "between 1 and 3" in invoke("memory", "diff", str(out), "--from", "1", "--to", "4").output


def test_show_prints_model_text_literally():
    from ttlearn.cli.common import console, print_call

    hostile = "[/] [link=https://evil.example]click[/link] [bold red]x"
    call = {
        "role": "act [/]",
        "messages": [{"role": "user", "content": hostile}],
        "completion": {"latency_s": 0.5, "text": hostile},
    }
    with console.capture() as captured:
        print_call(call, prompts=True)
    text = captured.get()
    assert f"user: {hostile}" in text and f"reply: {hostile!r}" in text and "act [/]" in text


def test_note_at_is_recorded_in_the_run_config(tmp_path):
    result = invoke("run", "rps", *SCRIPTED, "--games", "1", "--note-at", "advice", "--out", str(tmp_path / "r"))
    assert result.exit_code == 0, result.output
    assert Run.open(tmp_path / "r").config.note_at == "advice"
