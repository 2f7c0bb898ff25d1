"""Any OpenAI-compatible chat server (vLLM, Ollama, llama.cpp server, OpenAI): `openai:<base-url>#<model>`.

Choices are requested as structured output: a JSON schema whose one field is an enum of the choices. Servers spell
that request differently (OpenAI and vLLM: `json_schema`; llama.cpp's Python server: `json_object` with a `schema`),
so the client tries each form once and remembers the first one the server accepts; a reply that is still not one of
the choices is returned as text and parsed by the agent like any free-text answer.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from typing import Any, Sequence

from ttlearn.llm.base import LLM, LLMS, LLMError, Message
from ttlearn.types import Completion

CHOICE_FORMATS = (
    lambda schema: {"type": "json_schema", "json_schema": {"name": "action", "schema": schema}},
    lambda schema: {"type": "json_object", "schema": schema},
    None,  # plain text: the agent parses it
)


class OpenAIChat(LLM):
    supports_choices = True

    def __init__(
        self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 120.0, retries: int = 2
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"openai back end needs an http(s) base URL, got {base_url!r}")
        self.base_url, self.model = base_url.rstrip("/"), model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.timeout_s, self.retries = timeout_s, retries
        self._formats = list(CHOICE_FORMATS)
        self.spec = f"openai:{self.base_url}#{model}"

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.base_url}/chat/completions",
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key or 'none'}"},
        )
        error: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:  # the server answered: retrying will not help
                body = exc.read().decode(errors="replace")[:300]
                raise LLMError(f"{self.base_url} refused the request ({exc.code}): {body}") from exc
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                error = exc
                time.sleep(0.5 * 2**attempt)
        raise LLMError(f"no answer from {self.base_url} after {self.retries + 1} tries ({error}); is the server up?")

    def _post_with_choices(self, payload: dict[str, Any], choices: Sequence[str]) -> dict[str, Any]:
        schema = {"type": "object", "properties": {"action": {"enum": list(choices)}}, "required": ["action"]}
        payload["max_tokens"] = max(payload["max_tokens"], 32)
        while len(self._formats) > 1:
            try:
                return self._post({**payload, "response_format": self._formats[0](schema)})
            except LLMError as exc:
                if "response_format" not in str(exc) and "json" not in str(exc):
                    raise
                self._formats.pop(0)  # this server spells structured output another way
        return self._post(payload)  # no structured output at all: free text for the agent's parser

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


@LLMS.register("openai")
def _openai(arg: str) -> OpenAIChat:
    base_url, sep, model = arg.partition("#")
    if not sep or not model:
        raise ValueError("openai spec is openai:<base-url>#<model>, e.g. openai:http://127.0.0.1:8000/v1#qwen")
    return OpenAIChat(base_url, model)
