"""What one client may hold of the memory service's connections: how many at once, and for how long per request.

uvicorn's HTTP/1.1 protocol (h11) waits for a request head without a deadline: a client that opens connections
and sends a few bytes now and then (slow loris) keeps each one, and enough of them exhaust the process's file
descriptors so that nobody else is answered. `guarded_h11` adds two rules to uvicorn's own protocol class:

- a request must arrive whole (head and body) within `read_timeout_s` of the connection opening or of the previous
  answer on it, else the connection is closed; the time the service takes to answer is not counted;
- one client address holds at most `per_client` connections; the next ones are closed as soon as they are accepted;
- the whole server keeps at most `max_waiting` connections waiting for a request (half-open ones, over every
  address: an attacker with many addresses is not held by the per-address cap); a new connection past it closes the
  one that has waited longest, so a newcomer is always read and the descriptors in use stay bounded.

Behind a reverse proxy every client shares the proxy's address: raise `per_client` there, and let the proxy bound
its own clients.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

_WAITING = (h11.IDLE, h11.SEND_BODY)
"""The client's h11 states while the service still waits for (part of) its request."""


class _GuardedH11(H11Protocol):
    read_timeout_s: float
    per_client: int
    max_waiting: int
    open_by_address: Counter[str]
    waiting: dict[_GuardedH11, None]
    """The connections waiting for a request, oldest first (a dict keeps insertion order)."""

    _address: str | None = None
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = self.client[0] if self.client else None
        if address is not None and self.per_client > 0:
            if self.open_by_address[address] >= self.per_client:
                transport.abort()
                return
            self.open_by_address[address] += 1
            self._address = address
        if self.max_waiting > 0 and len(self.waiting) >= self.max_waiting:
            oldest = next(iter(self.waiting))
            oldest._disarm()
            oldest.transport.close()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._address is not None:
            self.open_by_address[self._address] -= 1
            if not self.open_by_address[self._address]:
                del self.open_by_address[self._address]
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state not in _WAITING:
            self._disarm()  # the request is in: the time to answer it is not the client's

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state in _WAITING:
            self._arm()  # the next request on this connection gets its own deadline

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.read_timeout_s, self._expire)
        self.waiting[self] = None

    def _disarm(self) -> None:
        self.waiting.pop(self, None)
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        self.waiting.pop(self, None)
        if self.conn.their_state in _WAITING and not self.transport.is_closing():
            self.transport.close()


def guarded_h11(read_timeout_s: float, per_client: int, max_waiting: int = 0) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the three rules above, as a class to pass as `uvicorn.Config(http=...)` (one per
    server: it counts that server's connections); `per_client` 0 lifts the per-address cap, `max_waiting` 0 the
    server-wide one."""
    if read_timeout_s <= 0:
        raise ValueError(f"the read timeout must be positive, got {read_timeout_s}")
    if per_client < 0:
        raise ValueError(f"connections per client must be 0 (no cap) or more, got {per_client}")
    if max_waiting < 0:
        raise ValueError(f"waiting connections must be 0 (no cap) or more, got {max_waiting}")
    attributes: dict[str, Any] = {
        "read_timeout_s": read_timeout_s,
        "per_client": per_client,
        "max_waiting": max_waiting,
        "open_by_address": Counter(),
        "waiting": {},
    }
    return type("GuardedH11Protocol", (_GuardedH11,), attributes)
