"""Players: who picks the actions. The frozen LLM player is the default; scripted players are baselines and test aids.

The LLM player builds its prompt from the environment's rules, the memory's context and the observation. Where the
back end can score a fixed list of choices it does (no invalid output is possible); otherwise it parses free text
with bounded retries. Output that never parses is *data*: the step falls back to a legal action and is counted as
invalid, never raised.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from ttlearn.envs.base import Env
from ttlearn.envs.base import match_legal_action as parse_action  # noqa: F401 - re-exported
from ttlearn.llm.base import LLM, Message
from ttlearn.registry import Registry
from ttlearn.types import Observation

PLAYERS: Registry[type["Player"]] = Registry("scripted player", "ttlearn.players")


@dataclass(frozen=True)
class Decision:
    action: str
    valid: bool = True
    raw: str = ""
    info: dict[str, Any] = field(default_factory=dict)


class Player(ABC):
    name: ClassVar[str] = "player"

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


def build_messages(rules: str, memory: str, observation: str, options: Sequence[str]) -> list[Message]:
    system = rules.strip()
    if memory.strip():
        system += "\n\nYour notes from earlier games:\n" + memory.strip()
    user = (
        f"{observation.strip()}\n\nLegal actions: {', '.join(options)}.\n"
        "Answer with exactly one legal action and nothing else."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class LLMPlayer(Player):
    """A frozen LLM choosing among the legal actions; option order is shuffled per call to cancel position bias."""

    name = "llm"

    def __init__(self, llm: LLM, *, temperature: float = 0.0, retries: int = 2, max_tokens: int = 16) -> None:
        self.llm, self.temperature, self.retries, self.max_tokens = llm, temperature, retries, max_tokens

    def act(self, env: Env, obs: Observation, memory: str, *, seed: int) -> Decision:
        rng = random.Random(seed)
        options = list(obs.legal_actions)
        rng.shuffle(options)
        messages = build_messages(env.describe(), memory, obs.text, options)
        if self.llm.supports_choices:
            reply = self.llm.complete(
                messages, temperature=self.temperature, seed=seed, choices=options, max_tokens=self.max_tokens
            )
            if reply.text in obs.legal_actions:
                return Decision(reply.text, True, reply.text)
        raws = []
        for attempt in range(self.retries + 1):
            reply = self.llm.complete(
                messages, temperature=self.temperature, seed=seed + attempt, max_tokens=self.max_tokens
            )
            raws.append(reply.text)
            action = env.parse_action(reply.text, obs.legal_actions)
            if action is not None:
                return Decision(action, True, reply.text, {"attempts": attempt + 1})
        return Decision(rng.choice(list(obs.legal_actions)), False, " | ".join(raws), {"attempts": self.retries + 1})
