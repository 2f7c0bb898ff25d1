"""What one client may hold of the memory service's connections: how many at once, for how long per request, and for
how long an answer it does not read.

uvicorn's HTTP/1.1 protocol (h11) waits for a request head without a deadline, and for a client to take its answer
without one either: a client that opens connections and sends a few bytes now and then (slow loris), or that
pipelines requests and never reads the answers (its answers pile up unsent, and `transport.close()` waits for them
for ever), keeps each connection, and enough of them exhaust the process's file descriptors so that nobody else is
answered. `guarded_h11` adds these rules to uvicorn's own protocol class:

- a request must arrive whole (head and body) within `read_timeout_s` of the connection opening or of the previous
  answer on it, else the connection is closed; the time the service takes to answer is not counted;
- an answer the client does not take (bytes left unsent because it does not read) must be taken within
  `write_timeout_s`, else the connection is dropped with what it holds;
- a connection reads ahead at most `max_pipelined` requests whose answers were not yet asked for by the client
  (requests already waiting when the previous answer was done); past it the connection is closed after the answers
  it has. The next of them is not even started while the client leaves part of the previous answer unread: a
  connection holds at most one answer it cannot send, never one more waiting behind it;
- the bytes left unsent over every connection together stay within `max_unsent`: an answer that would take the
  total past it drops its own connection at once (the budget is not taken from the clients that hold it), so the
  memory that clients who do not read can pin is bounded however many connections they open;
- the server holds at most `max_open` connections (by default what its descriptor limit leaves free, less a reserve
  and one batch of accepts: `descriptor_budget`); a new connection past it drops the longest-waiting one, or when
  none waits the oldest one. Running out of descriptors must not happen: asyncio then retries the failed accept in a
  tight loop, logging each failure, and answers nobody. It accepts up to its listen backlog in one go before any
  connection is seen here, so the server listens with a short backlog (`ACCEPT_BATCH`; past it the kernel makes new
  clients retry their connection);
- one client address holds at most `per_client` connections; the next ones are closed as soon as they are accepted,
  before any other connection is dropped to make room;
- the whole server keeps at most `max_waiting` connections waiting — for a request, or for the client to take an
  answer (over every address: an attacker with many addresses is not held by the per-address cap); a new connection
  past it drops the one that has waited longest, so a newcomer is always read and the descriptors in use stay
  bounded.

A connection closed with unsent bytes is aborted (closing it would wait for a client that does not read). Behind a
reverse proxy every client shares the proxy's address: raise `per_client` there, and let the proxy bound its own
clients.
"""

from __future__ import annotations

import asyncio
import os
import resource
from collections import Counter
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ttlearn.serve import (
    DEFAULT_CONNECTIONS_PER_CLIENT,
    DEFAULT_MAX_PIPELINED,
    DEFAULT_MAX_UNSENT,
    DEFAULT_MAX_WAITING,
    DEFAULT_READ_TIMEOUT_S,
    DEFAULT_WRITE_TIMEOUT_S,
)

_WAITING = (h11.IDLE, h11.SEND_BODY)
"""The client's h11 states while the service still waits for (part of) its request."""


DESCRIPTOR_RESERVE = 32
"""Descriptors kept free for everything but connections: the store's files, a module imported late, the log."""
ACCEPT_BATCH = 16
"""The listen backlog: also how many connections asyncio accepts at once before the protocol sees any of them."""


def descriptor_budget(reserve: int = DESCRIPTOR_RESERVE + ACCEPT_BATCH) -> int:
    """The connections this process can hold: its descriptor limit, less those open now and `reserve`."""
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit == resource.RLIM_INFINITY:
        return 0
    in_use = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 16
    return max(1, limit - in_use - reserve)


class _GuardedH11(H11Protocol):
    read_timeout_s: float
    write_timeout_s: float
    max_pipelined: int
    max_open: int
    per_client: int
    max_waiting: int
    max_unsent: int
    open_by_address: Counter[str]
    opened: dict[_GuardedH11, None]
    """The open connections, oldest first."""
    waiting: dict[_GuardedH11, None]
    """The connections waiting for a request or for their client to read, oldest first (a dict keeps insertion
    order)."""

    _address: str | None = None
    _deadline: asyncio.TimerHandle | None = None
    _stuck = False
    """Whether the client leaves part of an answer unsent (the transport paused writing): then the deadline is the
    write timeout's."""
    _read_ahead = 0
    """Answers in a row finished while the client's next request was already waiting (pipelined)."""
    _next_held = False
    """Whether an answer finished while its client left part of it unread: the next request waits until it is taken."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        transport.set_write_buffer_limits(high=0)  # a byte left unsent pauses writing: that is a stuck answer
        address = self.client[0] if self.client else None
        if address is not None and self.per_client > 0:
            if self.open_by_address[address] >= self.per_client:
                transport.abort()  # refused before anyone else's connection is dropped to make room for it
                return
            self.open_by_address[address] += 1
            self._address = address
        if self.max_open > 0 and len(self.opened) >= self.max_open:
            next(iter(self.waiting or self.opened))._drop()
        self.opened[self] = None
        if self.max_waiting > 0 and len(self.waiting) >= self.max_waiting:
            next(iter(self.waiting))._drop()
        self._arm(self.read_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.opened.pop(self, None)
        if self._address is not None:
            self.open_by_address[self._address] -= 1
            if not self.open_by_address[self._address]:
                del self.open_by_address[self._address]
            self._address = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._stuck and self.conn.their_state not in _WAITING:
            self._disarm()  # the request is in: the time to answer it is not the client's

    def on_response_complete(self) -> None:
        pipelined = bool(self.conn.trailing_data[0])
        self._read_ahead = self._read_ahead + 1 if pipelined else 0
        if self.max_pipelined > 0 and self._read_ahead > self.max_pipelined:
            self.transport.close()  # what was answered is still sent; uvicorn then reads no further request
        if self._stuck and not self.transport.is_closing():
            self._next_held = True  # resume_writing starts the next request once this answer is taken
            return
        self._next_request()

    def _next_request(self) -> None:
        super().on_response_complete()
        if not self._stuck and not self.transport.is_closing() and self.conn.their_state in _WAITING:
            self._arm(self.read_timeout_s)  # the next request on this connection gets its own deadline

    def pause_writing(self) -> None:
        super().pause_writing()
        self._stuck = True
        if self.max_unsent > 0 and self._unsent() > self.max_unsent:
            self._drop()  # this answer's bytes go with it, before uvicorn writes more of it
            return
        self._arm(self.write_timeout_s)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._stuck = False
        self._disarm()
        if self._next_held:
            self._next_held = False
            self._next_request()
        elif not self.transport.is_closing() and self.conn.their_state in _WAITING and self.conn.our_state is h11.IDLE:
            self._arm(self.read_timeout_s)

    def _unsent(self) -> int:
        """Bytes left unsent over every connection, this one's included (only a stuck connection holds any, and
        each stuck one is waiting)."""
        stuck = {self: None, **self.waiting}
        return sum(c.transport.get_write_buffer_size() for c in stuck if c._stuck and not c.transport.is_closing())

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expire)
        self.waiting[self] = None

    def _disarm(self) -> None:
        self.waiting.pop(self, None)
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        self.waiting.pop(self, None)
        if self._stuck or self.conn.their_state in _WAITING:
            self._drop()

    def _drop(self) -> None:
        """Close the connection now: aborted when an answer is left unsent (a close would wait for the client) or
        an answer is being made (the client is dropped for a newcomer)."""
        self._disarm()
        self.opened.pop(self, None)
        if self.transport.get_write_buffer_size() > 0 or self.conn.their_state not in _WAITING:
            self.transport.abort()
        elif not self.transport.is_closing():
            self.transport.close()


def guarded_h11(
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    per_client: int = DEFAULT_CONNECTIONS_PER_CLIENT,
    max_waiting: int = DEFAULT_MAX_WAITING,
    write_timeout_s: float = DEFAULT_WRITE_TIMEOUT_S,
    max_pipelined: int = DEFAULT_MAX_PIPELINED,
    max_unsent: int = DEFAULT_MAX_UNSENT,
    max_open: int | None = None,
) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the rules above, as a class to pass as `uvicorn.Config(http=...)` (one per server:
    it counts that server's connections); the defaults are `ttlearn serve`'s. `per_client` 0 lifts the per-address
    cap, `max_waiting` 0 the server-wide one, `max_pipelined` 0 the read-ahead one, `max_unsent` 0 the byte budget,
    `max_open` 0 the cap on open connections (None: `descriptor_budget`, measured now)."""
    for name, seconds in (("read", read_timeout_s), ("write", write_timeout_s)):
        if seconds <= 0:
            raise ValueError(f"the {name} timeout must be positive, got {seconds}")
    max_open = descriptor_budget() if max_open is None else max_open
    for what, count in (("connections per client", per_client), ("waiting connections", max_waiting),
                        ("pipelined requests", max_pipelined), ("unsent bytes", max_unsent),
                        ("open connections", max_open)):  # fmt: skip
        if count < 0:
            raise ValueError(f"{what} must be 0 (no cap) or more, got {count}")
    attributes: dict[str, Any] = {
        "read_timeout_s": read_timeout_s,
        "write_timeout_s": write_timeout_s,
        "max_pipelined": max_pipelined,
        "max_open": max_open,
        "per_client": per_client,
        "max_waiting": max_waiting,
        "max_unsent": max_unsent,
        "open_by_address": Counter(),
        "opened": {},
        "waiting": {},
    }
    return type("GuardedH11Protocol", (_GuardedH11,), attributes)
