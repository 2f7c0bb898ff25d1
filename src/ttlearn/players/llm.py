"""The frozen LLM player: prompt from the rules, the memory and the observation; one action back.

Where the back end can score a fixed list of choices it does, over the legal actions in a shuffled order (tiny models
are strongly biased by option order). Otherwise it generates text and the environment's `parse_action` reads it:
with `retries` more tries when there are legal actions to name, once for free-text actions (code, SQL, tool calls),
whose environment answers an unusable reply itself (`Env.invalid_step`). `free_text_tokens` is LaMer's policy: never
score, reason then act in one reply of up to that many tokens; with `retries=0` an unreadable reply is an invalid
step with the environment's penalty, as in LaMer.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ttlearn.envs.base import Env
from ttlearn.llm.base import LLM, Message
from ttlearn.players.base import Decision, Player
from ttlearn.types import Observation


REASON_THEN_ACT = "First think briefly about the situation, then give your action as <action>...</action>."


def build_messages(
    rules: str, memory: str, observation: str, options: Sequence[str], *, reasoning: bool = False
) -> list[Message]:
    """System: the rules and the memory; user: the observation and how to answer (the legal actions, if any: with
    `reasoning`, think first and tag the action; free-text actions already answer in the rules' format)."""
    system = rules.strip()
    if memory.strip():
        system += "\n\nYour notes from earlier games:\n" + memory.strip()
    if options:
        how = REASON_THEN_ACT if reasoning else "Answer with exactly one legal action and nothing else."
        answer = f"Legal actions: {', '.join(options)}.\n{how}"
    else:
        answer = "Answer in the format the rules ask for."
    return [{"role": "system", "content": system}, {"role": "user", "content": f"{observation.strip()}\n\n{answer}"}]


class LLMPlayer(Player):
    """A frozen LLM choosing among the legal actions, or writing a free-text action."""

    name = "llm"

    def __init__(
        self, llm: LLM, *, temperature: float = 0.0, retries: int = 2, free_text_tokens: int | None = None
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if free_text_tokens is not None and free_text_tokens < 1:
            raise ValueError(f"free_text_tokens must be >= 1, got {free_text_tokens}")
        self.llm, self.temperature, self.retries = llm, temperature, retries
        self.free_text_tokens = free_text_tokens

    def act(self, env: Env, obs: Observation, memory: str, *, seed: int) -> Decision:
        options = list(obs.legal_actions)
        random.Random(seed).shuffle(options)
        reasoning = self.free_text_tokens is not None
        messages = build_messages(env.describe(), memory, obs.text, options, reasoning=reasoning)
        if options and self.llm.supports_choices and not reasoning:
            reply = self.llm.complete(
                messages, temperature=self.temperature, seed=seed, choices=options, max_tokens=env.reply_tokens
            )
            if reply.text in obs.legal_actions:
                return Decision(reply.text, True, reply.text)
        raws = []
        for attempt in range(self.retries + 1 if options else 1):
            reply = self.llm.complete(
                messages,
                temperature=self.temperature,
                seed=seed + attempt,
                max_tokens=self.free_text_tokens or env.reply_tokens,
            )
            raws.append(reply.text)
            action = env.parse_action(reply.text, obs.legal_actions)
            if action is not None:
                return Decision(action, True, reply.text, {"attempts": attempt + 1})
        return Decision("", False, " | ".join(raws), {"attempts": len(raws)})
