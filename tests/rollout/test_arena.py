"""The arena: config validation, the paired design, parallel and Ray execution, resume after kill -9."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from ttlearn.cli import app
from ttlearn.rollout import arena as arena_mod
from ttlearn.rollout.arena import ArenaConfig, execute, load_arena_config, plan, prepare
from ttlearn.runs import Run

# A floor and a learner: scripted players ignore memory, so the contestants differ by player (test-only).
CONTESTANTS = [
    {"name": "none", "label": "random", "player": "scripted:random"},
    {"name": "history", "label": "learner", "player": "scripted:learner"},
]


def small_config(**overrides) -> ArenaConfig:
    base = {
        "env": "rps",
        "env_options": {"rounds": 10},
        "memories": CONTESTANTS,
        "opponents": ["cycle3", "beat-last"],
        "seeds": 2,
        "games": 3,
    }
    return ArenaConfig.model_validate({**base, **overrides})


def test_config_from_yaml_with_overrides(tmp_path):
    path = tmp_path / "arena.yaml"
    path.write_text(
        "env: rps\nenv_options: {rounds: 7}\nmemories: [none, {name: memrl, options: {k: 3}}]\n"
        "opponents: [cycle3]\nseeds: [4, 9]\n"
    )
    config = load_arena_config(path, games=2, env_options={"rounds": 5}, player=None)
    assert [c.label for c in config.memories] == ["none", "memrl"]
    assert config.memories[1].options == {"k": 3}
    assert config.seed_list == [4, 9] and config.run.env_options == {"rounds": 5}
    assert (config.run.units, config.run.attempts, config.run.carry_memory) == (2, 1, True)  # `games`, the preset
    assert small_config(seeds=3).seed_list == [0, 1, 2]
    assert {item.config.note_at for item in plan(small_config(note_at="default"), tmp_path)} == {"default"}
    # any run option goes to every run of the plan (the arena's config holds a `RunConfig` template)
    items = plan(small_config(retries=0, max_options=7, free_text_tokens=32), tmp_path)
    assert {(i.config.retries, i.config.max_options, i.config.free_text_tokens) for i in items} == {(0, 7, 32)}


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"memories": ["none", "none"]}, "labels repeat"),
        ({"memories": []}, "at least 1"),
        ({"seeds": 0}, "positive count"),
        ({"seeds": [1, 1]}, "without repeats"),
        ({"opponents": ["cycle3", "cycle3"]}, "opponents repeat"),
        ({"opponents": ["../x"]}, "cannot name a directory"),
        ({"env_options": {"opponent": "cycle3"}}, "through `opponents`"),
        ({"colour": "red"}, "Extra inputs"),
        ({"note_at": "footnote"}, "note_at"),
        ({"seed": 3}, "the plan sets each run's"),
        ({"memory": "history"}, "the plan sets each run's"),
        ({"units": 2}, "give units or games"),
    ],
)
def test_bad_arena_configs_are_refused(overrides, message):
    with pytest.raises(ValidationError, match=message):
        small_config(**overrides)


def test_plan_is_paired_and_validated(tmp_path):
    items = plan(small_config(), tmp_path)
    assert len(items) == 2 * 2 * 2
    assert items[0].path == tmp_path / "runs" / "random" / "cycle3" / "seed0"
    by_sequence: dict = {}
    for item in items:
        by_sequence.setdefault((item.opponent, item.seed), []).append(item.config)
    for (opponent, seed), configs in by_sequence.items():
        assert {c.seed for c in configs} == {seed}
        assert {c.env_options["opponent"] for c in configs} == {opponent}
        assert [c.player for c in configs] == ["scripted:random", "scripted:learner"]
    with pytest.raises(ValueError, match="unknown RPS opponent 'nobody'"):
        prepare(small_config(opponents=["nobody"]), tmp_path / "bad")
    assert not (tmp_path / "bad").exists()  # nothing written before validation passes


def test_every_method_plays_the_same_games(tmp_path):
    config = small_config()
    todo, finished = prepare(config, tmp_path)
    assert finished == [] and json.loads((tmp_path / "arena.json").read_text())["config"]["run"]["units"] == 3
    outcomes = list(execute(todo, workers=2))
    assert sorted(item.name for item, _ in outcomes) == sorted(item.name for item in todo)
    seeds: dict = {}
    for item in todo:
        run = Run.open(item.path)
        assert run.finished and (item.path / "summary.json").exists()
        seeds.setdefault((item.opponent, item.seed), set()).add(tuple(r["seed"] for r in run.records))
    assert all(len(s) == 1 for s in seeds.values())  # same game seeds for every method of a sequence
    assert len({next(iter(s)) for s in seeds.values()}) == 2  # seed 0 and seed 1 differ, whatever the opponent
    # a rerun finds everything finished, and a run of another config under the same folder is refused
    assert prepare(config, tmp_path) == ([], todo)
    with pytest.raises(ValueError, match="holds a run with other units"):
        prepare(small_config(games=4), tmp_path)


def test_an_arena_plans_units_with_attempts_as_well_as_games(tmp_path):
    """Either kind of run: puzzles tried twice each, nothing carried from unit to unit, every contestant paired on the
    same instances; the report reads them like games."""
    config = small_config(
        env="minesweeper",
        env_options={},
        opponents=[],
        seeds=1,
        games=2,
        attempts=2,
        carry_memory=False,
        memories=[{"name": "none", "player": "scripted:random"}, {"name": "history", "player": "scripted:random"}],
    )
    todo, _ = prepare(config, tmp_path)
    list(execute(todo, workers=1))
    runs = [Run.open(item.path) for item in todo]
    assert all(r.config.attempts == 2 and not r.config.carry_memory for r in runs)
    assert all(len(rec["attempts"]) == 2 or rec["first_success"] == 1 for r in runs for rec in r.records)
    assert len({tuple(rec["seed"] for rec in r.records) for r in runs}) == 1  # the same instances for both
    result = CliRunner().invoke(app, ["report", str(tmp_path)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output


def test_a_failing_run_stops_the_arena_with_its_name(tmp_path):
    (item,) = plan(small_config(memories=["none"], opponents=["cycle3"], seeds=1), tmp_path)
    broken = arena_mod.PlanItem(
        item.label, item.opponent, item.seed, item.path, item.config.model_copy(update={"env_options": {"rounds": 0}})
    )  # skips validation
    with pytest.raises(arena_mod.RunFailed, match="run none/cycle3/seed0 failed: ValueError: rounds must be"):
        list(execute([broken], workers=1))


def test_ray_missing_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ValueError, match="--ray needs Ray"):
        list(execute(plan(small_config(), tmp_path), ray=True))


def test_ray_plays_the_same_plan(tmp_path):
    pytest.importorskip("ray")
    config = small_config(opponents=["cycle3"], seeds=1)
    ray_items, _ = prepare(config, tmp_path / "ray")
    assert len(list(execute(ray_items, ray=True, ray_address="local"))) == len(ray_items)
    for item, reference in zip(ray_items, plan(config, tmp_path / "in-process")):
        arena_mod.play_item(str(reference.path), reference.config.model_dump_json())
        assert [r["score"] for r in Run.open(item.path).records] == [
            r["score"] for r in Run.open(reference.path).records
        ]


# ---- resume after kill -9 -----------------------------------------------------------------------------------------
def fingerprint(run_dir: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(run_dir)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
    }


def game_numbers(run_dir: Path) -> list[int]:
    return [json.loads(line)["index"] for line in (run_dir / "units.jsonl").read_text().splitlines()]


def test_killed_arena_resumes_without_replaying_finished_runs(tmp_path):
    out = tmp_path / "arena"
    args = [
        "arena",
        "--env",
        "rps",
        "--opponents",
        "cycle3",
        "--seeds",
        "6",
        "--games",
        "4",
        "--rounds",
        "30",
        "--memories",
        "none,history",
        "--llm",
        "scripted:learner",
        "--out",
        str(out),
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    victim = subprocess.Popen(
        [sys.executable, "-m", "ttlearn", *args, "--workers", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 60
    while len(list(out.glob("runs/*/*/*/summary.json"))) < 3 and time.time() < deadline:
        time.sleep(0.01)
    os.killpg(victim.pid, signal.SIGKILL)  # the arena and its workers, as an OOM kill or a lost node would
    victim.wait()
    finished = sorted(p.parent for p in out.glob("runs/*/*/*/summary.json"))
    assert 3 <= len(finished) < 12, "the kill must land mid-plan"
    before = {d: fingerprint(d) for d in finished}

    result = CliRunner().invoke(app, [*args, "--workers", "2"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert f"{len(finished)} of 12 runs already finished" in result.output
    assert {d: fingerprint(d) for d in finished} == before  # untouched: same bytes, same mtimes
    runs = sorted(p.parent for p in out.glob("runs/*/*/*/run.json"))
    assert len(runs) == 12
    assert all(game_numbers(d) == [1, 2, 3, 4] for d in runs)  # complete, no duplicate game
    assert "Elo" in result.output and (out / "report.html").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--memories", "none,magic"], "unknown memory method 'magic'"),
        (["--memories", "none", "--seeds", "two"], "--seeds takes a count"),
        (["--memories", "none", "--opponents", "cycle3,nobody"], "unknown RPS opponent 'nobody'"),
    ],
)
def test_arena_command_reports_bad_input_in_one_line(args, message, tmp_path):
    base = ["arena", "--env", "rps", "--opponents", "cycle3", "--out", str(tmp_path / "a")]
    result = CliRunner().invoke(app, [*base, *args], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
