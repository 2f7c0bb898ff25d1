"""What one caller may cost the memory service: requests per second per key, failed authentications per second per
address, and bytes per request body."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from fastapi import HTTPException

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[Message], Any]


def take_token(tokens: float, elapsed_s: float, rate: float, burst: float) -> tuple[float, float]:
    """A token bucket: refill at `rate` tokens per second up to `burst`, then take one token.

    tokens′ = min(burst, tokens + rate·elapsed). With tokens′ ≥ 1 the request passes: returns (tokens′ − 1, 0).
    Otherwise it is refused: returns (tokens′, (1 − tokens′) / rate), the seconds until a token is there.
    """
    tokens = min(burst, tokens + rate * elapsed_s)
    if tokens >= 1.0:
        return tokens - 1.0, 0.0
    return tokens, (1.0 - tokens) / rate


class RateLimiter:
    """One token bucket per key, starting full; `rate` ≤ 0 turns limiting off.

    Past `max_keys` buckets (callers' addresses are many), the buckets that have refilled are forgotten: a full
    bucket and no bucket mean the same.
    """

    def __init__(
        self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic, max_keys: int = 100_000
    ) -> None:
        if rate > 0 and burst < 1:
            raise ValueError(f"a rate limit needs a burst of at least 1 request, got {burst}")
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def wait_s(self, key_id: str, *, take: bool = True) -> float:
        """Take a token for `key_id` (only look when not `take`): 0 when the request may pass, else the seconds to
        wait before retrying."""
        if self.rate <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            tokens, last = self._buckets.get(key_id, (self.burst, now))
            tokens, wait = take_token(tokens, now - last, self.rate, self.burst)
            if take:
                self._buckets[key_id] = (tokens, now)
                if len(self._buckets) > self.max_keys:
                    self._forget_full(now)
        return wait

    def _forget_full(self, now: float) -> None:
        self._buckets = {
            key: (tokens, last)
            for key, (tokens, last) in self._buckets.items()
            if tokens + self.rate * (now - last) < self.burst
        }


class BodyLimit:
    """ASGI middleware: refuse a request body over `max_bytes` with 413 without ever holding it whole.

    A declared Content-Length over the limit is refused before a byte of the body is read. A body without one
    (chunked) is counted as it streams in, and the request fails with 413 at the first chunk past the limit,
    before any handler runs, so nothing is written.
    """

    def __init__(self, app: Callable[..., Any], max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"the body limit must be at least 1 byte, got {max_bytes}")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise HTTPException(413, self._detail())
            return message

        await self.app(scope, counted, send)

    def _detail(self) -> str:
        return f"the request body is over the limit of {self.max_bytes} bytes (see ttlearn serve --max-body)"

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"detail": self._detail()}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
