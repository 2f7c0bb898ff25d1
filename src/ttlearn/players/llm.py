"""The frozen LLM player: prompt from the rules, the memory and the observation; one action back.

Where the back end can score a fixed list of choices it does, over the legal actions in a shuffled order (tiny models
are strongly biased by option order). Otherwise it generates text and the environment's `parse_action` reads it:
with `retries` more tries when there are legal actions to name, once for free-text actions (code, SQL, tool calls),
whose environment answers an unusable reply itself (`Env.invalid_step`). `free_text_tokens` is LaMer's policy: never
score, reason then act in one reply of up to that many tokens; with `retries=0` an unreadable reply is an invalid
step with the environment's penalty, as in LaMer.

A real simulator may list thousands of actions, or only some of those it accepts (`Env.partial_actions`): the player
then shows a shortlist of `max_options` (those the environment ranks first, `Env.action_tier`, then those most like
the observation: `shortlist`). A choice-scoring player picks among the shortlist only; where the environment's list is
partial a text-writing player also takes a command that is not listed (the environment's `parse_action` reads it,
`step` judges it, and may reject it: an invalid step with the simulator's reason). A prompt that still does not fit
the model's context is an invalid step with the reason as its reply, never the end of the run.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from ttlearn.envs.base import Env, words
from ttlearn.llm.base import LLM, ContextOverflow, Message
from ttlearn.players.base import Decision, Player
from ttlearn.types import NO_REPLY, OVERFLOW, Observation


MAX_OPTIONS = 64
"""The most actions one prompt lists, unless the run says otherwise (`--max-options`): more than every built-in game
offers (Minesweeper 36, household rooms rarely over 40), so shortlisting changes nothing there; a real simulator's
hundreds are cut to the ones its environment ranks first (`Env.action_tier`), then the ones most like the
observation."""


def shortlist(
    actions: Sequence[str], context: str, k: int, tier: Callable[[str], int | None] = lambda action: 1
) -> list[str]:
    """The `k` actions to show: those `tier` does not hide (None), the lower tiers first and, within a tier, by the
    share of an action's words that occur in `context` (a "take apple" scores 1.0 against "an apple is here", a "go
    north" 0.0). Ties keep the order of `actions`, so a shuffled list breaks them at random. When every shown
    action fits, they keep the order of `actions`."""
    tiers = {action: tier(action) for action in actions}
    shown = [action for action in actions if tiers[action] is not None]
    if len(shown) <= k:
        return shown
    seen = set(words(context))

    def rank(action: str) -> tuple[int, float]:
        named = words(action)
        return tiers[action], -(sum(w in seen for w in named) / len(named) if named else 0.0)

    return sorted(shown, key=rank)[:k]


REASON_THEN_ACT = "First think briefly about the situation, then give your action as <action>...</action>."


def build_messages(
    rules: str,
    memory: str,
    observation: str,
    options: Sequence[str],
    *,
    all_listed: bool = True,
    reasoning: bool = False,
) -> list[Message]:
    """System: the rules and the memory's notes; then the memory's exchanges, if it gives them (`MemoryText`), as
    earlier user/assistant turns; user: the observation and how to answer (the legal actions, if any; `all_listed`
    False: the options are some of the commands the environment accepts; `reasoning`: think first and tag the
    action — free-text actions already answer in the rules' format)."""
    system = rules.strip()
    exchanges = getattr(memory, "exchanges", ())
    if memory.strip() and not exchanges:
        system += "\n\nYour notes from earlier games:\n" + memory.strip()
    if options and not all_listed:
        how = REASON_THEN_ACT if reasoning else "Answer with exactly one action and nothing else."
        answer = f"Some actions you can take: {', '.join(options)}.\n{how}"
    elif options:
        how = REASON_THEN_ACT if reasoning else "Answer with exactly one legal action and nothing else."
        answer = f"Legal actions: {', '.join(options)}.\n{how}"
    else:
        answer = "Answer in the format the rules ask for."
    earlier: list[Message] = []
    for task, reply in exchanges:
        earlier += [{"role": "user", "content": task}, {"role": "assistant", "content": reply}]
    return [
        {"role": "system", "content": system},
        *earlier,
        {"role": "user", "content": f"{observation.strip()}\n\n{answer}"},
    ]


class LLMPlayer(Player):
    """A frozen LLM choosing among the legal actions, or writing a free-text action."""

    name = "llm"

    def __init__(
        self,
        llm: LLM,
        *,
        temperature: float = 0.0,
        retries: int = 2,
        max_options: int = MAX_OPTIONS,
        free_text_tokens: int | None = None,
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if max_options < 1:
            raise ValueError(f"max_options must be >= 1, got {max_options}")
        if free_text_tokens is not None and free_text_tokens < 1:
            raise ValueError(f"free_text_tokens must be >= 1, got {free_text_tokens}")
        self.llm, self.temperature, self.retries, self.max_options = llm, temperature, retries, max_options
        self.free_text_tokens = free_text_tokens

    def act(self, env: Env, obs: Observation, memory: str, *, seed: int) -> Decision:
        options = list(obs.legal_actions)
        random.Random(seed).shuffle(options)
        options = shortlist(options, obs.text, self.max_options, env.action_tier)
        all_listed = len(options) == len(obs.legal_actions) and not env.partial_actions
        reasoning = self.free_text_tokens is not None
        messages = build_messages(
            env.describe(), memory, obs.text, options, all_listed=all_listed, reasoning=reasoning
        )
        try:
            return self._decide(env, obs, messages, options, seed)
        except ContextOverflow as exc:
            return Decision("", False, f"{NO_REPLY}{exc}]", {"error": str(exc)}, OVERFLOW)

    def _decide(self, env: Env, obs: Observation, messages: list[Message], options: list[str], seed: int) -> Decision:
        if options and self.llm.supports_choices and self.free_text_tokens is None:
            reply = self.llm.complete(
                messages, temperature=self.temperature, seed=seed, choices=options, max_tokens=env.reply_tokens
            )
            if reply.text in obs.legal_actions:
                return Decision(reply.text, True, reply.text)
        prefill = "" if options else env.reply_prefix
        if prefill:
            messages = [*messages, {"role": "assistant", "content": prefill}]
        raws = []
        for attempt in range(self.retries + 1 if options else 1):
            reply = self.llm.complete(
                messages,
                temperature=self.temperature,
                seed=seed + attempt,
                max_tokens=self.free_text_tokens or env.reply_tokens,
            )
            # The reply as the model wrote it, prefill included (a server that ignores prefills repeats it itself).
            text = reply.text if reply.text.startswith(prefill.strip()) else prefill + reply.text
            raws.append(text)
            action = env.parse_action(text, obs.legal_actions)
            if action is not None:
                return Decision(action, True, text, {"attempts": attempt + 1})
        return Decision("", False, " | ".join(raws), {"attempts": len(raws)})
