"""Environment-agnostic scripted players: uniform random (Nash in symmetric games) and the oracle."""

from __future__ import annotations

import random

from ttlearn.envs.base import Env
from ttlearn.players.base import Decision, Player
from ttlearn.types import Observation


class RandomPlayer(Player):
    """Uniform over the legal actions; in RPS this is the Nash equilibrium and scores 0 in expectation. Where actions
    are free text (code, SQL, tool calls) it has nothing to choose from and passes every turn: an invalid reply the
    environment answers with its `invalid_step` (the floor of the task)."""

    def act(self, env: Env, obs: Observation, memory: str, *, seed: int) -> Decision:
        if not obs.legal_actions:
            return Decision("", False, "[scripted:random writes no free text]")
        return Decision(random.Random(seed).choice(list(obs.legal_actions)))


class OraclePlayer(Player):
    """Plays `env.oracle_action()`: the best response with full knowledge (the opponent's policy, a solver, ...).

    Its score is the environment's ceiling; environments without an oracle say so when asked.
    """

    @classmethod
    def check_fit(cls, env: Env) -> None:
        if not env.has_oracle:
            raise ValueError(f"environment {env.name!r} has no oracle; use scripted:random or an LLM player")

    def act(self, env: Env, obs: Observation, memory: str, *, seed: int) -> Decision:
        return Decision(env.oracle_action(seed=seed))
