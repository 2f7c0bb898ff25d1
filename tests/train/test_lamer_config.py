"""The LaMer trainer's settings that need no model: γ_traj per environment, and where GiGPO has no state to anchor."""

from __future__ import annotations

import pytest

from ttlearn.envs.base import ENVS, make_env
from ttlearn.train import lamer
from ttlearn.train.lamer import LamerTrainConfig, LamerTrainer


def test_gamma_traj_is_the_released_value_per_environment(tmp_path) -> None:
    # traj_gamma of the authors' scripts (examples/sokoban|minesweeper/lamer_*_qwen3_4b.sh): 0.9 and 0.6
    published = {name: ENVS.get(name).trajectory_discount for name in ("sokoban", "minesweeper", "rps", "code")}
    assert published == {"sokoban": 0.9, "minesweeper": 0.6, "rps": None, "code": None}
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


def test_formula_selects_the_papers_or_the_released_estimator(tmp_path) -> None:
    from ttlearn.train.lamer import TrainStep, step_advantages

    # trial 0 = (−1, −1) | reflection | (10), trial 1 = (0) from the same start board (anchor (1, "s0")); Sokoban:
    # γ_step 0.95, γ_traj 0.9. The paper's numbers are test_train_lamer's: [7.05, 3.525, 3.525, 3.525, −7.05].
    steps = [
        TrainStep(-1.0, 1, False, (1, "s0"), ()),
        TrainStep(-1.0, 1, False, (1, "s1"), ()),
        TrainStep(0.0, 1, True, ("reflection", (1,)), ()),
        TrainStep(10.0, 2, False, (2, "s0"), ()),
    ]
    batch = [("i", 0, steps), ("i", 1, [TrainStep(0.0, 1, False, (1, "s0"), ())])]
    config = LamerTrainConfig(out=tmp_path, env="sokoban")
    assert config.formula == "paper"
    assert step_advantages(batch, config).tolist() == pytest.approx([7.05, 3.525, 3.525, 3.525, -7.05])
    # released: E = −2, −2, 0 (reflection), 10 | 0, mean over the 5 steps 1.2 → −3.2, −3.2, −1.2, 8.8 | −1.2;
    # returns 10, reflection 10, −1 + 0.9·10 = 8, −1 + 0.95·8 = 6.6 | 0: anchor (1, "s0") → ±3.3
    released = config.model_copy(update={"formula": "released"})
    assert step_advantages(batch, released).tolist() == pytest.approx([0.1, -3.2, -1.2, 8.8, -4.5])
    # released GRPO: the same E over the group's steps, ÷ (sample std √(100.8 / 4) = 5.019960 + 1e-6)
    grpo = released.model_copy(update={"advantage": "grpo"})
    expected = [d / (25.2**0.5 + 1e-6) for d in (-3.2, -3.2, -1.2, 8.8, -1.2)]
    assert step_advantages(batch, grpo).tolist() == pytest.approx(expected)
    with pytest.raises(ValueError, match="formula"):
        LamerTrainConfig(out=tmp_path, env="sokoban", formula="code")
