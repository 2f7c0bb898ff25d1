"""Record every LLM call into the run, and replay recorded calls without the model.

A call's key hashes everything that determines its answer (model, messages, sampling settings, seed, choices), so a
rerun of the same config and seed asks exactly the same questions in the same order and gets the recorded answers.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict, deque
from dataclasses import asdict
from typing import Any, Callable, Iterable, Sequence

from ttlearn.llm.base import LLM, ContextOverflow, LLMError, Message
from ttlearn.types import Completion

Sink = Callable[[dict[str, Any]], None]


def call_key(spec: str, messages: Sequence[Message], params: dict[str, Any]) -> str:
    blob = json.dumps({"spec": spec, "messages": list(messages), **params}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


class ReplayBook:
    """Recorded answers by call key, served first-in first-out (a key may legitimately repeat)."""

    def __init__(self, calls: Iterable[dict[str, Any]]) -> None:
        self._answers: dict[str, deque[dict[str, Any]]] = defaultdict(deque)
        for call in calls:
            self._answers[call["key"]].append({**call["completion"], "error": call.get("error")})

    def pop(self, key: str) -> Completion:
        """The recorded answer; raises `ContextOverflow` again where the recorded call overflowed."""
        queue = self._answers.get(key)
        if not queue:
            raise LLMError(
                f"replay miss for call {key}: the run asked a question the recording never saw "
                "(config, seed or code changed since it was recorded)"
            )
        answer = queue.popleft()
        error = answer.pop("error")
        if error:
            raise ContextOverflow(error, answer["prompt_tokens"])
        return Completion(**{**answer, "cached": True})


class RecordingLLM(LLM):
    """Wraps a back end (or a `ReplayBook`) and sends one record per call to `sink`, tagged with `role`."""

    def __init__(self, inner: LLM | None, role: str, sink: Sink, spec: str, replay: ReplayBook | None = None):
        if inner is None and replay is None:
            raise ValueError("RecordingLLM needs a back end or a replay book")
        self.inner, self.role, self.sink, self.replay = inner, role, sink, replay
        self.spec = spec
        self.supports_choices = inner.supports_choices if inner is not None else True

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
        params = {
            "max_tokens": max_tokens,
            "temperature": temperature,
            "seed": seed,
            "stop": list(stop),
            "choices": list(choices) if choices is not None else None,
        }
        key = call_key(self.spec, messages, params)
        start = time.perf_counter()
        error: ContextOverflow | None = None
        try:
            if self.replay is not None:
                completion = self.replay.pop(key)
            else:
                assert self.inner is not None
                completion = self.inner.complete(messages, **{**params, "stop": stop, "choices": choices})
        except ContextOverflow as exc:  # recorded, so a replay raises it at the same call
            error, completion = exc, Completion("", exc.prompt_tokens, cached=self.replay is not None)
        record = {
            "type": "call",
            "role": self.role,
            "key": key,
            "messages": list(messages),
            "params": params,
            "completion": {k: v for k, v in asdict(completion).items() if k != "cached"},
            "wall_s": time.perf_counter() - start,
            "cached": completion.cached,
        }
        self.sink({**record, "error": str(error)} if error else record)
        if error:
            raise error
        return completion

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
