"""The BFCL APIs' child process (`_bfcl_worker.py`) and its request / answer pipe, with a time limit per request:
a call that runs past it or exhausts the child's memory ends the episode and nothing else."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

_WORKER = Path(__file__).with_name("_bfcl_worker.py")


class BackendFailure(RuntimeError):
    """The API child process ran past its time limit or died; the episode cannot go on."""


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()


class Backend:
    """A `_bfcl_worker.py` child process and its request/answer pipe, with a time limit per request."""

    def __init__(self, root: Path, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.process = subprocess.Popen(
            [sys.executable, str(_WORKER), str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._finalizer = weakref.finalize(self, _stop, self.process)

    def ask(self, request: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """Send one request and wait for its answer, up to `timeout_s` (default: the per-call limit)."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise BackendFailure("the API back end had stopped") from None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.close()
            reason = f"ran past {timeout_s:g} s" if not ready else "crashed (out of memory?)"
            raise BackendFailure(f"the API call {reason} and was stopped")
        return json.loads(line)

    def close(self) -> None:
        self._finalizer()

    @property
    def alive(self) -> bool:
        return self.process.poll() is None
