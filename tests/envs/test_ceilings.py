"""Every environment option that bounds a resource has a ceiling in one table (`envs.ceilings`), and a value past it
is refused in one line however it comes in: `-e`, a config file, or a received run's `run.json` on `replay` (issue
48: `timeout_ms` of a day ran statements for an hour, and 1e13 ended in an OverflowError traceback)."""

from __future__ import annotations

import inspect
import json

import pytest
from typer.testing import CliRunner

from ttlearn.cli import app
from ttlearn.envs.base import ENVS, make_env
from ttlearn.envs.ceilings import CEILINGS


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), output
    return lines[0]


@pytest.mark.parametrize("name", sorted(CEILINGS))
def test_each_ceiling_names_an_option_whose_default_is_under_it(name):
    parameters = inspect.signature(ENVS.get(name).__init__).parameters
    for option, ceiling in CEILINGS[name].items():
        assert option in parameters, (name, option)
        assert parameters[option].default <= ceiling, (name, option)


@pytest.mark.parametrize("value", [1e13, 30_001, float("nan"), "1e13", True])
def test_a_value_past_the_ceiling_is_refused_whoever_builds_the_environment(value):
    with pytest.raises(ValueError, match="db_bench option timeout_ms"):
        make_env("db_bench", timeout_ms=value)
    with pytest.raises(ValueError, match="db_bench option timeout_ms"):
        ENVS.get("db_bench")(timeout_ms=value)  # the class itself checks too
    assert make_env("db_bench", timeout_ms=30_000).config() == {"timeout_ms": 30_000}


@pytest.mark.parametrize("value, message", [("1.0e+13", "may be at most 30000"), ("1e13", "must be a number")])
def test_the_command_line_refuses_it_in_one_line(value, message, tmp_path):
    result = invoke("run", "db_bench", "-e", f"timeout_ms={value}", "--llm", "scripted:oracle", "--units", "1",
                    "--out", str(tmp_path / "run"))  # fmt: skip
    assert result.exit_code == 2 and message in one_error_line(result.output)


def test_a_received_run_past_the_ceiling_is_refused_on_replay(tmp_path):
    run = tmp_path / "run"
    played = invoke("run", "db_bench", "--llm", "scripted:oracle", "--units", "1", "--out", str(run))
    assert played.exit_code == 0, played.output
    config = json.loads((run / "run.json").read_text())
    config["env_options"]["max_rows"] = 10**12
    (run / "run.json").write_text(json.dumps(config))
    result = invoke("replay", str(run), "--out", str(tmp_path / "replay"))
    assert result.exit_code == 2 and "db_bench option max_rows may be at most 10000" in one_error_line(result.output)
