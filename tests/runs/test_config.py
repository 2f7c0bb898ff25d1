"""A run's config: what it checks by itself, and the defaults it decides once."""

from __future__ import annotations

import pytest

from ttlearn.runs import RunConfig, parse_config


def test_a_config_checks_itself():
    """What needs no plug-in is checked by the config, wherever it is built (CLI, library, arena)."""
    assert parse_config({"env": "rps"}).seeding == "unit"
    with pytest.raises(ValueError, match="what memory 'none' already does"):
        RunConfig(env="sokoban", memory="none", control=True).check()
    with pytest.raises(ValueError, match="^units: Input should be greater than or equal to 1$"):
        parse_config({"env": "rps", "units": 0})
    with pytest.raises(ValueError, match="^games: Extra inputs are not permitted$"):
        parse_config({"env": "rps", "games": 2})


def test_ttlearn_run_env_means_what_run_config_env_means(tmp_path):
    """One default: a flag not given is the config's own default, and `--games N` is the preset `games(N)`."""
    from typer.testing import CliRunner

    from ttlearn.cli import app
    from ttlearn.runs import games, read_config

    def recorded(*flags: str) -> RunConfig:
        out = tmp_path / "-".join(flags)
        result = CliRunner().invoke(app, ["run", "minesweeper", "--llm", "scripted:random", *flags, "--out", str(out)])
        assert result.exit_code == 0, result.output
        return read_config(out)

    fields = {"env": "minesweeper", "player": "scripted:random"}
    assert recorded("--units", "2") == RunConfig(**fields, units=2).resolved()
    assert recorded("--units", "2").attempts == 3  # memory none learns nothing across tasks: LaMer's attempts
    assert recorded("--games", "2") == RunConfig(**fields, **games(2)).resolved()
    assert recorded("--games", "2", "--attempts", "2").attempts == 2  # a flag given beats the preset
    learns = recorded("--units", "2", "--memory", "rag", "-m", "embedder=hash")
    assert (learns.carry_memory, learns.attempts) == (True, 1)  # as the memory declares


def test_the_player_and_the_environment_options_default_once(tmp_path):
    """The environment's declared player, and today's default of an option whose default changed, are decided by
    `resolved`; a recorded config that names no such option plays as it was recorded."""
    from ttlearn.envs.base import make_env
    from ttlearn.llm.base import DEFAULT_LLM
    from ttlearn.rollout.parts import validate_parts
    from ttlearn.runs import Run

    assert RunConfig(env="sql").resolved().player == "qwen-coder"
    assert RunConfig(env="rps").resolved().player == DEFAULT_LLM
    assert RunConfig(env="sql", player="smollm2").resolved().player == "smollm2"
    unresolved = RunConfig(env="sql", env_options={"dataset": "mini"}, player="scripted:random")
    with validate_parts(unresolved) as env:
        assert env.metric == make_env("sql", dataset="mini").metric == "exec"
    assert unresolved.resolved().env_options["metric"] == "exec"
    old = tmp_path / "old"
    Run.create(old, unresolved).close()  # a config written before `metric` existed names none
    assert Run.open(old).config.env_options == {"metric": "strict", "prefill": False, "dataset": "mini"}
