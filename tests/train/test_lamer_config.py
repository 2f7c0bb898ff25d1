"""The LaMer trainer's settings that need no model: γ_traj per environment, and where GiGPO has no state to anchor."""

from __future__ import annotations

import pytest

from ttlearn.envs.base import make_env
from ttlearn.train import lamer
from ttlearn.train.lamer import LamerTrainConfig, LamerTrainer


def test_gamma_traj_is_the_released_value_per_environment(tmp_path) -> None:
    # traj_gamma of the authors' scripts (examples/sokoban|minesweeper/lamer_*_qwen3_4b.sh): 0.9 and 0.6
    assert lamer.GAMMA_TRAJ == {"sokoban": 0.9, "minesweeper": 0.6}
    assert LamerTrainConfig(out=tmp_path, env="sokoban").discount_across() == 0.9
    assert LamerTrainConfig(out=tmp_path, env="minesweeper").discount_across() == 0.6
    assert LamerTrainConfig(out=tmp_path, env="minesweeper", gamma_traj=0.95).discount_across() == 0.95


def test_an_environment_without_a_published_gamma_traj_must_be_given_one(tmp_path) -> None:
    with pytest.raises(ValueError, match="published no gamma_traj for 'code'"):
        LamerTrainConfig(out=tmp_path, env="code")
    assert LamerTrainConfig(out=tmp_path, env="code", gamma_traj=0.5).discount_across() == 0.5


def test_gigpo_is_refused_where_the_environment_names_no_state(tmp_path) -> None:
    # rps has no state_key(): observation texts (round counters, logs) would be anchors that never group
    config = LamerTrainConfig(out=tmp_path, env="rps", gamma_traj=0.6)
    with pytest.raises(ValueError, match="no state_key"):
        LamerTrainer(config, policy=object())  # refused before any model is touched
    lamer.refuse_stateless_gigpo(config.model_copy(update={"advantage": "grpo"}), make_env("rps"))
    lamer.refuse_stateless_gigpo(config.model_copy(update={"algo": "grpo"}), make_env("rps"))
    with pytest.raises(ValueError, match="no state_key"):
        lamer.refuse_stateless_gigpo(config.model_copy(update={"algo": "gigpo"}), make_env("rps"))
    lamer.refuse_stateless_gigpo(LamerTrainConfig(out=tmp_path, env="minesweeper"), make_env("minesweeper"))
