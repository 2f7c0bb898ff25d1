"""One contract test for every registered environment (OpenSpiel's one harness for every game): seeded
determinism, restart(), legal actions, score / success, instance sets, and a transcript free of hidden facts — played
by seeded random moves and, where the environment has one, by its oracle, which must solve the instance."""

from __future__ import annotations

import pytest

from ttlearn.envs.base import ENVS, make_env
from ttlearn.envs.check import ContractError, check_env

OPTIONS = {
    "rps": [{"opponent": "nash", "rounds": 12}, {"opponent": "half-random", "rounds": 12}, {"opponent": "biased"}],
    "holdem": [{"opponent": "random", "hands": 4}, {"opponent": "calling-station", "hands": 3, "duplicate": True}],
    "sql": [{"dataset": "mini"}],  # Spider needs `ttlearn data prepare sql`; the shipped set plays the same code
    "household": [{"game": "twc"}, {"game": "cookingworld"}],
}
"""Options per environment (several configurations where behaviour differs by option); others use their defaults."""

CASES = [(name, options) for name in ENVS.names() for options in OPTIONS.get(name, [{}])]


def case_id(case: tuple[str, dict]) -> str:
    name, options = case
    return name + "".join(f"-{k}={v}" for k, v in options.items())


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("seed", [3, 11])
def test_contract_with_random_moves(case, seed):
    name, options = case
    check_env(make_env(name, **options), seed=seed)


@pytest.mark.parametrize("case", [c for c in CASES if make_env(c[0], **c[1]).has_oracle], ids=case_id)
def test_oracle_solves_and_obeys_the_contract(case):
    name, options = case
    check_env(make_env(name, **options), seed=5, use_oracle=True)


def test_a_leaking_transcript_breaks_the_contract():
    env = make_env("minesweeper")

    class Leaky(type(env)):
        def transcript(self) -> str:
            return super().transcript() + " (optimal: 3 reveals)"

    leaky = Leaky()
    with pytest.raises(ContractError, match="hidden facts"):
        check_env(leaky, seed=3)


def test_a_declared_reading_without_advice_breaks_the_contract():
    """An environment that declares readings of its opponent must turn each into advice (MemoPilot completes a
    note with it); RPS and hold'em pass above."""
    env = make_env("rps", opponent="biased")

    class Mute(type(env)):
        def advice(self, reading: str) -> str:
            return "" if reading == "paper" else super().advice(reading)

    with pytest.raises(ContractError, match="every declared reading.*'paper'"):
        check_env(Mute(opponent="biased"), seed=3)
