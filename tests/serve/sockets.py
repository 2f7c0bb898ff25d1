"""Raw loopback sockets that behave as hostile clients of the memory service: half-sent heads, pipelined requests
never read. Shared by the tests of the service process and of its connection guards."""

from __future__ import annotations

import socket

HEALTH = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def slow_connection(port: int, source: str) -> socket.socket:
    """A connection from loopback address `source` that sends half a request head and then nothing."""
    sock = socket.socket()
    sock.settimeout(5)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (what it had sent is read and dropped first)."""
    sock.setblocking(False)
    try:
        while sock.recv(65536):
            pass
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def pipelining_reader(port: int, source: str, requests: int, request: bytes = HEALTH) -> socket.socket | None:
    """A connection from loopback address `source` that pipelines `requests` copies of `request` and never reads an
    answer (a small receive buffer, so its answers pile up on the server's side at once); None if it was not
    accepted."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.bind((source, 0))
    sock.settimeout(5)
    try:
        sock.connect(("127.0.0.1", port))
    except OSError:
        sock.close()
        return None
    sock.setblocking(False)
    data = request * requests
    try:
        while data:
            data = data[sock.send(data) :]
    except OSError:
        pass  # the server stopped reading (or dropped us): the rest is never sent
    return sock
