"""A MariaDB server of our own, and model-written SQL on it, one task at a time.

`temporary_server()` starts a fresh `mariadbd` (Debian's `mariadb-server`) in a temporary folder: no network, a unix
socket in that folder, its own user (`mysql`, when we are root), no options file read, stopped and deleted at the end.
Its settings are MySQL 8's where they change what a query returns (`sql_mode` with ONLY_FULL_GROUP_BY, utf8mb4 with
an accent- and case-insensitive collation, `group_concat_max_len` 1024) and tight where hostile SQL could hurt
(`local_infile` off, `secure_file_priv` an empty folder, small packets and temporary tables, few connections).
Internal temporary tables live on disk (`tmp_memory_table_size` 0): in memory, a GROUP BY's rows are referred to by
their memory addresses, which break ties under an ORDER BY, so tied rows came back in another order from run to run
(4 of the 350 SELECT golds in 12 runs); on disk they come back in one order.

Model-written SQL runs on it one task at a time, each in a database and as a user of its own:
`sandbox.task_database`.
"""

from __future__ import annotations

import secrets
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ttlearn.sandbox.dbserver import find_program, server_folder, user_missing

SERVER_USER = "mysql"
SERVER_PROGRAM = "mariadbd"
INSTALL_PROGRAM = "mariadb-install-db"
SEARCH_PATH = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")
START_TIMEOUT_S = 30.0
MYSQL8_SQL_MODE = (
    "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
    "NO_ENGINE_SUBSTITUTION"
)
"""MySQL 8's default `sql_mode`, the server the benchmark's golds were written for (MariaDB's lacks
ONLY_FULL_GROUP_BY, so it would answer queries MySQL refuses)."""
COLLATION = "utf8mb4_uca1400_ai_ci"
"""The nearest MariaDB 10.11 has to MySQL 8's default `utf8mb4_0900_ai_ci`: a Unicode collation, case- and
accent-insensitive ('alice' = 'Alice', as the benchmark's server compares)."""
SERVER_OPTIONS = (
    "--skip-networking",
    "--skip-name-resolve",
    "--local-infile=0",
    "--performance-schema=OFF",
    "--character-set-server=utf8mb4",
    f"--collation-server={COLLATION}",
    f"--sql-mode={MYSQL8_SQL_MODE}",
    "--group-concat-max-len=1024",
    "--max-connections=64",
    "--max-allowed-packet=4M",
    "--max-heap-table-size=16M",
    "--tmp-memory-table-size=0",
    "--tmp-disk-table-size=64M",
    "--innodb-buffer-pool-size=32M",
    "--innodb-log-file-size=8M",
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-doublewrite=0",
)
"""Every option the server runs with besides its folders (`--no-defaults`: no options file of the machine is read)."""


def server_missing() -> str | None:
    """Why `temporary_server` cannot start here, or None when it can."""
    for program in (SERVER_PROGRAM, INSTALL_PROGRAM):
        if find_program(program, SEARCH_PATH) is None:
            return f"MariaDB's {program} is not installed (apt-get install mariadb-server)"
    try:
        import pymysql  # noqa: F401
    except ImportError:
        return "the MariaDB client is not installed: pip install 'ttlearn[mariadb]'"
    return user_missing(SERVER_USER, "MariaDB")


@dataclass(frozen=True)
class Server:
    """A running server: where its socket is and how the administrator logs in (a random password, the socket in a
    folder only the server's user and we can enter)."""

    socket: str
    password: str

    def connect(self, user: str = "root", password: str | None = None, database: str | None = None, **options: Any):
        import pymysql

        return pymysql.connect(
            unix_socket=self.socket,
            user=user,
            password=self.password if password is None else password,
            database=database,
            autocommit=True,
            local_infile=False,
            charset="utf8mb4",
            **options,
        )


@contextmanager
def temporary_server(start_timeout_s: float = START_TIMEOUT_S) -> Iterator[Server]:
    """A fresh MariaDB on a unix socket in a temporary folder (`dbserver.server_folder`: as root, the mysql user's),
    stopped and deleted on exit. A server that fails to install, start or answer raises `DatabaseServerError`."""
    missing = server_missing()
    if missing:
        raise FileNotFoundError(missing)
    import pymysql

    with server_folder("ttlearn-mariadb-", SERVER_USER, "MariaDB") as folder:
        data, files, socket = folder.path / "data", folder.folder("no-files"), str(folder.path / "server.sock")
        folder.run(
            str(find_program(INSTALL_PROGRAM, SEARCH_PATH)), "--no-defaults", f"--datadir={data}", "--skip-test-db",
            "--auth-root-authentication-method=normal", "--innodb-log-file-size=8M", "--innodb-buffer-pool-size=32M",
        )  # fmt: skip

        def answers() -> bool:
            try:
                pymysql.connect(unix_socket=socket, user="root", password="").close()
                return True
            except pymysql.err.OperationalError:
                return False

        folder.start(
            [str(find_program(SERVER_PROGRAM, SEARCH_PATH)), "--no-defaults", f"--datadir={data}", f"--socket={socket}",
             f"--pid-file={folder.path / 'server.pid'}", f"--tmpdir={folder.path}", f"--secure-file-priv={files}",
             *SERVER_OPTIONS],
            answers, signal.SIGTERM, start_timeout_s,
        )  # fmt: skip
        password = secrets.token_hex(16)
        with pymysql.connect(unix_socket=socket, user="root", password="", autocommit=True) as admin:
            with admin.cursor() as cursor:
                cursor.execute("ALTER USER 'root'@'localhost' IDENTIFIED BY %s", (password,))
                cursor.execute("DROP USER IF EXISTS ''@'localhost'")
        yield Server(socket, password)
