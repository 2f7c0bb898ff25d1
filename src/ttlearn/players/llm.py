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

Where the memory's text is shown is `note_at` (`NOTE_AT`; issue 31 measures which one each model follows): in the
system prompt (the default, as every recorded run played), as an earlier user/assistant exchange, as an advice line
right before the legal actions, or as a suggested default action (`suggested_action`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import get_args

from ttlearn.envs.base import Env, words
from ttlearn.llm.base import LLM, ContextOverflow, Message
from ttlearn.players.base import Decision, Player
from ttlearn.types import MOVE_SEQUENCE, NO_REPLY, OVERFLOW, RULED_OUT, NoteAt, Observation

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


NOTE_AT: tuple[str, ...] = get_args(NoteAt)
"""Where the player shows the memory's text: `system` (after the rules, as every recorded run played), `exchange`
(an earlier user turn asking for the notes and the notes as the assistant's answer), `advice` (a line of the last
user turn, right before the legal actions), `default` (the action the notes name for this decision, listed first and
marked as suggested, and the actions its `Avoid:` lines name left off the list; with free-text actions, the notes as
the suggested answer). See `build_messages`."""
NOTES_HEADING = "Your notes from earlier games:"
NOTES_QUESTION = "What do your notes from earlier games say?"


def named_last(line: str, legal_actions: Sequence[str]) -> str | None:
    """The legal action `line` mentions last, on word boundaries (longest first where two end together), or None:
    a note ends with its advice ("the opponent plays rock, so play paper" names paper)."""
    padded = f" {' '.join(words(line))} "
    best: tuple[int, int, str] | None = None
    for action in legal_actions:
        named = " ".join(words(action))
        at = padded.rfind(f" {named} ") if named else -1
        if at >= 0 and (best is None or (at + len(named), len(named)) > best[:2]):
            best = (at + len(named), len(named), action)
    return best[2] if best else None


def ruled_out(memory: str, legal_actions: Sequence[str]) -> set[str]:
    """The legal actions the note's `Avoid:` lines name (`note_at="default"` leaves them off the listed options)."""
    lines = [line.strip()[len(RULED_OUT) :] for line in memory.splitlines() if line.strip().startswith(RULED_OUT)]
    return {action for line in lines for part in line.split(",") if (action := named_last(part, legal_actions))}


def suggested_action(memory: str, legal_actions: Sequence[str], decision: int) -> str | None:
    """The action a note suggests for the player's `decision`-th decision (0-based) of the episode: a note of one
    action line (a game's fact and its counter-move) names the same action every time; a note of several action lines
    (a verified move sequence, one move per line, or any number under a `MOVE_SEQUENCE` first line) names its
    `decision`-th. None when that action is not legal now (the episode left the sequence) or the note names none.
    `Avoid:` lines suggest nothing."""
    lines = [line.strip() for line in memory.splitlines() if not line.strip().startswith(RULED_OUT)]
    named = [action for line in lines if (action := named_last(line, legal_actions)) is not None]
    if not named:
        return None
    fact = len(named) == 1 and lines[0] != MOVE_SEQUENCE
    action = named[0] if fact else (named[decision] if decision < len(named) else None)
    return action if action in legal_actions else None


REASON_THEN_ACT = "First think briefly about the situation, then give your action as <action>...</action>."


def build_messages(
    rules: str,
    memory: str,
    observation: str,
    options: Sequence[str],
    *,
    all_listed: bool = True,
    reasoning: bool = False,
    note_at: str = "system",
    suggested: str | None = None,
) -> list[Message]:
    """System: the rules (and the memory's notes, `note_at="system"`); then the memory's exchanges, if it gives them
    (`MemoryText`), as earlier user/assistant turns, or (`note_at="exchange"`) the notes as the answer to an earlier
    question; user: the observation, the notes as advice (`"advice"`) or the `suggested` action (`"default"`, listed
    first by the caller), and how to answer (the legal actions, if any; `all_listed` False: the options are some of
    the commands the environment accepts; `reasoning`: think first and tag the action — free-text actions already
    answer in the rules' format)."""
    if note_at not in NOTE_AT:
        raise ValueError(f"note_at must be one of {', '.join(NOTE_AT)}, got {note_at!r}")
    system = rules.strip()
    exchanges = list(getattr(memory, "exchanges", ()))
    note = memory.strip() if not exchanges else ""
    if note and note_at == "system":
        system += f"\n\n{NOTES_HEADING}\n{note}"
    if note and note_at == "exchange":
        exchanges.append((NOTES_QUESTION, note))
    if options and not all_listed:
        how = REASON_THEN_ACT if reasoning else "Answer with exactly one action and nothing else."
        answer = f"Some actions you can take: {', '.join(options)}.\n{how}"
    elif options:
        how = REASON_THEN_ACT if reasoning else "Answer with exactly one legal action and nothing else."
        answer = f"Legal actions: {', '.join(options)}.\n{how}"
    else:
        answer = "Answer in the format the rules ask for."
    if note and note_at == "advice":
        answer = f"Advice from your notes: {note}\n{answer}"
    elif note and note_at == "default" and not options:
        answer = f"Suggested answer (from your notes):\n{note}\n{answer}"
    elif suggested is not None and note_at == "default":
        answer = f"Suggested action (from your notes): {suggested}\n{answer}"
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
        note_at: str = "system",
    ) -> None:
        if note_at not in NOTE_AT:
            raise ValueError(f"note_at must be one of {', '.join(NOTE_AT)}, got {note_at!r}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if max_options < 1:
            raise ValueError(f"max_options must be >= 1, got {max_options}")
        if free_text_tokens is not None and free_text_tokens < 1:
            raise ValueError(f"free_text_tokens must be >= 1, got {free_text_tokens}")
        self.llm, self.temperature, self.retries, self.max_options = llm, temperature, retries, max_options
        self.free_text_tokens, self.note_at = free_text_tokens, note_at
        self.decisions = 0
        """Decisions made in the current episode: which line of a move sequence `note_at="default"` suggests (so a
        `default` player plays one episode at a time)."""

    def begin_episode(self, env: Env) -> None:
        self.decisions = 0

    def act(self, env: Env, obs: Observation, memory: str, *, seed: int) -> Decision:
        options = list(obs.legal_actions)
        random.Random(seed).shuffle(options)
        options = shortlist(options, obs.text, self.max_options, env.action_tier)
        all_listed = len(options) == len(obs.legal_actions) and not env.partial_actions
        reasoning = self.free_text_tokens is not None
        suggested = None
        if self.note_at == "default":
            avoid = ruled_out(memory, obs.legal_actions)
            if avoid and any(o not in avoid for o in options):
                options, all_listed = [o for o in options if o not in avoid], False
            suggested = suggested_action(memory, obs.legal_actions, self.decisions)
            if suggested is not None:
                options = [suggested, *(o for o in options if o != suggested)][: max(len(options), 1)]
        self.decisions += 1
        messages = (None if options else env.conversation(str(memory))) or build_messages(
            env.describe(),
            memory,
            obs.text,
            options,
            all_listed=all_listed,
            reasoning=reasoning,
            note_at=self.note_at,
            suggested=suggested,
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
