"""Any OpenAI-compatible chat server (vLLM, Ollama, llama.cpp server, OpenAI): `openai:<base-url>#<model>[?options]`.

Choices are requested as structured output: a JSON schema whose one field is an enum of the choices. Servers spell
that request differently (OpenAI and vLLM: `json_schema`; llama.cpp's Python server: `json_object` with a `schema`),
so the client tries each form once and remembers the first one the server accepts; a reply that is still not one of
the choices is returned as text and parsed by the agent like any free-text answer.

Transport: one pooled `httpx2.Client` per back end (connections are reused; one client serves many threads).
httpx2 (httpx's successor by the same author; the `openai` SDK itself builds on it) rather than the SDK: we need
one endpoint, our own structured-output fallback and retry policy, and none of the SDK's typed models.
Retry policy (`RetryPolicy`): timeouts, dropped or refused connections, 408, 429 and 5xx are retried up to
`max_retries` times after a full-jitter exponential backoff, or after the server's Retry-After (capped); any other
4xx fails at once with the server's answer in the message.
Options in the spec, e.g. `openai:http://127.0.0.1:8000/v1#qwen?timeout_s=30&max_retries=8`; `side_by_side=N`
declares that the server answers N requests at once each exactly as alone, so that runs keep N independent episodes
in flight by themselves (as `--concurrency N` asks for one run).
"""

from __future__ import annotations

import email.utils
import json
import os
import random
import re
import threading
import time
from dataclasses import dataclass, fields
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit

import httpx2

from ttlearn.llm.base import (
    LLM,
    ContextOverflow,
    LLMError,
    Message,
    spec_options,
    split_prefill,
)
from ttlearn.types import Completion

CHOICE_FORMATS: tuple[Callable[[dict[str, Any]], dict[str, Any]] | None, ...] = (
    lambda schema: {"type": "json_schema", "json_schema": {"name": "action", "schema": schema}},
    lambda schema: {"type": "json_object", "schema": schema},
    None,  # plain text: the agent parses it
)
RETRY_STATUSES = frozenset({408, 429})
"""Besides every 5xx: the statuses that mean "not now" rather than "not this request"."""


class RequestRefused(LLMError):
    """The server refused this request (a 4xx other than 408/429, or a structured-output spelling it cannot parse):
    sending it again will not help."""

    def __init__(self, message: str, status: int, body: str) -> None:
        super().__init__(message)
        self.status, self.body = status, body


class ServerUnavailable(LLMError):
    """No usable answer after every retry (server down, overloaded or timing out); the run can be resumed later."""


@dataclass(frozen=True)
class RetryPolicy:
    """How long one request waits and how often it is tried again."""

    timeout_s: float = 120.0
    max_retries: int = 5
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 30.0
    """Also the most a Retry-After header can make us wait."""

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.max_retries < 0 or self.backoff_base_s < 0 or self.backoff_cap_s < 0:
            raise ValueError(
                f"retry policy needs timeout_s > 0 and max_retries, backoff_base_s, backoff_cap_s ≥ 0; got {self}"
            )


def is_transient(status: int, body: str, asked_format: bool) -> bool:
    """Whether an error status is worth retrying: 408, 429 and 5xx, except a refused structured-output spelling
    (llama.cpp's Python server answers an unknown `response_format` with 500; it will not parse it next time)."""
    if asked_format and "response_format" in body:
        return False
    return status in RETRY_STATUSES or status >= 500


OVERFLOW = re.compile(r"context[ _]length|context size|context window|too many tokens", re.IGNORECASE)


def is_context_overflow(status: int, body: str) -> bool:
    """Whether a refusal says the prompt is longer than the model's context (vLLM: "maximum context length is 4096
    tokens", OpenAI: "context_length_exceeded", llama.cpp's server: "exceeds the available context size")."""
    return 400 <= status < 500 and OVERFLOW.search(body) is not None


def backoff_delay(attempt: int, base_s: float, cap_s: float, uniform: float) -> float:
    """Full-jitter backoff before retry number `attempt` (0 = first retry): uniform · min(cap, base · 2^attempt).

    `uniform` is a draw from [0, 1); spreading retries over the whole window keeps N clients that failed together
    from retrying together.
    """
    return uniform * min(cap_s, base_s * 2.0**attempt)


def retry_after_s(header: str | None, now: float) -> float | None:
    """Seconds a Retry-After header asks for (delta-seconds or an HTTP date, never negative); None if absent/invalid."""
    if not header:
        return None
    try:
        return max(0.0, float(header))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now) if when.tzinfo is not None else None


def retry_wait_s(attempt: int, policy: RetryPolicy, retry_after: float | None, uniform: float) -> float:
    """The wait before retry `attempt`: the server's Retry-After (capped at the backoff cap) if it sent one,
    else the full-jitter backoff."""
    if retry_after is not None:
        return min(retry_after, policy.backoff_cap_s)
    return backoff_delay(attempt, policy.backoff_base_s, policy.backoff_cap_s, uniform)


OPENAI_KEY_ENV = "OPENAI_API_KEY"
"""Where an `openai:` back end reads its key (never from a config: a run directory may come from anyone)."""


class OpenAIChat(LLM):
    supports_choices = True
    sends_key = OPENAI_KEY_ENV

    @classmethod
    def credential_url(cls, argument: str) -> str:
        return argument.partition("#")[0].rstrip("/")

    @classmethod
    def from_spec(cls, argument: str) -> OpenAIChat:
        """The back end of `openai:<base-url>#<model>[?options]` (the `LLMS` table's factory)."""
        base_url, sep, rest = argument.partition("#")
        model, _, options = rest.partition("?")
        if not sep or not model:
            raise ValueError(
                "openai spec is openai:<base-url>#<model>[?options], e.g. openai:http://127.0.0.1:8000/v1#qwen "
                "or openai:http://127.0.0.1:8000/v1#qwen?timeout_s=30&max_retries=8&side_by_side=4"
            )
        policy, side_by_side = parse_options(options)
        return cls(base_url, model, policy=policy, side_by_side=side_by_side)

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        policy: RetryPolicy | None = None,
        side_by_side: int = 1,
    ) -> None:
        if "@" in urlsplit(base_url).netloc:  # httpx would send it as Basic auth in place of the Bearer key
            raise ValueError(
                "the openai back end's URL holds a user part (user:password@), which would be sent instead of the key "
                f"and recorded with the run: drop it and set {OPENAI_KEY_ENV}"
            )
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"openai back end needs an http(s) base URL, got {base_url!r}")
        if side_by_side < 1:
            raise ValueError(f"openai option side_by_side must be at least 1, got {side_by_side}")
        self.side_by_side = side_by_side
        """Declared by the user (`?side_by_side=N`), since only they know whether the server answers N requests at
        once, each exactly as alone (vLLM with `VLLM_BATCH_INVARIANT=1`; llama-cpp-python's server with `--n_batch 1
        --n_ubatch 1`). 1 by default: a server's batching and prefix reuse may change the last bits of a logit."""
        self.base_url, self.model = base_url.rstrip("/"), model
        self.policy = policy or RetryPolicy()
        api_key = api_key if api_key is not None else os.environ.get(OPENAI_KEY_ENV, "")
        self._client = httpx2.Client(
            timeout=self.policy.timeout_s,
            headers={"Authorization": f"Bearer {api_key or 'none'}"},
            limits=httpx2.Limits(max_connections=None, max_keepalive_connections=64),
        )
        self._format = 0  # index into CHOICE_FORMATS of the spelling to try first
        self._format_lock = threading.Lock()
        self._jitter = random.Random()
        self.spec = f"openai:{self.base_url}#{model}"

    def close(self) -> None:
        self._client.close()

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        """POST to /chat/completions under the retry policy; the decoded JSON answer."""
        url = f"{self.base_url}/chat/completions"
        tries = self.policy.max_retries + 1
        for attempt in range(tries):
            retry_after = None
            try:
                response = self._client.post(url, json=payload)
            except httpx2.TransportError as exc:  # timeouts, refused or dropped connections, broken replies
                failure = f"{type(exc).__name__}: {exc}"
            else:
                if response.is_success:
                    try:
                        return response.json()
                    except ValueError:
                        failure = f"{response.status_code} with a body that is not JSON: {response.text[:200]!r}"
                elif is_transient(response.status_code, response.text, "response_format" in payload):
                    failure = f"{response.status_code}: {response.text[:200]}"
                    retry_after = retry_after_s(response.headers.get("retry-after"), time.time())
                else:
                    body = response.text[:300]
                    if is_context_overflow(response.status_code, response.text):
                        raise ContextOverflow(f"{self.base_url} refused the prompt as too long: {body}")
                    raise RequestRefused(
                        f"{self.base_url} refused the request ({response.status_code}): {body}",
                        response.status_code,
                        body,
                    )
            if attempt + 1 < tries:
                time.sleep(retry_wait_s(attempt, self.policy, retry_after, self._jitter.random()))
        raise ServerUnavailable(
            f"no answer from {self.base_url} after {tries} tries (last: {failure}); is the server up? "
            "Finished games are kept in the run directory: fix the server and resume the run."
        )

    def _post_with_choices(self, payload: dict[str, Any], choices: Sequence[str]) -> dict[str, Any]:
        schema = {"type": "object", "properties": {"action": {"enum": list(choices)}}, "required": ["action"]}
        payload["max_tokens"] = max(payload["max_tokens"], 32)
        while True:
            tried = self._format
            spell = CHOICE_FORMATS[tried]
            if spell is None:  # no structured output at all: free text for the agent's parser
                return self._post(payload)
            try:
                return self._post({**payload, "response_format": spell(schema)})
            except RequestRefused as exc:
                if "response_format" not in exc.body and "json" not in exc.body:
                    raise
                with self._format_lock:  # threads refused together move on one spelling, not one each
                    if self._format == tried:
                        self._format = tried + 1

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
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "max_tokens": max_tokens,
            "temperature": temperature,
            "seed": seed,
        }
        if stop:
            payload["stop"] = list(stop)
        if split_prefill(messages)[1]:  # continue the last (assistant) message: vLLM needs to be told, llama.cpp knows
            payload |= {"continue_final_message": True, "add_generation_prompt": False}
        start = time.perf_counter()
        data = self._post_with_choices(payload, choices) if choices else self._post(payload)
        latency = time.perf_counter() - start
        try:
            text = data["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMError(f"{self.base_url} sent no completion: {str(data)[:300]}") from exc
        if choices:
            try:
                text = json.loads(text)["action"]
            except (json.JSONDecodeError, KeyError, TypeError):
                pass  # left as free text for the agent's parser
        usage = data.get("usage") or {}
        return Completion(
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            latency_s=latency,
        )


def parse_options(options: str) -> tuple[RetryPolicy, int]:
    """The `RetryPolicy` and the calls side by side from a spec's `key=value&...` options, e.g.
    `timeout_s=30&max_retries=8&side_by_side=4`."""
    known: dict[str, Callable[[str], Any]] = {f.name: float for f in fields(RetryPolicy)}
    values = spec_options(options, {**known, "max_retries": int, "side_by_side": int}, "openai")
    side_by_side = values.pop("side_by_side", 1)
    return RetryPolicy(**values), side_by_side
