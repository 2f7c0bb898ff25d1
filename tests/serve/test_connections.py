"""The connection guards of `serve/connections.py` on a real uvicorn server in this process, on loopback: a tiny ASGI
app whose answers are as large as a test needs, and the guards' own accounting read where it is kept."""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

pytest.importorskip("fastapi")
import httpx2  # noqa: E402
import uvicorn  # noqa: E402
from sockets import closed_by_server, pipelining_reader, slow_connection  # noqa: E402

from ttlearn.serve import DEFAULT_CONNECTIONS_PER_CLIENT, DEFAULT_MAX_UNSENT, DEFAULT_MAX_WAITING  # noqa: E402
from ttlearn.serve.connections import ACCEPT_BATCH, guarded_h11  # noqa: E402

ANSWER_BYTES = 1_000_000
BIG = b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n"
made: Counter[str] = Counter()
"""Answers the app made, by path."""


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    body = b"x" * ANSWER_BYTES if scope["path"] == "/big" else b"ok"
    made[scope["path"]] += 1
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


@contextmanager
def serving(http: type) -> Iterator[int]:
    """uvicorn with protocol `http` on a loopback port, in a thread; yields the port. The listening socket's small
    send buffer (inherited by each connection) keeps the kernel from taking more than a few kB of an answer."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    listener.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app, http=http, lifespan="off", backlog=ACCEPT_BATCH, log_level="warning", timeout_graceful_shutdown=5
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield listener.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        listener.close()


def unsent(http: Any) -> int:
    """Bytes of answers the server holds unsent, over every open connection."""
    return sum(connection.transport.get_write_buffer_size() for connection in list(http.opened))


def test_unsent_answers_stay_within_one_budget_however_many_clients_do_not_read() -> None:
    """40 connections each pipeline 4 requests for a 1 MB answer and never read (issue 48: 250 such clients took
    `ttlearn serve` from 0.4 to 5.4 GB). Before, each held its answer unsent and had the next one made and waiting
    behind it: 80 answers, memory growing with the connections. Now the next answer is not made while the previous
    one is unread, the unsent bytes of every connection together stay within the budget (an answer past it drops
    its own connection), and health checks are answered throughout."""
    budget = 4 * ANSWER_BYTES
    http = guarded_h11(10.0, per_client=0, max_unsent=budget)
    made.clear()
    readers: list[socket.socket | None] = []
    with serving(http) as port:
        try:
            readers = [pipelining_reader(port, "127.0.0.2", 4, BIG) for _ in range(40)]
            deadline = time.monotonic() + 10
            while made["/big"] < 40 and time.monotonic() < deadline:
                time.sleep(0.05)
            for _ in range(3):
                start = time.monotonic()
                assert httpx2.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
                assert time.monotonic() - start < 1.0
            time.sleep(0.3)  # time for answers that should not be made
            assert made["/big"] == 40
            held = unsent(http)
            assert ANSWER_BYTES < held <= budget, held  # the budget is used, never exceeded
            kept = sum(not closed_by_server(sock) for sock in readers if sock is not None)
            assert 1 < kept <= 4 + 1  # the dropped ones freed their bytes at once
        finally:
            for sock in readers:
                if sock is not None:
                    sock.close()


def test_an_address_over_its_cap_is_refused_before_anyone_else_is_dropped() -> None:
    """A full server (3 connections) and an address at its cap of 2: its next connection used to drop the
    longest-waiting one — another client's — to make room, then be refused anyway. Now it is refused first."""
    http = guarded_h11(per_client=2, max_open=3, read_timeout_s=30)
    with serving(http) as port:
        other = slow_connection(port, "127.0.0.3")
        time.sleep(0.1)  # the other client's connection is the longest waiting
        mine = [slow_connection(port, "127.0.0.2") for _ in range(2)]
        time.sleep(0.1)
        over = slow_connection(port, "127.0.0.2")
        deadline = time.monotonic() + 5
        while not closed_by_server(over) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        try:
            assert closed_by_server(over)
            assert not closed_by_server(other) and not any(map(closed_by_server, mine))
        finally:
            for sock in (other, *mine, over):
                sock.close()


def test_the_guards_default_to_the_service_defaults() -> None:
    """`guarded_h11` had a server-wide cap of 0 (none) by default while `ttlearn serve` defaulted to 256."""
    http: Any = guarded_h11()
    assert (http.max_waiting, http.per_client, http.max_unsent) == (
        DEFAULT_MAX_WAITING,
        DEFAULT_CONNECTIONS_PER_CLIENT,
        DEFAULT_MAX_UNSENT,
    )
