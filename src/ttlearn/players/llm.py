"""The frozen LLM player: prompt from the rules, the memory and the observation; one action back.

Where the back end can score a fixed list of choices it does, over the legal actions in a shuffled order (tiny models
are strongly biased by option order). Otherwise it generates text and the environment's `parse_action` reads it:
with bounded retries when there are legal actions to name, once for free-text actions (code, SQL, tool calls), whose
environment answers an unusable reply itself (`Env.invalid_step`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ttlearn.envs.base import Env
from ttlearn.llm.base import LLM, Message
from ttlearn.players.base import Decision, Player
from ttlearn.types import Observation


def build_messages(rules: str, memory: str, observation: str, options: Sequence[str]) -> list[Message]:
    """System: the rules and the memory; user: the observation and how to answer (the legal actions, if any)."""
    system = rules.strip()
    if memory.strip():
        system += "\n\nYour notes from earlier games:\n" + memory.strip()
    if options:
        answer = f"Legal actions: {', '.join(options)}.\nAnswer with exactly one legal action and nothing else."
    else:
        answer = "Answer in the format the rules ask for."
    return [{"role": "system", "content": system}, {"role": "user", "content": f"{observation.strip()}\n\n{answer}"}]


class LLMPlayer(Player):
    """A frozen LLM choosing among the legal actions, or writing a free-text action."""

    name = "llm"

    def __init__(self, llm: LLM, *, temperature: float = 0.0, retries: int = 2) -> None:
        self.llm, self.temperature, self.retries = llm, temperature, retries

    def act(self, env: Env, obs: Observation, memory: str, *, seed: int) -> Decision:
        options = list(obs.legal_actions)
        random.Random(seed).shuffle(options)
        messages = build_messages(env.describe(), memory, obs.text, options)
        if options and self.llm.supports_choices:
            reply = self.llm.complete(
                messages, temperature=self.temperature, seed=seed, choices=options, max_tokens=env.reply_tokens
            )
            if reply.text in obs.legal_actions:
                return Decision(reply.text, True, reply.text)
        raws = []
        for attempt in range(self.retries + 1 if options else 1):
            reply = self.llm.complete(
                messages, temperature=self.temperature, seed=seed + attempt, max_tokens=env.reply_tokens
            )
            raws.append(reply.text)
            action = env.parse_action(reply.text, obs.legal_actions)
            if action is not None:
                return Decision(action, True, reply.text, {"attempts": attempt + 1})
        return Decision("", False, " | ".join(raws), {"attempts": len(raws)})
