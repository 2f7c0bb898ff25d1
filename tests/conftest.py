"""Shared test settings: one BLAS/torch thread (2 shared cores), offline hub, and the embedded model loaded once.

The model cache ($TTLEARN_CACHE, default ~/.cache/ttlearn) is shared on purpose: converting the GGUF for torch
takes a minute, once per machine.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TTLEARN_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Threads that wait for work sleep instead of spinning: the two-thread numeric tests (tests/numeric.py) share two
# cores with other processes, and a spinning OpenMP thread holds a core its partner needs (one such test: 92 s
# spinning, 4.2 s sleeping, on the loaded 2-core machine). The thread count, hence the summation order, is the same.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
from numeric import summation_order  # noqa: E402,F401 - the fixture every numeric test takes (tests/numeric.py)

from ttlearn import registry as _registry  # noqa: E402

PLUGINS_BEFORE_COLLECTION = tuple(_registry._loaded_plugins)
"""Plug-ins loaded before any test module was imported (a module may load one at import, as a test aid)."""


@pytest.fixture(autouse=True)
def forget_plugins_loaded_by_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plug-in a test (or a test module) loads stays registered, but it is not "loaded" for other tests: runs record
    the loaded plug-ins, so a leftover would make an in-process run differ from a subprocess's (test order)."""
    from ttlearn import registry

    monkeypatch.setattr(registry, "_loaded_plugins", list(PLUGINS_BEFORE_COLLECTION))


@pytest.fixture(scope="session")
def smollm2():
    """The embedded default model, loaded once for the whole test session."""
    from ttlearn.llm import make_llm

    llm = make_llm("smollm2")
    yield llm
    llm.close()


@pytest.fixture(scope="session", autouse=True)
def bfcl_data():
    """BFCL's tasks and APIs for the `tools` environment, fetched once per machine (`ttlearn data prepare tools`;
    instant when present), so its tests run on a fresh machine too instead of being skipped."""
    from ttlearn.data.bfcl import prepare_bfcl

    return prepare_bfcl()


@pytest.fixture(scope="session")
def spider_data():
    """Spider-dev on SQLite for the `sql` environment, built once per machine (`ttlearn data prepare sql`; instant
    when present)."""
    from ttlearn.data.prepare import load_question_set, prepare_sql, spider_dir

    try:
        load_question_set(spider_dir())
    except (FileNotFoundError, ValueError):
        prepare_sql()
    return spider_dir()


def unavailable(reason: str) -> NoReturn:
    """A test whose database server cannot start here is skipped, but fails under CI (CI=true): CI installs every
    server (`.ci/run`), so a skip there would hide that the store's concurrency and replica tests never ran."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(
            f"CI runs every test that needs a database server, and it cannot start here: {reason}", pytrace=False
        )
    pytest.skip(reason)


@pytest.fixture(scope="session")
def start_postgres():
    """`local_postgres.temporary_server`, for a test that needs a PostgreSQL of its own (`with start_postgres(
    settings, password=…) as server`); skipped where PostgreSQL is not installed (a failure under CI)."""
    import local_postgres

    missing = local_postgres.server_missing()
    if missing:
        unavailable(missing)
    return local_postgres.temporary_server


@pytest.fixture(scope="session")
def postgres_server(start_postgres):
    """A real PostgreSQL for the whole session (initdb in a temporary folder, a loopback port, stopped at the end;
    as root it runs as the postgres user); its URL."""
    with start_postgres({"fsync": "off", "max_connections": "200"}) as server:
        yield server.url


@pytest.fixture
def own_postgres(start_postgres):
    """A PostgreSQL of the test's own, which it may restart (the session's server serves the other tests)."""
    with start_postgres({"fsync": "off"}) as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server, request):
    """A fresh, empty database on the session's server for one test; its URL."""
    import psycopg

    name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:50]
    with psycopg.connect(postgres_server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    return postgres_server.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(params=["sqlite", "postgresql"])
def store_location(request, tmp_path: Path) -> str:
    """Where a memory store lives, once on each back end: a SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "store.sqlite")
    pytest.importorskip("psycopg")
    return request.getfixturevalue("postgres_url")


@pytest.fixture(scope="session")
def mariadb_server():
    """A real MariaDB for the whole session (`sandbox.mariadb.temporary_server`: a temporary data folder, a unix
    socket, the mysql user when we are root, stopped and deleted at the end); skipped only where Debian's
    mariadb-server or the client is not installed (a failure under CI: `.ci/run` installs the server)."""
    from ttlearn.sandbox.mariadb import server_missing, temporary_server

    missing = server_missing()
    if missing:
        unavailable(missing)
    with temporary_server() as server:
        yield server
