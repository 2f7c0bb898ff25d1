"""Composing a turn of several moves (Sokoban: up to 3) out of single-move decisions, for choice-scoring players."""

from __future__ import annotations

import copy
from typing import Any

from ttlearn.envs.base import Env
from ttlearn.players.base import Decision, Player
from ttlearn.seeding import derive_seed
from ttlearn.types import UNPARSEABLE


class TurnPlayer(Player):
    """Composes one turn of up to `moves` single-move decisions by an inner player.

    Choice scoring picks one legal action per call, which would cap Sokoban at one move per turn (7 moves per attempt,
    while levels need 5–21). So the inner player decides again on a private copy of the environment advanced by the
    moves chosen so far: every decision sees the true board it acts on. The copy's status line counts the turn as
    taken (it says turn t + 1 while the real turn t is being composed, and on the last turn that copy is already
    over; the board is still the one the next move acts on). The turn ends early when the moves so far solve it.
    """

    name = "turn"

    def __init__(self, inner: Player, moves: int) -> None:
        if moves < 1:
            raise ValueError(f"moves per turn must be >= 1, got {moves}")
        self.inner, self.moves = inner, moves

    def begin_episode(self, env: Env) -> None:
        self.inner.begin_episode(env)

    def end_episode(self, env: Env, obs: Any) -> None:
        self.inner.end_episode(env, obs)

    def act(self, env: Env, obs: Any, memory: str, *, seed: int) -> Decision:
        chosen: list[Decision] = []
        view_env, view = env, obs
        for k in range(self.moves):
            chosen.append(self.inner.act(view_env, view, memory, seed=derive_seed(seed, "move", k)))
            if k + 1 == self.moves:
                break
            view_env = copy.deepcopy(env)
            view = view_env.step(", ".join(d.action for d in chosen)).observation
            if view_env.success():
                break
        invalid = [d for d in chosen if not d.valid]
        return Decision(
            ", ".join(d.action for d in chosen),
            not invalid,
            " | ".join(d.raw for d in chosen if d.raw),
            {"decisions": len(chosen)},
            cause=invalid[0].cause if invalid else UNPARSEABLE,
        )
