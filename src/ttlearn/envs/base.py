"""The environment protocol: a Gymnasium-sized interface over text games and tasks.

An `Env` is one *sequence* of episodes against fixed conditions (for RPS: one opponent). `reset(seed)` starts a new
episode instance, `restart()` replays the same instance from its initial state (multi-attempt trials), `step(action)`
advances it. Everything is deterministic given the constructor options and the seed.

Optional extras an environment may define (duck-typed, looked up with getattr):
- `oracle_action(seed: int) -> str`: the best action with full knowledge (bot policy, solver); `scripted:oracle`.
- `parse_action(text: str, legal_actions) -> str | None`: a custom free-text parser (e.g. several moves per turn);
  the default is `ttlearn.agent.parse_action`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from ttlearn.registry import Registry
from ttlearn.types import Observation, StepResult

ENVS: Registry[type["Env"]] = Registry("environment", "ttlearn.envs")


class Env(ABC):
    name: ClassVar[str]

    @abstractmethod
    def describe(self) -> str:
        """Rules text for the prompt: what the game is and how actions are written."""

    @abstractmethod
    def reset(self, seed: int) -> Observation:
        """Start a fresh episode instance determined by `seed`."""

    @abstractmethod
    def restart(self) -> Observation:
        """Return to the initial state of the current instance (same cards, same level, same opponent state)."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply one legal action; raises ValueError for an illegal one (the agent validates first)."""

    @abstractmethod
    def legal_actions(self) -> tuple[str, ...]:
        """The exact action strings accepted now."""

    @abstractmethod
    def score(self) -> float:
        """The episode's headline number (RPS: net wins; hold'em: big blinds; puzzles: total reward)."""

    def success(self) -> bool | None:
        """Whether the episode counts as solved, for environments where that is defined."""
        return None

    def task(self) -> str:
        """A short description of the current instance, used as a retrieval key by memories."""
        return self.describe()

    def transcript(self) -> str:
        """A compact text log of the current episode, for memories that write about it (reflections, insights)."""
        return ""

    def config(self) -> dict[str, Any]:
        """The constructor options, so a run can rebuild the same environment."""
        return {}


def make_env(name: str, **options: Any) -> Env:
    """Build a registered environment, refusing unknown options with the list of accepted ones."""
    return ENVS.build(name, **options)
