"""Environment-agnostic scripted players: uniform random (Nash in symmetric games) and the oracle."""

from __future__ import annotations

import random

from ttlearn.envs.base import Env
from ttlearn.players.base import PLAYERS, Decision, Player
from ttlearn.types import Observation


@PLAYERS.register("random")
class RandomPlayer(Player):
    """Uniform over the legal actions; in RPS this is the Nash equilibrium and scores 0 in expectation."""

    name = "random"

    def act(self, env: Env, obs: Observation, memory: str, *, seed: int) -> Decision:
        return Decision(random.Random(seed).choice(list(obs.legal_actions)))


@PLAYERS.register("oracle")
class OraclePlayer(Player):
    """Plays `env.oracle_action()`: the best response with full knowledge (the opponent's policy, a solver, ...).

    Its score is the environment's ceiling; environments without an oracle say so when asked.
    """

    name = "oracle"

    def act(self, env: Env, obs: Observation, memory: str, *, seed: int) -> Decision:
        return Decision(env.oracle_action(seed=seed))
