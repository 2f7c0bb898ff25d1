"""The ideal online RPS learner: the reference ceiling of learning speed for memories and LLM players.

It starts knowing nothing. A set of context models ("experts") predicts the opponent's next move, each from one view of
the history: the opponent's last n moves, your last n moves, the last n rounds of both, or the round's index in the game
(which is what a per-game replayed string such as the probe keys on). Every expert keeps Krichevsky–Trofimov counts per
context; their predictions are mixed by Bayesian model averaging (each expert weighted by the likelihood it gave the
opponent's actual moves), and the player best-responds to the mixture. Counts and weights persist across games, so it
learns across games too; `state()` / `load()` round-trip them through JSON.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ttlearn.envs.base import Env
from ttlearn.envs.rps_bots import MOVES, best_responses
from ttlearn.players.base import Decision, Player
from ttlearn.types import Observation

KT_ALPHA = 0.5


def kt_probabilities(counts: Sequence[float], alpha: float = KT_ALPHA) -> np.ndarray:
    """Krichevsky–Trofimov (Dirichlet-α) predictive distribution: p_i = (n_i + α) / (Σ_j n_j + 3α), α = 1/2."""
    n = np.asarray(counts, dtype=float)
    return (n + alpha) / (n.sum() + 3 * alpha)


def mix(predictions: np.ndarray, log_weights: np.ndarray) -> np.ndarray:
    """Bayesian model average: p = Σ_e w_e p_e / Σ_e w_e with w_e = exp(log_weight_e) (rows of `predictions`)."""
    weights = np.exp(log_weights - log_weights.max())
    return weights @ predictions / weights.sum()


def history(obs: Observation) -> tuple[list[int], list[int]]:
    """Your moves and the opponent's so far, as move ints, from the observation's structured data."""
    return [MOVES.index(m) for m in obs.data["my_moves"]], [MOVES.index(m) for m in obs.data["opp_moves"]]


Context = Callable[[Sequence[int], Sequence[int]], "str | None"]


def _recent(n: int, view: str) -> Context:
    """Context = the last n rounds seen through `view` ('opp', 'me' or 'both'), as move initials; None if too early."""

    def context(mine: Sequence[int], theirs: Sequence[int]) -> str | None:
        if len(mine) < n:
            return None
        start = len(mine) - n
        parts = {"opp": [theirs], "me": [mine], "both": [mine, theirs]}[view]
        return "|".join("".join("rps"[m] for m in seq[start:]) for seq in parts)

    return context


def _lagged(n: int) -> Context:
    """Context = the opponent's move n rounds ago: a period-n cycle makes it predict the next move exactly."""
    return lambda mine, theirs: "rps"[theirs[-n]] if len(theirs) >= n else None


EXPERTS: dict[str, Context] = {
    **{f"opp{n}": _recent(n, "opp") for n in range(5)},
    **{f"me{n}": _recent(n, "me") for n in (1, 2)},
    **{f"both{n}": _recent(n, "both") for n in (1, 2, 3)},
    **{f"lag{n}": _lagged(n) for n in range(2, 9)},
    "position": lambda mine, theirs: str(len(mine)),
}
"""Expert name → context of the next round. opp0 is plain frequency; lagN learns a period-N cycle within about one
period; `position` learns a string replayed every game (the probe, a cycle restarted each game)."""


class RPSLearner(Player):
    """Context-mixing predictor of the opponent + best response; reads `obs.data` (`my_moves`, `opp_moves`)."""

    learns = True

    @classmethod
    def check_fit(cls, env: Env) -> None:
        if env.name != "rps":
            raise ValueError(f"scripted:learner predicts an RPS opponent; environment {env.name!r} is not rps")

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, list[float]]] = {e: {} for e in EXPERTS}
        self.log_weights = np.zeros(len(EXPERTS))
        self._absorbed = 0

    def begin_episode(self, env: Env) -> None:
        self._absorbed = 0

    def end_episode(self, env: Env, obs: Observation) -> None:
        """Learn the game's last round, which no `act` call sees (the session calls this hook when it has it)."""
        self._absorb(obs)

    def predict(self, mine: Sequence[int], theirs: Sequence[int]) -> tuple[np.ndarray, list[str | None]]:
        """Each expert's distribution over the opponent's next move, and the contexts they used.

        An expert whose context does not exist yet (too early in the game) sleeps: it is given the mixture of the
        awake experts, so it neither steers the forecast nor gains or loses weight relative to them ("specialists").
        """
        contexts = [context(mine, theirs) for context in EXPERTS.values()]
        rows = np.array([kt_probabilities(self.counts[e].get(c, (0, 0, 0))) for e, c in zip(EXPERTS, contexts)])
        awake = np.array([c is not None for c in contexts])
        rows[~awake] = mix(rows[awake], self.log_weights[awake])
        return rows, contexts

    def _absorb(self, obs: Observation) -> None:
        """Update counts and weights with the rounds of the current game not learned yet."""
        mine, theirs = history(obs)
        for t in range(self._absorbed, len(mine)):
            predictions, contexts = self.predict(mine[:t], theirs[:t])
            self.log_weights += np.log(predictions[:, theirs[t]])
            self.log_weights -= self.log_weights.max()  # only ratios matter; keeps the numbers (and JSON) bounded
            for expert, context in zip(EXPERTS, contexts):
                if context is not None:
                    self.counts[expert].setdefault(context, [0.0, 0.0, 0.0])[theirs[t]] += 1
        self._absorbed = len(mine)

    def act(self, env: Env, obs: Observation, memory: str, *, seed: int) -> Decision:
        self._absorb(obs)
        mine, theirs = history(obs)
        predictions, _ = self.predict(mine, theirs)
        forecast = mix(predictions, self.log_weights)
        move = random.Random(seed).choice(best_responses(forecast))
        return Decision(MOVES[move], info={"forecast": [round(float(p), 4) for p in forecast]})

    def state(self) -> dict[str, Any]:
        return {
            "counts": self.counts,
            "log_weights": dict(zip(EXPERTS, self.log_weights.tolist())),
        }

    def load(self, state: dict[str, Any]) -> None:
        unknown = sorted(set(state.get("counts", {})) - set(EXPERTS))
        if unknown:
            raise ValueError(f"learner state has unknown experts {unknown}; known: {', '.join(EXPERTS)}")
        self.counts = {e: {c: list(n) for c, n in state["counts"].get(e, {}).items()} for e in EXPERTS}
        weights = state.get("log_weights", {})
        self.log_weights = np.array([float(weights.get(e, 0.0)) for e in EXPERTS])
