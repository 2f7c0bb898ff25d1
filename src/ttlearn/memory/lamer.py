"""LaMer's in-trial memory: between attempts at the *same* instance the agent writes one reflection, and the next
attempt sees the reflections (mode "reflection", the default), the earlier attempts' transcripts ("history"), or both.

A trial (`ttlearn.rollout.loop.play_trial`) resets this memory before each new instance, so nothing leaks across
instances; used in a plain session it simply keeps the last `keep` reflections. The reflection prompt asks for a
`<reflection>…</reflection>` block and the closing tag is the stop string, so a writer stops as soon as it is done;
the LaMer trainer samples the same prompt from its policy and trains the tokens the next attempt sees of them
(`seen_token_span`): the body after the tag, up to the `max_chars` cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from ttlearn.llm.base import LLM, Message
from ttlearn.memory.base import Memory
from ttlearn.memory.text import bound_memory
from ttlearn.types import Episode

Mode = Literal["reflection", "history", "both"]
MODES: tuple[str, ...] = ("reflection", "history", "both")
OPEN, CLOSE = "<reflection>", "</reflection>"

REFLECT_PROMPT = (
    "You did not solve this level on attempt {attempt}. Here is what happened:\n{transcript}\n\n"
    "{previous}"
    "You will try the same level again from the same start. In at most three sentences, say what went wrong and "
    f"give a concrete plan (which moves, in which order) for the next attempt. Write it as {OPEN}...{CLOSE}."
)


def attempt_log(episode: Episode) -> str:
    """One attempt as later attempts see it: its number, score and the environment's transcript."""
    transcript = episode.info.get("transcript") or "; ".join(f"{s.action} -> {s.reward:+g}" for s in episode.steps)
    return f"Attempt {episode.index} (score {episode.score:+g}):\n{transcript}"


def reflection_messages(rules: str, episode: Episode, previous: list[str]) -> list[Message]:
    """The writer's input: the rules, the failed attempt's transcript and the reflections written so far."""
    earlier = "".join(f"- {r}\n" for r in previous)
    prior = f"Your earlier reflections on this level:\n{earlier}\n" if earlier else ""
    user = REFLECT_PROMPT.format(attempt=episode.index, transcript=attempt_log(episode), previous=prior)
    return [{"role": "system", "content": rules}, {"role": "user", "content": user}]


def reflection_body(text: str) -> tuple[int, str]:
    """(where the body starts in `text`, the body whitespace-collapsed): after the last opening tag, before the
    closing one. Writers that skip the tags still count: their whole reply is the body."""
    start = text.rfind(OPEN) + len(OPEN) if OPEN in text else 0
    return start, " ".join(text[start:].split(CLOSE, 1)[0].split())


def extract_reflection(text: str, max_chars: int) -> str:
    """What the next attempt sees of a reply: its body (`reflection_body`) cut to `max_chars`."""
    return bound_memory(reflection_body(text)[1], max_chars)


def seen_token_span(prefixes: Sequence[str], max_chars: int) -> tuple[int, int]:
    """[start, end) of the tokens of a reflection that the next attempt sees, given `prefixes[k]` = the text of its
    first k + 1 tokens.

    The shown text is `extract_reflection` of the whole reply. Tokens before the body (a preamble, the opening tag)
    and, when the body is cut, the tokens past the cut change nothing the next attempt reads, so no reward depends
    on them. The span starts at the first token reaching into the body; uncut, it runs to the end (the closing tag
    and end-of-turn too: stopping is what kept the reflection short); cut, to the fewest tokens whose body already
    begins with the shown text. (0, 0): nothing is shown (an empty body is not kept).
    """
    if not prefixes:
        return 0, 0
    start, body = reflection_body(prefixes[-1])
    shown = bound_memory(body, max_chars)
    if not shown:
        return 0, 0
    first = next(k for k, text in enumerate(prefixes) if len(text) > start)
    if shown == body:
        return first, len(prefixes)
    end = next(k + 1 for k, text in enumerate(prefixes) if " ".join(text[start:].split()).startswith(shown))
    return first, end


class LamerMemory(Memory):
    needs_llm = True
    needs_trials = True

    def __init__(
        self,
        llm: LLM | None = None,
        mode: Mode = "reflection",
        keep: int = 2,
        max_tokens: int = 96,
        max_chars: int = 400,
        temperature: float = 0.0,
    ) -> None:
        super().__init__(llm)
        if mode not in MODES:
            raise ValueError(f"lamer mode must be one of {', '.join(MODES)}, got {mode!r}")
        if keep < 1 or max_tokens < 8 or max_chars < 20:
            raise ValueError("lamer needs keep >= 1, max_tokens >= 8 and max_chars >= 20")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.mode, self.keep, self.max_tokens, self.max_chars = mode, keep, max_tokens, max_chars
        self.temperature = temperature
        self.reflections: list[str] = []
        self.logs: list[str] = []

    @property
    def reflects(self) -> bool:
        return self.mode in ("reflection", "both")

    def context(self, query: str) -> str:
        parts = []
        if self.mode in ("history", "both") and self.logs:
            parts.append("Your earlier attempts at this level:\n" + "\n".join(self.logs))
        if self.reflects and self.reflections:
            parts.append(
                "Your reflections on earlier attempts at this level:\n" + "\n".join(f"- {r}" for r in self.reflections)
            )
        return "\n\n".join(parts)

    def observe(self, episode: Episode) -> None:
        if self.mode in ("history", "both"):
            self.logs = (self.logs + [attempt_log(episode)])[-self.keep :]
        if not self.reflects:
            return
        assert self.llm is not None
        messages = reflection_messages(episode.info.get("rules", episode.task), episode, self.reflections)
        reply = self.llm.complete(
            messages,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=episode.seed + episode.index,
            stop=[CLOSE],
        )
        text = extract_reflection(reply.text, self.max_chars)
        if text:
            self.reflections = (self.reflections + [f"After attempt {episode.index}: {text}"])[-self.keep :]

    def state(self) -> dict[str, Any]:
        return {"reflections": list(self.reflections), "logs": list(self.logs)}

    def load(self, state: dict[str, Any]) -> None:
        self.reflections = list(state.get("reflections", []))
        self.logs = list(state.get("logs", []))
