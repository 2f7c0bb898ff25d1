"""A loopback HTTP proxy that injects faults by request number, for testing clients against a real server.

`FaultProxy(upstream_port)` listens on 127.0.0.1; `schedule(faults)` sets what the next requests get, one fault per
request in arrival order, then plain forwarding. Faults:
- "pass": forward to the upstream server and relay its answer;
- "drop": read the request, close the connection without answering;
- "delay:S": wait S seconds (at most MAX_DELAY_S), then forward (a slow server);
- "stall:S": wait S seconds (at most MAX_DELAY_S), then close without answering (a hung server: client timeouts);
- "status:C" / "status:C:RETRY_AFTER": answer status C with a JSON error body (and a Retry-After header).
`log` holds (arrival time, fault, client port) per request, so tests can check counts, spacing and connection reuse
(a pooling client keeps its connections alive through the proxy).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_DELAY_S = 10.0
NOT_RELAYED = {"connection", "keep-alive", "transfer-encoding", "content-length", "upgrade", "server", "date"}
"""Headers the proxy sets itself (or that describe one hop), not relayed."""


class FaultProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.log: list[tuple[float, str, int]] = []
        self.bodies: list[bytes] = []
        """The body of every POST it received, in arrival order (what a client sent its upstream)."""
        self._faults: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def schedule(self, faults: list[str]) -> None:
        """Faults for the next len(faults) requests; clears the log."""
        with self._lock:
            self._faults = list(faults)
            self.log = []

    def next_fault(self, client_port: int) -> str:
        with self._lock:
            fault = self._faults.pop(0) if self._faults else "pass"
            self.log.append((time.monotonic(), fault, client_port))
            return fault

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler_for(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers speak

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass  # quiet: tests read proxy.log instead

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._serve(b"")

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            proxy.bodies.append(body)
            self._serve(body)

        def _serve(self, body: bytes) -> None:
            kind, *args = proxy.next_fault(self.client_address[1]).split(":")
            if kind in ("delay", "stall"):
                time.sleep(min(float(args[0]), MAX_DELAY_S))
            if kind in ("drop", "stall"):
                self.close_connection = True
                return
            if kind == "status":
                self._answer(int(args[0]), {"Retry-After": args[1]} if len(args) > 1 else {}, _error_body(args[0]))
                return
            upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=120)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in NOT_RELAYED}
                upstream.request(self.command, self.path, body=body, headers=headers)
                reply = upstream.getresponse()
                content = reply.read()
                kept = {k: v for k, v in reply.getheaders() if k.lower() not in NOT_RELAYED}
                self._answer(reply.status, kept, content)
            finally:
                upstream.close()

        def _answer(self, status: int, headers: dict[str, str], content: bytes) -> None:
            try:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)
            except OSError:  # the client gave up (its timeout) while we were delaying: nothing to answer
                self.close_connection = True

    return Handler


def _error_body(status: str) -> bytes:
    return json.dumps({"error": {"message": f"injected fault {status}", "code": int(status)}}).encode()
