"""Plug-ins from outside the package (docs/plugins.md): the example package in examples/plugin, installed into a
temporary directory the way `pip install -e` installs it (its code on the path, a .dist-info folder holding the
entry points of its pyproject.toml), then checked, run, resumed, replayed and put in an arena by the real CLI in
fresh processes; and a single-file plug-in that is not installed at all (`--plugin FILE`): recorded in the run's
config, named by `resume` when it is not loaded (never imported because a directory names it), and passed on to the
arena's worker processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml

from ttlearn.runs import Run

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plugin"


def install(target: Path) -> Path:
    """What `pip install -e examples/plugin` leaves behind, without pip or a network: the package importable from
    `target`, and its entry points in `target/<dist>.dist-info/entry_points.txt`."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    shutil.copytree(EXAMPLE / "ttlearn_counter", target / "ttlearn_counter")
    info = target / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    groups = project["entry-points"]
    (info / "entry_points.txt").write_text(
        "".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in groups[g].items()) + "\n" for g in groups)
    )
    return target


def ttlearn(*args: str, path: Path | None = None, cwd: Path | None = None, **env: str) -> str:
    """Run the CLI in a fresh process with `path` on PYTHONPATH; returns its output, failing on a non-zero exit."""
    paths = [str(ROOT / "src"), *([str(path)] if path else [])]
    done = subprocess.run(
        [sys.executable, "-m", "ttlearn", *args],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(paths), "COLUMNS": "200", **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def cut_after_first_game(run_dir: Path) -> None:
    """Leave the run as a kill -9 after game 1 would: its unit records up to game 1's."""
    lines = (run_dir / "units.jsonl").read_text().splitlines(keepends=True)
    assert json.loads(lines[0])["index"] == 1
    (run_dir / "units.jsonl").write_text(lines[0])
    (run_dir / "summary.json").unlink()


def scores(run_dir: Path) -> list[float]:
    units = [json.loads(line) for line in (run_dir / "units.jsonl").read_text().splitlines()]
    assert [u["index"] for u in units] == list(range(1, len(units) + 1))
    return [u["score"] for u in units]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return install(tmp_path_factory.mktemp("site"))


def test_an_installed_package_registers_an_env_a_memory_and_a_back_end(site):
    listed = ttlearn("list", path=site)
    assert "counter (gemma270m)" in listed and "tally" in listed and "first" in listed
    check = (
        "from ttlearn.envs.base import make_env; from ttlearn.envs.check import check_env; "
        "print(check_env(make_env('counter', seed=0), use_oracle=True)['success'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", check],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(site)])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip() == "True", done.stderr


def test_the_plugin_runs_resumes_replays_and_plays_an_arena(site, tmp_path):
    common = ("--memory", "tally", "--llm", "first", "--games", "3", "--seed", "1")
    ttlearn("run", "counter", *common, "--out", str(tmp_path / "whole"), path=site)
    ttlearn("run", "counter", *common, "--out", str(tmp_path / "killed"), path=site)
    cut_after_first_game(tmp_path / "killed")
    assert "resuming" in ttlearn("resume", str(tmp_path / "killed"), path=site)
    assert scores(tmp_path / "killed") == scores(tmp_path / "whole") and len(scores(tmp_path / "whole")) == 3
    state = Run.open(tmp_path / "killed").state_after(3)
    assert len(state["memory"]["scores"]) == 3  # the plug-in memory carried over through the resume
    assert "scores reproduced exactly" in ttlearn("replay", str(tmp_path / "whole"), path=site)

    arena = {"env": "counter", "memories": ["none", "tally"], "seeds": 2, "games": 2, "player": "first"}
    (tmp_path / "arena.yaml").write_text(yaml.safe_dump(arena))
    out = tmp_path / "arena"
    ttlearn("arena", str(tmp_path / "arena.yaml"), "--out", str(out), "--workers", "1", path=site)
    assert len(list(out.glob("runs/*/*/seed*/summary.json"))) == 4


SOLO = '''
"""A plug-in that is one file, not installed: it registers with the decorator."""
from ttlearn.envs.base import ENVS, Env
from ttlearn.types import Observation, StepResult


@ENVS.register("solo")
class Solo(Env):
    def __init__(self, seed: int = 0) -> None:
        self.moves = 0

    def describe(self) -> str:
        return "Say left or right three times."

    def reset(self, seed: int) -> Observation:
        return self.restart()

    def restart(self) -> Observation:
        self.moves = 0
        return Observation(f"move {self.moves}", ("left", "right"))

    def legal_actions(self) -> tuple[str, ...]:
        return ("left", "right")

    def step(self, action: str) -> StepResult:
        self.moves += 1
        seen = Observation(f"move {self.moves}", ("left", "right"))
        return StepResult(seen, float(action == "left"), self.moves == 3)

    def score(self) -> float:
        return 0.0
'''


def test_a_single_file_plugin_is_recorded_named_by_resume_and_passed_to_arena_workers(tmp_path):
    (tmp_path / "solo.py").write_text(SOLO)
    run_dir = tmp_path / "run"
    ttlearn(
        "--plugin",
        "solo.py",
        "run",
        "solo",
        "--llm",
        "scripted:random",
        "--games",
        "3",
        "--out",
        str(run_dir),
        cwd=tmp_path,
    )
    assert json.loads((run_dir / "run.json").read_text())["plugins"] == [str(tmp_path / "solo.py")]
    cut_after_first_game(run_dir)
    refused = subprocess.run(  # the config names the file, but a run directory never makes anything import
        [sys.executable, "-m", "ttlearn", "resume", str(run_dir)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and f"--plugin {tmp_path / 'solo.py'}" in refused.stdout, refused.stdout
    ttlearn("--plugin", "solo.py", "resume", str(run_dir), cwd=tmp_path)
    assert len(scores(run_dir)) == 3
    out = tmp_path / "arena"
    ttlearn(
        "--plugin",
        "solo.py",
        "arena",
        "--env",
        "solo",
        "--memories",
        "none,history",
        "--seeds",
        "1",
        "--games",
        "1",
        "--llm",
        "scripted:random",
        "--out",
        str(out),
        "--workers",
        "1",
        cwd=tmp_path,
    )
    assert len(list(out.glob("runs/*/*/seed*/summary.json"))) == 2  # played in fresh (spawned) worker processes
    assert "solo" in ttlearn("list", TTLEARN_PLUGINS=str(tmp_path / "solo.py"))


def test_a_plugin_that_fails_to_import_breaks_only_its_own_name(tmp_path):
    info = tmp_path / "broken_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[ttlearn.envs]\nbroken = not_installed_module:Env\n")
    listed = ttlearn("list", path=tmp_path)
    assert "broken" in listed and "rps" in listed
    assert "unavailable: environment 'broken'" in listed and "No module named 'not_installed_module'" in listed
    ttlearn("run", "rps", "--llm", "scripted:random", "--games", "1", "--out", str(tmp_path / "r"), path=tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "ttlearn", "run", "broken", "--games", "1"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(tmp_path)])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "not_installed_module" in done.stdout and "Traceback" not in done.stderr


def test_a_plugin_named_as_a_module_of_the_current_folder_is_found_again_from_elsewhere(tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "solo_module.py").write_text(SOLO)
    run_dir = tmp_path / "run"
    ttlearn(
        "--plugin",
        "solo_module",
        "run",
        "solo",
        "--llm",
        "scripted:random",
        "--games",
        "3",
        "--out",
        str(run_dir),
        cwd=tmp_path / "work",
    )
    recorded = f"solo_module@{tmp_path / 'work'}"
    assert json.loads((run_dir / "run.json").read_text())["plugins"] == [recorded]
    cut_after_first_game(run_dir)
    refused = subprocess.run(  # the config names it, but a run directory never makes anything import
        [sys.executable, "-m", "ttlearn", "resume", str(run_dir)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "400"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2 and f"--plugin {recorded}" in refused.stdout, refused.stdout
    ttlearn("--plugin", recorded, "resume", str(run_dir), cwd=tmp_path)  # the recorded spec, from another folder
    assert len(scores(run_dir)) == 3


def test_a_plugin_that_takes_over_a_name_says_so(tmp_path):
    (tmp_path / "shadow.py").write_text(SOLO.replace('@ENVS.register("solo")', '@ENVS.register("rps")'))
    listed = ttlearn("--plugin", str(tmp_path / "shadow.py"), "list")
    assert "warning: environment 'rps' from ttlearn_plugin_shadow shadows ttlearn's own 'rps' " in listed
