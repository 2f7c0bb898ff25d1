"""A throwaway database server (`sandbox.dbserver`) that fails to install, start or answer ends in one line that names
the server (`DatabaseServerError`), from the library and from `ttlearn run`; its folder is deleted all the same."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ttlearn.cli import app
from ttlearn.errors import DatabaseServerError
from ttlearn.sandbox import mariadb
from ttlearn.sandbox.dbserver import find_program, server_folder


@pytest.fixture
def mariadb_programs(mariadb_server) -> tuple[str, str]:
    """MariaDB's setup program and server (the session's server shows they run here)."""
    found = [find_program(name, mariadb.SEARCH_PATH) for name in (mariadb.INSTALL_PROGRAM, mariadb.SERVER_PROGRAM)]
    return str(found[0]), str(found[1])


def test_a_setup_program_that_fails_is_one_line_naming_the_server(mariadb_programs) -> None:
    install, _ = mariadb_programs
    with pytest.raises(DatabaseServerError) as failed:
        with server_folder("ttlearn-test-", mariadb.SERVER_USER, "MariaDB") as folder:
            folder.run(install, "--no-defaults", "--datadir=/dev/null/data")
    message = str(failed.value)
    assert message.startswith("MariaDB: mariadb-install-db failed: ") and "/dev/null/data" in message
    assert "\n" not in message
    assert not folder.path.exists()


def test_a_server_that_stops_as_it_starts_is_one_line_and_leaves_nothing(mariadb_programs) -> None:
    _, server = mariadb_programs
    with pytest.raises(DatabaseServerError) as failed:
        with server_folder("ttlearn-test-", mariadb.SERVER_USER, "MariaDB") as folder:
            folder.start([server, "--no-defaults", "--no-such-option"], lambda: False, signal.SIGTERM, timeout_s=30)
    message = str(failed.value)
    assert message.startswith("MariaDB stopped as it started: ") and "no-such-option" in message and "\n" not in message
    assert not folder.path.exists()


def test_a_server_that_never_answers_is_stopped_and_named(mariadb_programs) -> None:
    with pytest.raises(DatabaseServerError, match=r"^MariaDB did not answer within 1 s of starting$"):
        with server_folder("ttlearn-test-", mariadb.SERVER_USER, "MariaDB") as folder:
            folder.start(["sleep", "60"], lambda: False, signal.SIGTERM, timeout_s=1)
    assert folder.process is None and not folder.path.exists()


def test_ttlearn_run_prints_a_mariadb_that_cannot_start_as_one_line(mariadb_server, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(mariadb, "SERVER_OPTIONS", (*mariadb.SERVER_OPTIONS, "--no-such-option"))
    played = CliRunner().invoke(
        app,
        ["run", "db_bench", "-e", "engine=mariadb", "--llm", "scripted:oracle", "--tasks", "1", "--out", str(tmp_path)],
        env={"COLUMNS": "300"},
    )
    errors = [line for line in played.output.splitlines() if line.startswith("error:")]
    assert played.exit_code == 2 and "Traceback" not in played.output, played.output
    assert len(errors) == 1 and errors[0].startswith("error: MariaDB stopped as it started: "), played.output


def _programs(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(0o755)
    return folder


def test_postgresql_is_found_on_path_then_at_pg_config_then_in_the_newest_debian_version(tmp_path, monkeypatch):
    import local_postgres

    versions = tmp_path / "lib"
    for version in ("9.6", "15", "17"):
        _programs(versions / version / "bin", "initdb", "postgres")
    _programs(versions / "18" / "bin", "initdb")  # half an install: no server program
    monkeypatch.setattr(local_postgres, "DEBIAN_VERSIONS", versions)
    monkeypatch.setenv("PATH", str(_programs(tmp_path / "empty")))
    assert local_postgres.bin_dir() == versions / "17" / "bin"

    config_dir = _programs(tmp_path / "config", "initdb", "postgres")
    tools = _programs(tmp_path / "tools")
    (tools / "pg_config").write_text(f"#!/bin/sh\necho {config_dir}\n")
    (tools / "pg_config").chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))
    assert local_postgres.bin_dir() == config_dir

    on_path = _programs(tmp_path / "path", "initdb", "postgres")
    monkeypatch.setenv("PATH", f"{on_path}:{tools}")
    assert local_postgres.bin_dir() == on_path

    monkeypatch.setattr(local_postgres, "DEBIAN_VERSIONS", tmp_path / "none")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert local_postgres.bin_dir() is None
    assert "apt-get install postgresql" in str(local_postgres.server_missing())


def test_a_server_that_cannot_start_skips_the_test_here_and_fails_it_under_ci(monkeypatch) -> None:
    from conftest import unavailable

    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="^no server here$"):
        unavailable("no server here")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI runs every test that needs a database server.*no server here"):
        unavailable("no server here")
