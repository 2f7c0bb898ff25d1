"""A PostgreSQL store's password is a credential: `-m store=postgresql://user:PASSWORD@…` reaches the database (a real
server that checks passwords, started here) but is never written into the run directory nor printed — not in
`run.json`, `summary.json`, a snapshot, the run's header line, `show`, or `memory export`'s message. The directory
records the URL without it; `resume` and the memory commands take it again from `--trust-store` or PGPASSWORD."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ttlearn.cli import app
from ttlearn.runs import RunConfig, parse_config

pytest.importorskip("psycopg")
SECRET = "s3cret-pw-4f1c"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


@pytest.fixture(scope="module")
def guarded_url(start_postgres):
    """A PostgreSQL server whose `postgres` user needs the password SECRET; its URL without the password."""
    with start_postgres({"fsync": "off"}, password=SECRET) as server:
        yield server.url


@pytest.fixture(autouse=True)
def no_password_in_the_environment(monkeypatch):
    monkeypatch.delenv("PGPASSWORD", raising=False)


def with_password(url: str) -> str:
    return url.replace("postgres@", f"postgres:{SECRET}@", 1)


def files_holding(root: Path, text: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_the_server_checks_the_password(guarded_url):
    import psycopg

    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(guarded_url).close()
    psycopg.connect(with_password(guarded_url)).close()


def test_a_store_password_is_never_written_or_printed(guarded_url, tmp_path, monkeypatch):
    run = tmp_path / "run"
    played = invoke(
        "run", "rps", "--llm", "scripted:random", "--memory", "memrl", "-m", f"store={with_password(guarded_url)}",
        "-m", "write=trajectory", "-m", "embedder=hash", "-m", "namespace=pw", "--games", "2", "--rounds", "4",
        "--out", str(run),
    )  # fmt: skip
    assert played.exit_code == 0, played.output  # the password reached the server
    assert SECRET not in played.output and guarded_url in played.output  # the header line shows the URL without it
    assert files_holding(run, SECRET) == []
    assert json.loads((run / "run.json").read_text())["memory_options"]["store"] == guarded_url

    shown = invoke("show", str(run))
    assert shown.exit_code == 0 and SECRET not in shown.output and guarded_url in shown.output

    exported = invoke("memory", "export", with_password(guarded_url), "--out", str(tmp_path / "dump.json"))
    assert exported.exit_code == 0 and SECRET not in exported.output and guarded_url in exported.output
    assert files_holding(tmp_path, SECRET) == []

    # resume: the unit left to play needs the database again, so the password comes from --trust-store
    lines = (run / "units.jsonl").read_text().splitlines(keepends=True)
    (run / "units.jsonl").write_text(lines[0])
    monkeypatch.delenv("PGPASSWORD")  # as in a fresh process: `run` set it from the URL
    refused = invoke("resume", str(run), "--trust-store", guarded_url)
    assert refused.exit_code != 0 and SECRET not in refused.output  # named again, but no password anywhere
    resumed = invoke("resume", str(run), "--trust-store", with_password(guarded_url))
    assert resumed.exit_code == 0 and SECRET not in resumed.output, resumed.output
    assert files_holding(tmp_path, SECRET) == []
    inspected = invoke("memory", "inspect", str(run), "--trust-store", with_password(guarded_url))
    assert inspected.exit_code == 0 and "pw" in inspected.output and SECRET not in inspected.output
    monkeypatch.setenv("PGPASSWORD", SECRET)  # or from the environment, as libpq reads it
    assert invoke("memory", "inspect", str(run), "--trust-store", guarded_url).exit_code == 0


def test_a_config_refuses_a_store_password(guarded_url):
    for options in (
        {"store": with_password(guarded_url)},
        {"store": f"{guarded_url}?password={SECRET}"},
        {"url": f"https://agent:{SECRET}@memory.example"},
    ):
        with pytest.raises(ValueError, match="never recorded") as refused:
            RunConfig(env="rps", memory="memrl", memory_options=options)
        assert SECRET not in str(refused.value)  # pydantic would show the input
        with pytest.raises(ValueError, match="never recorded") as refused:
            parse_config({"env": "rps", "memory": "memrl", "memory_options": options})
        assert SECRET not in str(refused.value) and "\n" not in str(refused.value)
    assert os.environ.get("PGPASSWORD") is None


def test_a_password_in_the_query_string_is_used_but_never_written_or_printed(guarded_url, tmp_path):
    """`postgresql://user@host/db?password=…` (libpq reads the password there too) reached the database and was then
    recorded in run.json, summary.json and snapshots.jsonl, and shown in the header line and by `show`."""
    run = tmp_path / "run"
    played = invoke(
        "run", "rps", "--llm", "scripted:random", "--memory", "memrl", "-m", f"store={guarded_url}?password={SECRET}",
        "-m", "embedder=hash", "-m", "namespace=query", "--games", "1", "--rounds", "4", "--out", str(run),
    )  # fmt: skip
    assert played.exit_code == 0, played.output  # the password reached the server
    assert SECRET not in played.output and guarded_url in played.output
    assert files_holding(run, SECRET) == []
    assert json.loads((run / "run.json").read_text())["memory_options"]["store"] == guarded_url
    shown = invoke("show", str(run))
    assert shown.exit_code == 0 and SECRET not in shown.output and guarded_url in shown.output


def test_an_unreachable_store_is_named_without_its_password(tmp_path):
    """Nothing listens on port 1: the error names the store, never its password, wherever the URL held it."""
    for number, url in enumerate((f"postgresql://postgres:{SECRET}@127.0.0.1:1/postgres",
                                  f"postgresql://postgres@127.0.0.1:1/postgres?password={SECRET}")):  # fmt: skip
        result = invoke(
            "run", "rps", "--llm", "scripted:random", "--memory", "memrl", "-m", f"store={url}", "-m", "embedder=hash",
            "--games", "1", "--rounds", "4", "--out", str(tmp_path / f"run{number}"),
        )  # fmt: skip
        errors = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert result.exit_code == 2 and len(errors) == 1 and "127.0.0.1:1" in errors[0], result.output
        assert SECRET not in result.output
        assert files_holding(tmp_path, SECRET) == []


@pytest.mark.parametrize(
    "url, password, recorded",
    [
        ("postgresql://u:pw@h/db", "pw", "postgresql://u@h/db"),
        ("postgresql://u:p%40w@h:5432,h2/db", "p@w", "postgresql://u@h:5432,h2/db"),  # libpq decodes percent escapes
        ("postgresql://u@h/db?password=pw&sslmode=require", "pw", "postgresql://u@h/db?sslmode=require"),
        ("postgresql://h/db?sslmode=require&pass%77ord=pw", "pw", "postgresql://h/db?sslmode=require"),
        ("postgresql://u:pw@h/db?password=pw", "pw", "postgresql://u@h/db"),
        ("postgresql://u@h/db?application_name=a", None, "postgresql://u@h/db?application_name=a"),
        ("/runs/x/memrl.sqlite", None, "/runs/x/memrl.sqlite"),
    ],
)
def test_a_password_is_found_and_dropped_wherever_it_sits_in_the_url(url, password, recorded):
    from ttlearn.memory.base import url_password, without_password

    assert url_password(url) == password and without_password(url) == recorded


@pytest.mark.parametrize(
    "url, says",
    [
        (f"postgresql://u:{SECRET}@h/db?password=other", "2 different passwords"),
        (f"postgresql://u@h/db?sslpassword={SECRET}", "PGSERVICEFILE"),
        (f"postgresql://u:{SECRET}@[::1/db", "cannot be read"),
    ],
)
def test_a_url_that_cannot_be_cleaned_is_refused_without_being_shown(url, says, tmp_path):
    from ttlearn.memory.base import url_password

    with pytest.raises(ValueError, match=says) as refused:
        url_password(url)
    assert SECRET not in str(refused.value)
    result = invoke("memory", "export", url, "--out", str(tmp_path / "dump.json"))
    assert result.exit_code == 2 and says in result.output and SECRET not in result.output
