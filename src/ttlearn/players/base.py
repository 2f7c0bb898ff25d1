"""The player protocol: who picks the actions. The frozen LLM player (`players.llm`) is the default; the scripted
players registered here (`--llm scripted:NAME`) are baselines and test aids.

A player returns a `Decision`; one that names no action is `valid=False` and the play loop decides what happens
(the environment's `invalid_step`, else a random legal move), so invalid output is data, never an exception.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ttlearn.envs.base import Env
from ttlearn.registry import Registry
from ttlearn.types import UNPARSEABLE, Observation

PLAYERS: Registry[type["Player"]] = Registry(
    "scripted player",
    "ttlearn.players",
    {
        **{
            f"holdem-{style}": "ttlearn.players.holdem_bot:BOTS"
            for style in ("calling-station", "loose-aggressive", "maniac", "random", "tight", "tight-passive")
        },
        "learner": "ttlearn.players.rps_learner:RPSLearner",
        "oracle": "ttlearn.players.basic:OraclePlayer",
        "random": "ttlearn.players.basic:RandomPlayer",
    },
)
"""Scripted players by name; the hold'em bots are a `Family`: a subclass of `HoldemBotPlayer` per style."""


@dataclass(frozen=True)
class Decision:
    """`action` is what to play; when `valid` is False it names nothing playable, `raw` holds the reply and `cause`
    says why (`types.UNPARSEABLE`, or `OVERFLOW` when the prompt did not fit)."""

    action: str
    valid: bool = True
    raw: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    cause: str = UNPARSEABLE


class Player(ABC):
    name: ClassVar[str] = "player"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        PLAYERS.name_class(cls)  # a class of the package takes its name from the table

    learns: ClassVar[bool] = False
    """True when the player carries state from one episode to the next (`state()`), like the scripted learner."""

    @classmethod  # noqa: B027 - most players play anything: an empty default, not an abstract method
    def check_fit(cls, env: Env) -> None:
        """Raise ValueError, saying what to use instead, when this player cannot play `env` (checked before any
        model loads)."""

    def begin_episode(self, env: Env) -> None:  # noqa: B027 - optional hook
        """Called after `env.reset()`; scripted players may inspect the environment (the oracle reads the bot)."""

    @abstractmethod
    def act(self, env: Env, obs: Observation, memory: str, *, seed: int) -> Decision:
        """Pick one of `obs.legal_actions`."""

    def end_episode(self, env: Env, obs: Observation) -> None:  # noqa: B027 - optional hook
        """Called with the final observation; learning players absorb the last step."""

    def state(self) -> dict[str, Any]:
        """Cross-episode state (only learning scripted players have any), snapshotted with the memory."""
        return {}

    def load(self, state: dict[str, Any]) -> None:  # noqa: B027 - stateless by default
        pass
