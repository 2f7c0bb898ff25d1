"""A throwaway PostgreSQL for the tests (`conftest.start_postgres`) and benchmarks: initdb in a temporary folder, the
server on a free loopback port, stopped and deleted at the end (`ttlearn.sandbox.dbserver`: as root it runs as the
postgres user, and it dies with the process that started it).

The server's programs are found as MariaDB's are: on PATH, at `pg_config --bindir`, else in any version Debian's
packages install (/usr/lib/postgresql/N/bin), newest first.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ttlearn.sandbox.dbserver import ServerFolder, server_folder, user_missing

SERVER_USER = "postgres"
"""initdb refuses to run as root; as root the server runs as this system user (Debian's package creates it)."""
PROGRAMS = ("initdb", "postgres")
DEBIAN_VERSIONS = Path("/usr/lib/postgresql")
START_TIMEOUT_S = 60.0
STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}
"""pg_ctl's shutdown modes: `fast` ends every session (open transactions roll back); `immediate` is a crash (the
next start recovers from the log)."""


def bin_dir() -> Path | None:
    """The first folder that holds both server programs (of one version): None when no version is installed."""
    initdb = shutil.which("initdb")
    versions = sorted(DEBIAN_VERSIONS.glob("*/bin"), key=lambda path: _version(path.parent.name), reverse=True)
    folders = [*([Path(initdb).parent] if initdb else []), *_pg_config_bin_dir(), *versions]
    return next((folder for folder in folders if all(os.access(folder / p, os.X_OK) for p in PROGRAMS)), None)


def _pg_config_bin_dir() -> list[Path]:
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return []
    done = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=30)
    return [Path(done.stdout.strip())] if done.returncode == 0 and done.stdout.strip() else []


def _version(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def server_missing() -> str | None:
    """Why `temporary_server` cannot start here, or None when it can."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "the PostgreSQL client is not installed: pip install 'ttlearn[postgres]'"
    if bin_dir() is None:
        return (
            "PostgreSQL's initdb and postgres are not on PATH, at `pg_config --bindir` nor under "
            f"{DEBIAN_VERSIONS}/*/bin (apt-get install postgresql)"
        )
    return user_missing(SERVER_USER, "PostgreSQL")


@dataclass(frozen=True)
class LocalServer:
    """A PostgreSQL server this process started: its URL, and a restart, for tests of what clients do when the
    database goes away and comes back."""

    url: str
    folder: ServerFolder
    command: list[str]
    answers: Callable[[], bool]

    def start(self) -> None:
        self.folder.start(self.command, self.answers, STOP_SIGNALS["immediate"], START_TIMEOUT_S)

    def restart(self, mode: str = "fast") -> None:
        """Stop the server in one of `STOP_SIGNALS`' modes and start it again with the same options; returns once
        it accepts connections."""
        self.folder.stop(STOP_SIGNALS[mode])
        self.start()


@contextmanager
def temporary_server(settings: dict[str, str] | None = None, password: str | None = None) -> Iterator[LocalServer]:
    """A fresh PostgreSQL listening on a free loopback port, deleted on exit. `settings` are server options (e.g.
    {"fsync": "off"} for tests); with `password`, the `postgres` user must give it (scram-sha-256; the URL does not
    hold it), else every local connection is trusted."""
    missing = server_missing()
    if missing:
        raise FileNotFoundError(missing)
    import psycopg

    programs = bin_dir()
    assert programs is not None
    with server_folder("ttlearn-pg-", SERVER_USER, "PostgreSQL") as folder:
        data = folder.path / "data"
        auth = ["-A", "trust"]
        if password is not None:
            auth = ["-A", "scram-sha-256", f"--pwfile={folder.file('pw', password)}"]
        folder.run(str(programs / "initdb"), "-D", str(data), "-U", "postgres", *auth, "-E", "UTF8", "--no-sync")
        port = free_port()
        url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        options = {"listen_addresses": "127.0.0.1", **(settings or {})}
        command = [str(programs / "postgres"), "-D", str(data), "-p", str(port), "-k", str(folder.path)]
        command += [arg for key, value in options.items() for arg in ("-c", f"{key}={value}")]

        def answers() -> bool:
            try:
                psycopg.connect(url, password=password, connect_timeout=2).close()
                return True
            except psycopg.OperationalError:
                return False

        server = LocalServer(url, folder, command, answers)
        server.start()
        yield server


def free_port() -> int:
    """A loopback port no one listens on (as of now)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
