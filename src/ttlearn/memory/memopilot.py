"""MemoPilot: a memory model G_θ rewrites the whole memory after every game, m_t ~ G_θ(· | e_t, m_{t−1}).

The player never changes; only the text it is shown does. Untrained, G_θ is any LLM following the prompt below; the
trainer (`ttlearn.train.memopilot`) improves it by multi-turn GRPO with the reward of the *next* game, and a trained
writer is used here by giving `--writer runs/x/final` (an `hf:` spec). The first game is played with no memory.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ttlearn.llm.base import LLM, Message
from ttlearn.memory.base import Memory
from ttlearn.memory.text import bound_memory, episode_log
from ttlearn.types import Episode


@dataclass(frozen=True)
class WriterForm:
    """How G_θ is asked for a note: the user message (fields `memory`, `log`, `words`), the note's opening words,
    written into the writer's answer for it to continue (`prefill`), and whether the note ends at its first line
    break (`one_line`: then a player that reads a move per line reads one move)."""

    prompt: str
    prefill: str = ""
    one_line: bool = False
    completes_advice: bool = False
    """The writer names one reading of the opponent (`Env.readings`: RPS its favourite move, hold'em its style; the
    prompt's field `readings` lists them) and the note is completed with the environment's advice for it
    (`Env.advice`: the move that beats the favourite), so the reward of the next game credits the reading itself."""
    choice: bool = False
    """The writer's answer is drawn among the readings alone, each scored by the writer as a whole answer
    (`reading_choices`, `LLM.complete(choices=…)`; in training `HFPolicy.sample_choices`): every note names a
    reading, so the notes of a group differ only in which one, and a writer that rarely writes a reading by itself
    (SmolLM2 on hold'em's styles, docs/memopilot-holdem-run) still gets a reward spread to learn from."""


STYLE = WriterForm(
    "You keep the notes a player reads before each game against this opponent. After every game you name the "
    "opponent's style in it, one of: {readings}.\n\nCurrent notes: {memory}\n\nThe game just played: {log}",
    prefill="The opponent plays",
    one_line=True,
    completes_advice=True,
)

FORMS = {
    "notes": WriterForm(
        "You keep the notes a player reads before the next game.\n\n"
        "Current notes:\n{memory}\n\n"
        "The game that was just played:\n{log}\n\n"
        "Rewrite the notes for the next game: what the opponent does and exactly which move to play. "
        "At most {words} words. Write only the notes."
    ),
    "counter": WriterForm(
        "You keep the notes a player reads before each game against this opponent. After every game you rewrite "
        'them as one line: "The opponent plays mostly X, so play Y." X is the move the opponent played most; Y is '
        "the move that beats X.\n\nCurrent notes: {memory}\n\nThe game just played: {log}",
        prefill="The opponent plays mostly",
        one_line=True,
    ),
    "favourite": WriterForm(
        "You keep the notes a player reads before each game against this opponent. After every game you name, in "
        "one word, the move the opponent played most in it.\n\nCurrent notes: {memory}\n\nThe game just played: {log}",
        prefill="The opponent plays mostly",
        one_line=True,
        completes_advice=True,
    ),
    "style": STYLE,
    "style-choice": replace(STYLE, choice=True),
}
"""`notes` asks for free notes (every recorded run before issue 40); `counter` asks for one line naming the
opponent's most frequent move and its counter, the writer's answer opened with the line's first words: the form
chosen on development data (docs/memopilot.md) so that SmolLM2-135M, untrained, writes a note a player can read
(its free notes name no move in about 4 of 5 samples). `favourite` asks for the favourite alone and completes the
line with the environment's advice for it (its counter): under `counter` the reward credited only the suggested move,
never the reading that should pick it, and the named favourite decayed (docs/memopilot.md, mp-dev5). `style` is the
same for an opponent read by its style (hold'em: tight / loose, passive / aggressive), the readings listed in the
prompt; `style-choice` asks the same and lets the writer answer only with one of them. The instructions come before
the game's log, so the prompts of one batch share their head (`HFPolicy` evaluates it once)."""


def advice_of(episode: Episode) -> Mapping[str, str]:
    """{reading: advice} of the episode's environment (`Env.readings`, `Env.advice`, carried in its info); empty
    where it turns no reading into advice."""
    return episode.info.get("advice", {})


def named_reading(text: str, readings: Sequence[str]) -> str | None:
    """The reading `text` opens with, as a whole word ("Rock," names rock, "rocky" nothing; the longest first, so
    "tight-passive" is not read as a shorter reading it starts with), or None."""
    lowered = text.lower()
    opening = (r for r in sorted(readings, key=len, reverse=True) if re.match(rf"{re.escape(r)}(?![a-z])", lowered))
    return next(opening, None)


def writer_messages(rules: str, memory: str, episode: Episode, words: int, form: str = "notes") -> list[Message]:
    """The input of G_θ: the game's rules, the previous memory m_{t−1} and the trajectory e_t, in `form`."""
    shape = FORMS[form]
    content = shape.prompt.format(
        memory=memory or "(none yet)", log=episode_log(episode), words=words, readings=", ".join(advice_of(episode))
    )
    messages: list[Message] = [{"role": "system", "content": rules}, {"role": "user", "content": content}]
    return [*messages, {"role": "assistant", "content": shape.prefill}] if shape.prefill else messages


def note_source(form: str, reply: str, advice: Mapping[str, str] | None = None) -> str:
    """The note a writer's reply makes in `form`, before the length bound: the prefill and the reply (joined by a
    space: whitespace is collapsed by `bound_memory` anyway), cut at the first line break for one-line forms; for a
    form that completes the advice, the reading the reply opens with and, when `advice` ({reading: advice}, the
    environment's) has it, "so" and its advice."""
    shape = FORMS[form]
    text = reply.lstrip().split("\n", 1)[0] if shape.one_line else reply
    if shape.completes_advice and advice:
        reading = named_reading(text, list(advice))
        text = f"{reading}, so {advice[reading]}." if reading else text
    return f"{shape.prefill} {text}" if shape.prefill else text


def reading_choices(form: str, advice: Mapping[str, str]) -> list[str] | None:
    """The answers a `choice` form lets the writer give: each reading as written after the prefill (a space first),
    or None for a form that writes freely."""
    if not FORMS[form].choice:
        return None
    if not advice:
        raise ValueError(f"the writer form {form!r} picks one of the environment's readings, and this one has none")
    return [f" {reading}" for reading in advice]


def writer_stop(form: str) -> tuple[str, ...]:
    """Stop strings of the writer's reply: a one-line note ends at its line break, a named reading at its comma or
    full stop."""
    shape = FORMS[form]
    return ("\n", ",", ".") if shape.completes_advice else ("\n",) if shape.one_line else ()


def seen_token_count(prefixes: Sequence[str], max_chars: int) -> int:
    """How many leading tokens of a write the player sees, given `prefixes[k]` = the text of its first k + 1 tokens.

    The memory shown is `bound_memory(whole text, max_chars)`. Uncut, every token counts (the end-of-turn token too:
    stopping is what kept the note short). Cut, the count is the fewest tokens whose whitespace-collapsed text already
    begins with the shown memory; later tokens were dropped by the bound, so no reward depends on them.
    """
    if not prefixes:
        return 0
    whole = " ".join(prefixes[-1].split())
    shown = bound_memory(whole, max_chars)
    if shown == whole:
        return len(prefixes)
    return next(k + 1 for k, text in enumerate(prefixes) if " ".join(text.split()).startswith(shown))


class MemoPilotMemory(Memory):
    needs_llm = True

    def __init__(
        self,
        llm: LLM | None = None,
        max_chars: int = 400,
        words: int = 40,
        max_tokens: int = 80,
        temperature: float = 0.0,
        form: str = "notes",
    ) -> None:
        super().__init__(llm)
        if max_chars < 20 or words < 3 or max_tokens < 8:
            raise ValueError("memopilot needs max_chars >= 20, words >= 3 and max_tokens >= 8")
        if form not in FORMS:
            raise ValueError(f"memopilot form must be one of {', '.join(FORMS)}, got {form!r}")
        self.max_chars, self.words, self.max_tokens, self.temperature = max_chars, words, max_tokens, temperature
        self.form = form
        self.text = ""

    def context(self, query: str) -> str:
        return self.text

    def observe(self, episode: Episode) -> None:
        assert self.llm is not None
        rules = episode.info.get("rules", episode.task)
        messages = writer_messages(rules, self.text, episode, self.words, self.form)
        choices = reading_choices(self.form, advice_of(episode))
        if choices and not self.llm.supports_choices:
            raise ValueError(f"the writer form {self.form!r} needs a writer that answers choices (hf:…, llama.cpp)")
        reply = self.llm.complete(
            messages,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=episode.seed,
            stop=writer_stop(self.form),
            choices=choices,
        )
        self.text = bound_memory(note_source(self.form, reply.text, advice_of(episode)), self.max_chars)

    def state(self) -> dict[str, Any]:
        return {"text": self.text}

    def load(self, state: dict[str, Any]) -> None:
        self.text = str(state.get("text", ""))
