"""The LLM protocol: chat messages in, a `Completion` out, optionally constrained to a list of choices.

Back ends register a *scheme*; a spec string `scheme[:argument]` picks one, e.g. `smollm2`, `gguf:/models/x.gguf`,
`openai:http://127.0.0.1:8000/v1#qwen`.
"""

from __future__ import annotations

import json
import re
import time
from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from ttlearn.cache import cache_root  # noqa: F401 - the back ends cache converted models and probes here
from ttlearn.registry import PluginError, Registry, UnknownNameError
from ttlearn.types import Completion

Message = dict[str, str]
DEFAULT_LLM = "gemma270m"
"""The default player and writer, chosen by measurement: of the embedded models it is the one whose choices follow an
explicit memory note (benchmarks/note_following.py; table in docs/models.md)."""

LLMS: Registry[Callable[[str], "LLM"]] = Registry(
    "LLM back end",
    "ttlearn.llms",
    {
        **{
            name: "ttlearn.llm.llamacpp:EMBEDDED_FACTORIES"
            for name in ("gemma270m", "qwen-coder", "qwen-coder-1.5b", "smollm2")
        },
        "gguf": "ttlearn.llm.llamacpp:_gguf",
        "hf": "ttlearn.llm.hf:from_spec",
        "openai": "ttlearn.llm.openai:OpenAIChat.from_spec",
    },
)
"""Back ends by spec scheme. The embedded models are a `Family`: `embedded_factory` makes each one's factory."""


class LLMError(RuntimeError):
    """The back end could not answer (dead server, missing model, crashed runtime); the message says what to do."""


class ContextOverflow(LLMError):
    """The prompt does not fit the model's context. Not a failure of the run: the player counts the step invalid
    with this reason (a real simulator's busy room can list thousands of actions), and the episode goes on."""

    def __init__(self, message: str, prompt_tokens: int = 0) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens


class LLM(ABC):
    spec: str = "?"
    supports_choices: bool = False
    """True when `complete(..., choices=...)` returns one of the choices, scored or constrained by the back end."""
    side_by_side: int = 1
    """How many calls this back end answers at once with each reply exactly the one it gives alone (no batching
    across requests, no shared cache): the driver plays that many independent units together by itself. The embedded
    model and `hf:` on the CPU: one per idle core; a server: what the user declares (`?side_by_side=N`), else 1, since
    a server's batching is its own (`--concurrency` asks for episodes in flight there anyway)."""
    sends_key: ClassVar[str | None] = None
    """The environment variable whose credential this back end sends with every request (`openai:`:
    OPENAI_API_KEY), or None. A run directory may come from anyone, so `runs.trust` refuses to resume a run that would
    send it to a URL the user did not name again; a back end that declares one registers its class (or the class's
    `from_spec`) in its table, so that the guard finds the declaration."""

    @classmethod
    def credential_url(cls, argument: str) -> str:
        """Where a back end built from the spec argument `argument` sends its `sends_key` credential."""
        raise NotImplementedError(f"{cls.__name__} declares sends_key, so it says where it sends it")

    @abstractmethod
    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 128,
        temperature: float = 0.0,
        seed: int = 0,
        stop: Sequence[str] = (),
        choices: Sequence[str] | None = None,
    ) -> Completion:
        """Answer the conversation. With `choices` and `supports_choices`, `text` is one of them."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release processes, sockets or model memory."""


def split_spec(spec: str) -> tuple[str, str]:
    """`scheme:argument` → (scheme, argument); `scheme?options` → (scheme, "?options"), so every back end may take
    `?key=value&…` options after its argument, or straight after its name (`gemma270m?n_ctx=8192`)."""
    scheme = re.match(r"[^:?]*", spec).group()  # type: ignore[union-attr] - matches the empty string at least
    rest = spec[len(scheme) :]
    return scheme, rest[1:] if rest.startswith(":") else rest


def credential_target(spec: str) -> tuple[str, str] | None:
    """(URL, environment variable) of the credential a back end of `spec` sends, as its class declares
    (`LLM.sends_key`); None where it sends none, or where no class of a loaded plug-in answers for the scheme (it
    cannot be played, then)."""
    scheme, argument = split_spec(spec)
    try:
        factory = LLMS.get(scheme)
    except (UnknownNameError, PluginError):
        return None
    backend = factory if isinstance(factory, type) else getattr(factory, "__self__", None)
    if not isinstance(backend, type) or not issubclass(backend, LLM) or backend.sends_key is None:
        return None
    return backend.credential_url(argument), backend.sends_key


def make_llm(spec: str) -> LLM:
    scheme, arg = split_spec(spec)
    return LLMS.get(scheme)(arg)


def spec_options(text: str, known: dict[str, Callable[[str], Any]], scheme: str) -> dict[str, Any]:
    """A spec's `key=value&…` options, each converted by its `known` type; an unknown key or a bad value is an
    error that lists the known ones."""
    values: dict[str, Any] = {}
    for pair in filter(None, text.split("&")):
        key, _, value = pair.partition("=")
        if key not in known:
            raise ValueError(f"unknown {scheme} option {key!r}; known: {', '.join(known)}")
        try:
            values[key] = known[key](value)
        except ValueError:
            raise ValueError(f"{scheme} option {key} needs a number, got {value!r}") from None
    return values


def plain_prompt(messages: Sequence[Message]) -> str:
    """The layout for base models without a chat template: the turns, then "Answer:" (and the reply's prefill)."""
    turns, prefill = split_prefill(messages)
    return "\n\n".join(m["content"].strip() for m in turns) + "\nAnswer:" + (f" {prefill}" if prefill else "")


def split_prefill(messages: Sequence[Message]) -> tuple[list[Message], str]:
    """The conversation and the opening of the reply: a last message from the assistant is a *prefill*, the start
    of the reply that the model continues (as llama.cpp's and vLLM's servers take it); the completion's text is what
    the model wrote after it."""
    if messages and messages[-1]["role"] == "assistant":
        return list(messages[:-1]), messages[-1]["content"]
    return list(messages), ""


def plain_answer(choice: str) -> str:
    """How a base model writes `choice` after `plain_prompt`: a space before, a newline to end the answer."""
    return " " + choice + "\n"


CHOICE_METHODS = ("plain", "forms", "grammar")
"""How a back end answers a list of choices: `plain` scores each choice as listed followed by the end of the answer;
`forms` sums over the ways a model may write it (`surface_forms`), each ended by end-of-turn, a full stop or a line
break; `grammar` lets the model write one of those forms under a grammar. Plain scoring lies when the model would never
write the bare choice: asked "Play paper." a 1.5B model writes "Paper." while plain scoring picks "rock"."""


def surface_forms(choices: Sequence[str]) -> dict[str, str]:
    """Every way a model may write each choice, mapped back to it: as listed, Capitalised and UPPER case, each with
    and without a leading space. A form two choices share (choices "a" and "A" both give "A") belongs to the choice
    listed that way, or else to neither."""
    owners: dict[str, list[str]] = {}
    for choice in choices:
        for case in dict.fromkeys((choice, choice[:1].upper() + choice[1:], choice.upper())):
            for form in (case, " " + case):
                owners.setdefault(form, []).append(choice)
    forms = {}
    for form, claimants in owners.items():
        if len(claimants) == 1:
            forms[form] = claimants[0]
        elif form.lstrip(" ") in claimants:
            forms[form] = form.lstrip(" ")
    return forms


END_PIECES = (".", "!", "\n", "\n\n", ".\n", ".\n\n", "!\n", " \n", ". ", "! ")
"""Texts that end a written choice (besides end-of-turn): a full stop or exclamation mark, a line break."""


def choice_grammar(forms: Sequence[str]) -> str:
    """A GBNF grammar whose sentences are exactly the forms, optionally followed by "." or "!"."""
    if not forms:
        raise ValueError("a choice grammar needs at least one form")
    alternatives = " | ".join(json.dumps(form, ensure_ascii=False) for form in forms)
    return f"root ::= ({alternatives}) [.!]?\n"


def written_choice(text: str, forms: dict[str, str]) -> str | None:
    """The choice a text generated under `choice_grammar` names, or None."""
    return forms.get(re.sub(r"[.!]$", "", text))


def pick_choice(logprobs: dict[str, float], temperature: float, seed: int) -> str:
    """Argmax at temperature 0 (first listed wins ties), else a sample from softmax(logprob / T)."""
    names = list(logprobs)
    values = np.array([logprobs[n] for n in names])
    if temperature <= 0:
        return names[int(np.argmax(values))]
    weights = np.exp((values - values.max()) / temperature)
    return names[int(np.random.default_rng(seed).choice(len(names), p=weights / weights.sum()))]


def choice_completion(
    logprobs: dict[str, float], temperature: float, seed: int, prompt_tokens: int, started: float
) -> Completion:
    """The answer of a back end that scored every choice: the picked choice, with all the scores attached."""
    text = pick_choice(logprobs, temperature, seed)
    return Completion(text, prompt_tokens, 0, time.perf_counter() - started, choice_logprobs=logprobs)
