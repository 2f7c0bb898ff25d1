"""The learning proxy's overhead: chat completions through `ttlearn proxy` against the same upstream called directly,
p50 and p99 in one run, MemRL's retrieval over a namespace of --items memories included.

    PYTHONPATH=src python benchmarks/proxy_overhead.py [--items 10000] [--requests 500]

The upstream is a stub OpenAI-compatible server in this process that answers at once, so the numbers are the proxy's
cost, not a model's: for each request the proxy authenticates the key, retrieves (the `hash` embedder; memories are
inserted in bulk through the store, as benchmarks/service.py does), places the memories in the messages, forwards,
and records the exchange. Requests go one at a time over keep-alive connections, alternating direct and proxied so
both see the same load; every task names a stored situation, so the memories are found and placed. The proxy is a
`ttlearn proxy` process; the client and the stub share this process. Printed: p50 and p99 of both, and of the
overhead (each proxied request minus the direct one sent just before it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import httpx2
import numpy as np
from service import ADMIN, build_store, free_port, situation

ANSWER = json.dumps(
    {
        "id": "stub",
        "object": "chat.completion",
        "model": "stub",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
).encode()


class Stub(BaseHTTPRequestHandler):
    """An OpenAI-compatible upstream that answers every chat completion at once, counting the requests whose
    messages open with a system message (the benchmark sends none: the proxy placed memories there)."""

    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16  # the head and body in one send: split sends meet delayed ACKs (40 ms a request)
    disable_nagle_algorithm = True
    with_memories = 0

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        Stub.with_memories += body["messages"][0]["role"] == "system"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)


def start_stub() -> tuple[ThreadingHTTPServer, str]:
    """The `Stub` upstream on a free loopback port, served from a daemon thread; the server and its base URL."""
    stub = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    stub.daemon_threads = True
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    return stub, f"http://127.0.0.1:{stub.server_address[1]}/v1"


def start_proxy(store: Path, upstream: str, *options: str) -> tuple[subprocess.Popen, str]:
    """`ttlearn proxy` on `store` in front of `upstream`, with `options` more; its process and URL once it answers."""
    port = free_port()
    command = [sys.executable, "-m", "ttlearn", "proxy", "--store", str(store), "--upstream", upstream]
    command += ["--port", str(port), "--rate", "0", *options]
    proxy = subprocess.Popen(
        command, env={**os.environ, "TTLEARN_ADMIN_KEY": ADMIN}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
    while True:
        try:
            if httpx2.get(f"{url}/v1/health", timeout=1).status_code == 200:
                return proxy, url
        except httpx2.HTTPError:
            if time.monotonic() > deadline or proxy.poll() is not None:
                raise RuntimeError("ttlearn proxy did not start") from None
        time.sleep(0.2)


def percentiles(seconds: list[float]) -> str:
    ms = np.asarray(seconds) * 1e3
    return f"p50 {np.percentile(ms, 50):7.2f} ms  p99 {np.percentile(ms, 99):7.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    stub, upstream = start_stub()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        key, _ = build_store(Path(tmp) / "proxy.sqlite", args.items)
        proxy, url = start_proxy(Path(tmp) / "proxy.sqlite", upstream)
        try:
            direct = httpx2.Client(base_url=upstream, timeout=60)
            proxied = httpx2.Client(base_url=f"{url}/v1", timeout=600, headers={"Authorization": f"Bearer {key}"})
            times: dict[str, list[float]] = {"direct": [], "proxy": []}
            for n in range(args.requests + 10):  # the first 10 build the proxy's index and warm both paths
                task = situation(int(rng.integers(args.items)))
                body = {"model": "stub", "messages": [{"role": "user", "content": task}], "max_tokens": 4}
                for name, client in (("direct", direct), ("proxy", proxied)):
                    began = time.perf_counter()
                    client.post("/chat/completions", json=body).raise_for_status()
                    if n >= 10:
                        times[name].append(time.perf_counter() - began)
        finally:
            proxy.send_signal(signal.SIGTERM)
            proxy.wait(timeout=60)
    stub.shutdown()
    overhead = [p - d for p, d in zip(times["proxy"], times["direct"])]
    print(f"{args.items} memories, {args.requests} requests each, one at a time")
    print(f"direct:   {percentiles(times['direct'])}")
    print(f"proxied:  {percentiles(times['proxy'])}")
    print(f"overhead: {percentiles(overhead)}")
    print(f"memories placed in {Stub.with_memories} of {args.requests + 10} proxied requests")


if __name__ == "__main__":
    main()
