"""What one caller may cost the memory service: requests per second per key, failed authentications per second per
address, bytes per request body, lines in the service's own error log, and the memory its freed answers keep."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from fastapi import HTTPException

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[Message], Any]


M_MMAP_THRESHOLD = -3
"""glibc's `mallopt` parameter: blocks of at least this many bytes get a mapping of their own."""
LARGE_BLOCK = 128 * 1024
"""glibc's own starting value of that threshold."""


def release_large_blocks(threshold: int = LARGE_BLOCK) -> bool:
    """Make glibc's malloc keep every block of `threshold` bytes or more in a mapping of its own, returned to the
    system as soon as it is freed. glibc raises the threshold to the largest such block freed so far (up to 32 MB):
    past that, megabyte answers (exports, forwarded bodies) are carved from the heap of whichever thread built them
    and stay resident once freed, so peak memory grew with the threads that ever built one (up to 8 heaps a core),
    not with the bytes alive at once. False where malloc is not glibc's (nothing changes)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.mallopt(M_MMAP_THRESHOLD, threshold) == 1
    except (OSError, AttributeError):
        return False


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


class LogRateLimit(logging.Filter):
    """A logging filter: at most `burst` records of one kind (logger, level and first line of the message) per
    `window_s`; the rest are dropped and counted, and the first one let through after them says how many. A server
    out of descriptors logs each failed accept with its traceback, thousands a second: an attacker who can cause an
    error must not be able to fill the disk with it."""

    def __init__(self, burst: int = 5, window_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        if burst < 1 or window_s <= 0:
            raise ValueError(
                f"a log rate limit needs a burst of at least 1 and a positive window, got {burst}, {window_s}"
            )
        self.burst, self.window_s, self._clock = burst, window_s, clock
        self._kinds: dict[tuple[str, int, str], list[float]] = {}  # kind → [window start, let through, dropped]
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        kind = (record.name, record.levelno, str(record.msg).split("\n", 1)[0][:200])
        with self._lock:
            now = self._clock()
            window = self._kinds.get(kind)
            if window is None or now - window[0] >= self.window_s:
                dropped = int(window[2]) if window else 0
                if len(self._kinds) > 10_000:  # message kinds an attacker can vary: forget the old windows
                    self._kinds = {k: w for k, w in self._kinds.items() if now - w[0] < self.window_s}
                self._kinds[kind] = [now, 1.0, 0.0]
            elif window[1] < self.burst:
                window[1] += 1
                dropped = 0
            else:
                window[2] += 1
                return False
        if dropped:
            record.msg = f"{record.msg}\n({dropped} more like it in the last {self.window_s:g} s were not logged)"
        return True
