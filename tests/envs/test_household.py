"""The household text world on TextWorldExpress: seed folds, legal actions, the gold-path oracle, restarts."""

from __future__ import annotations

import pytest

pytest.importorskip("textworld_express")

from ttlearn.envs import make_env  # noqa: E402
from ttlearn.envs.household import FOLD_SIZE, Household, fold_seed  # noqa: E402


@pytest.fixture(scope="module")
def twc() -> Household:
    env = make_env("household", game="twc")
    yield env
    env.close()


@pytest.fixture(scope="module")
def cooking() -> Household:
    env = make_env("household", game="cookingworld", split="test")
    yield env
    env.close()


def play_oracle(env: Household, seed: int) -> int:
    env.reset(seed)
    steps = 0
    while True:
        action = env.oracle_action(seed)
        assert action in env.legal_actions()
        steps += 1
        if env.step(action).done:
            return steps


def test_fold_seed_maps_into_each_fold():
    assert fold_seed("train", 7) == 7
    assert fold_seed("train", 1007) == 7
    assert fold_seed("dev", 3) == 10003
    assert fold_seed("test", 999) == 20999
    assert fold_seed("test", 1000) == 20000


def test_folds_are_the_games_own(twc: Household):
    twc.reset(0)
    simulator = twc._simulator()
    for split, seeds in (
        ("train", simulator.getValidSeedsTrain()),
        ("dev", simulator.getValidSeedsDev()),
        ("test", simulator.getValidSeedsTest()),
    ):
        assert sorted(seeds) == [fold_seed(split, i) for i in range(FOLD_SIZE)]
    assert twc.instance_count() == FOLD_SIZE


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_oracle_solves_twc(twc: Household, seed: int):
    steps = play_oracle(twc, seed)
    assert twc.success() and twc.score() == 1.0
    assert steps <= twc.instance_stats()["gold_length"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_oracle_solves_cookingworld_test_fold(cooking: Household, seed: int):
    play_oracle(cooking, seed)
    assert cooking.success() and cooking.score() == 1.0
    assert cooking.instance_stats()["game_seed"] == 20000 + seed


def test_legal_actions_are_the_games_valid_actions_sorted(twc: Household):
    observation = twc.reset(5)
    assert observation.legal_actions == tuple(sorted(twc._info["validActions"]))
    assert "look around" in observation.legal_actions
    with pytest.raises(ValueError, match="not a valid action"):
        twc.step("fly to the moon")


def test_restart_replays_the_same_game(twc: Household):
    first = twc.reset(3)
    action = twc.oracle_action(3)
    seen = twc.step(action).observation.text
    again = twc.restart()
    assert (again.text, again.legal_actions) == (first.text, first.legal_actions)
    assert twc.score() == 0 and twc._steps == 0
    assert twc.step(action).observation.text == seen


def test_invalid_reply_uses_a_step_and_changes_nothing(twc: Household):
    start = twc.reset(4)
    result = twc.invalid_step("dance wildly")
    assert result.reward == 0 and not result.done and result.info["invalid"]
    assert result.observation.legal_actions == start.legal_actions
    assert "Step 2 of 50" in result.observation.text


def test_step_limit_ends_the_attempt():
    env = Household(game="twc", step_limit=2)
    try:
        env.reset(0)
        env.step("look around")
        result = env.step("look around")
        assert result.done and not env.success() and env.legal_actions() == ()
        assert "Stopped after 2 steps" in env.transcript()
        with pytest.raises(ValueError, match="attempt is over"):
            env.step("look around")
    finally:
        env.close()


def test_transcript_holds_what_the_agent_saw(twc: Household):
    twc.reset(6)
    twc.step("look around")
    transcript = twc.transcript()
    assert transcript.startswith(twc.task())
    assert "> look around" in transcript


@pytest.mark.parametrize(
    "options, message",
    [
        ({"game": "zork"}, "game must be one of"),
        ({"split": "valid"}, "split must be one of"),
        ({"step_limit": 0}, "step_limit must be"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        Household(**options)


def test_bad_game_params_are_one_clear_error():
    env = Household(game="twc", game_params="numRooms=3")
    with pytest.raises(ValueError, match="bad game_params 'numRooms=3'"):
        env.reset(0)


def test_construction_is_free_and_close_stops_the_jvm():
    env = Household()
    assert env._sim is None
    with pytest.raises(ValueError, match="call reset"):
        env.legal_actions()
    env.reset(0)
    java = env._sim._gateway.java_process
    env.close()
    assert java.wait(timeout=10) is not None
