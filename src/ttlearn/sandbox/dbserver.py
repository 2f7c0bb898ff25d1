"""A throwaway database server of our own: its files in a temporary folder, run as its own system user when we are
root (a database server refuses root, and a hostile query then reaches only that user's files), killed with the
process that started it however that one dies, stopped and deleted at the end.

Two recipes use it: db_bench's MariaDB (`sandbox.mariadb.temporary_server`) and the tests' and benchmarks'
PostgreSQL (`tests/local_postgres.py`). A recipe says which programs fill the data folder (`ServerFolder.run`), the
command that serves it, how to tell that it answers, and which signal stops it (`ServerFolder.start`).

Programs run as the server's user through `subprocess`'s own `user` and `group` (no supplementary groups), not a
wrapper such as runuser: the server is then our child itself, so a stop or restart signal reaches it as sent (runuser
turns each into SIGTERM and a SIGKILL two seconds later).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ttlearn.errors import DatabaseServerError

STOP_TIMEOUT_S = 20.0
"""How long a server may take to stop on its stop signal before its whole process group is killed."""


def find_program(name: str, folders: Sequence[str | Path] = ()) -> str | None:
    """`name` on PATH, else in the first of `folders` that holds it as an executable; None when neither has it."""
    return shutil.which(name) or next(
        (str(Path(folder) / name) for folder in folders if os.access(Path(folder) / name, os.X_OK)), None
    )


def user_missing(user: str, server: str) -> str | None:
    """Why `server` cannot run as its own `user` here (we are root and the system has no such user), or None."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(user)
    except KeyError:
        return f"as root, {server} runs as the system user {user!r}, which does not exist (its package creates it)"
    return None


class ServerFolder:
    """A temporary folder for one server (under /tmp when we are root, owned by `user`, which runs its programs
    there), and the server process once `start` ran. Use `server_folder`, which stops and deletes it."""

    def __init__(self, prefix: str, user: str, name: str) -> None:
        self.name = name
        self._as_user: dict[str, Any] = {}
        if os.geteuid() == 0:
            entry = pwd.getpwnam(user)
            self._as_user = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp" if self._as_user else None))
        self._give(self.path)
        self.process: subprocess.Popen[bytes] | None = None
        self._stop_signal = signal.SIGTERM

    def _give(self, path: Path) -> Path:
        if self._as_user:
            os.chown(path, self._as_user["user"], self._as_user["group"])
        return path

    def folder(self, name: str) -> Path:
        """A new folder inside, owned by the server's user."""
        (self.path / name).mkdir()
        return self._give(self.path / name)

    def file(self, name: str, text: str) -> Path:
        """A new file inside (a password file for the server's setup), readable by the server's user alone."""
        path = self.path / name
        path.touch(mode=0o600)
        path.write_text(text)
        return self._give(path)

    def run(self, *args: str, timeout_s: float = 120.0) -> None:
        """Run one of the server's programs (creating its data folder) to its end, as the server's user."""
        done = subprocess.run(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout_s, cwd=self.path,
            **self._as_user,
        )  # fmt: skip
        if done.returncode:
            raise DatabaseServerError(f"{self.name}: {Path(args[0]).name} failed: {_last_lines(done.stdout)}")

    def start(self, command: Sequence[str], answers: Callable[[], bool], stop_signal: int, timeout_s: float) -> None:
        """Start the server, its output in `server.log`, and return once `answers()` says it accepts clients.
        `stop_signal` stops it: sent by `stop`, and by the kernel when the process that started it dies."""
        self._stop_signal = stop_signal
        die_with_parent = _die_with_parent(stop_signal)
        with open(self.path / "server.log", "ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=self.path, start_new_session=True,
                preexec_fn=die_with_parent, **self._as_user,
            )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while not answers():
            if self.process.poll() is not None:
                log_text = (self.path / "server.log").read_text(errors="replace")
                raise DatabaseServerError(f"{self.name} stopped as it started: {_last_lines(log_text)}")
            if time.monotonic() > deadline:
                raise DatabaseServerError(f"{self.name} did not answer within {timeout_s:.0f} s of starting")
            time.sleep(0.05)

    def stop(self, stop_signal: int | None = None) -> None:
        """Stop the server with its stop signal (or `stop_signal`), then kill its whole process group if it lingers."""
        if self.process is None:
            return
        self.process.send_signal(self._stop_signal if stop_signal is None else stop_signal)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process = None


@contextmanager
def server_folder(prefix: str, user: str, name: str) -> Iterator[ServerFolder]:
    """A `ServerFolder` whose server (if it started one) is stopped, and the folder deleted, on exit. `name` says
    which server it is in errors ("MariaDB", "PostgreSQL")."""
    folder = ServerFolder(prefix, user, name)
    try:
        yield folder
    finally:
        try:
            folder.stop()
        finally:
            shutil.rmtree(folder.path, ignore_errors=True)


def _die_with_parent(sig: int) -> Callable[[], None]:
    """What the server's process runs before the server: ask for `sig` when the process that started it dies,
    however it dies (a killed run would otherwise leave its server running). Looked up here, in the parent: the child
    already runs as the server's user, which may not read this Python's files to import ctypes."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    return lambda: prctl(1, sig, 0, 0, 0)  # PR_SET_PDEATHSIG


def _last_lines(text: str, count: int = 3) -> str:
    """The end of a program's output, on one line: where its error is."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-count:])[-600:] or "no output"
