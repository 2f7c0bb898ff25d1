"""llama.cpp's OpenAI-compatible server on loopback, serving a local GGUF: the `openai:` back end without a GPU.

Tests and benchmarks start it to exercise the real HTTP path (`openai:http://127.0.0.1:PORT/v1#ALIAS`). It is
llama-cpp-python's own server (`python -m llama_cpp.server`, the `test` extra), and in 0.3.36 that server has no
parallel slots: every request holds one process-wide lock around its single model, so concurrent requests queue and
are answered one at a time. Episodes in flight against it overlap only their client-side work; real batching needs
a server with slots (vLLM `--max-num-seqs`, or the native `llama-server -np N`).

Its one KV cache is reused across requests: a new prompt's longest common prefix with the previous request is kept
and only the rest evaluated. With requests interleaved, that split depends on timing, and a prompt evaluated in a
different split gets logits that differ in the last bits, which can flip a near-tie: we saw 2 of 3 runs with 4
games in flight change an RPS move. `batch_invariant=True` evaluates one token per batch, so the split no longer
matters and the answers are the same in any order (0 of 5 runs changed), at some cost in prompt speed.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from ttlearn.llm.base import LLMError


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def llama_server(
    model: Path,
    alias: str,
    log: Path,
    *,
    threads: int = 1,
    n_ctx: int = 2048,
    batch_invariant: bool = False,
    startup_s: float = 120.0,
) -> Iterator[str]:
    """Serve `model` as `alias` on a free loopback port until the block ends; yields the base URL (…/v1).

    The server's output goes to the file `log` (llama.cpp logs enough to fill a pipe and stall the server); a server
    that does not answer within `startup_s` is killed and reported with the tail of that log."""
    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--model_alias", alias]
    command += ["--host", "127.0.0.1", "--port", str(port), "--n_threads", str(threads), "--n_ctx", str(n_ctx)]
    if batch_invariant:
        command += ["--n_batch", "1", "--n_ubatch", "1"]
    base = f"http://127.0.0.1:{port}/v1"
    with open(log, "w") as log_file:
        server = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + startup_s
            while True:
                try:
                    with urllib.request.urlopen(f"{base}/models", timeout=2) as response:
                        json.loads(response.read())
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise LLMError(f"llama.cpp server did not start: {Path(log).read_text()[-2000:]}") from None
                    time.sleep(0.5)
            yield base
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
