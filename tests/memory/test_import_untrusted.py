"""`ttlearn memory import` of a crafted export (issue 41): the whole file is read with bounds and validated before
anything is written, ids and counters are in range, everything goes in one transaction, and no id sequence moves
past what the store can still issue — on SQLite and on a real PostgreSQL (started by the session's fixture)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ttlearn.cli import app
from ttlearn.memory.embed import make_embedder
from ttlearn.memory.items import NewItem
from ttlearn.memory.store import MemoryStore

ROOT = Path(__file__).resolve().parents[2]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "300"})


def one_error_line(result) -> str:
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and len(errors) == 1 and "Traceback" not in result.output, result.output
    return errors[0]


@pytest.fixture
def export(tmp_path) -> dict:
    """A real export of a store with two namespaces, each with an item and a logged retrieval."""
    with MemoryStore(tmp_path / "source.sqlite") as source:
        for name in ("first", "second"):
            namespace = source.namespace(name, make_embedder("hash"))
            added = namespace.add(NewItem(f"{name} intent", f"{name} experience", 0.5, "run", 1, unit=1))
            log = namespace.log_retrieval("q", [{"id": added.item_id, "sim": 0.9, "q": 0.5, "score": 1.0}],
                                          [added.item_id], explored=False, run_id="run")  # fmt: skip
            namespace.assign_episode([log], 1, 1)
        return source.export_all()


def stores(tmp_path: Path, postgres_url: str) -> list[str]:
    return [str(tmp_path / "target.sqlite"), postgres_url]


def contents(location: str) -> list:
    with MemoryStore(location) as store:
        return [(n["name"], [m.experience for m in store.inspect(n["name"])]) for n in store.namespaces()]


CRAFTED = {
    "a retrieval id of 2⁶³ − 1": lambda dump: dump["namespaces"][1]["retrievals"][0].update(id=2**63 - 1),
    "an item id of 2⁵³ + 1": lambda dump: dump["namespaces"][1]["items"][0].update(id=2**53 + 1),
    "a negative intent id": lambda dump: dump["namespaces"][1]["intents"][0].update(id=-7),
    "candidates that are a number": lambda dump: dump["namespaces"][1]["retrievals"][0].update(candidates=5),
    "a chosen id that is text": lambda dump: dump["namespaces"][1]["retrievals"][0].update(chosen=["x"]),
    "visits of 2⁶³": lambda dump: dump["namespaces"][1]["items"][0].update(visits=2**63),
    "an empty namespace name": lambda dump: dump["namespaces"][1].update(name=""),
    "a namespace twice": lambda dump: dump["namespaces"][1].update(name="first"),
}


@pytest.mark.parametrize("case", CRAFTED)
def test_a_crafted_export_leaves_the_store_as_it_was(export, tmp_path, postgres_url, case):
    """Before: the retrieval id of 2⁶³ − 1 moved PostgreSQL's sequence to its end (every later retrieval of every
    namespace failed), and malformed retrievals failed with a TypeError after the first namespace was committed.
    Now each crafted export is refused in one line naming what is wrong, and the store holds what it held."""
    CRAFTED[case](export)
    (tmp_path / "dump.json").write_text(json.dumps(export))
    for location in stores(tmp_path, postgres_url):
        with MemoryStore(location) as store:
            store.namespace("mine", make_embedder("hash")).add(NewItem("my intent", "my experience", 0.0, "me", 1))
        before = contents(location)
        one_error_line(invoke("memory", "import", location, str(tmp_path / "dump.json")))
        assert contents(location) == before
        with MemoryStore(location) as store:  # every id sequence can still issue ids
            namespace = store.namespace("mine", make_embedder("hash"))
            added = namespace.add(NewItem("later intent", "later experience", 0.0, "me", 2))
            log = namespace.log_retrieval("later", [], [], explored=False, run_id="me")
            assert 0 < added.item_id < 2**40 and 0 < log < 2**40


def test_a_valid_export_still_comes_back_id_for_id(export, tmp_path, postgres_url):
    (tmp_path / "dump.json").write_text(json.dumps(export))
    for location in stores(tmp_path, postgres_url):
        result = invoke("memory", "import", location, str(tmp_path / "dump.json"))
        assert result.exit_code == 0 and "imported 2 namespaces" in result.output, result.output
        with MemoryStore(location) as store:
            assert store.export_all() == export


@pytest.mark.parametrize("case", ["a FIFO", "/dev/zero", "200,000 levels deep", "not JSON"])
def test_an_export_that_is_no_file_is_refused_at_once(tmp_path, case):
    """A FIFO hung, /dev/zero grew to 2.7 GB, a deep file gave a 49-line traceback: each is one line in a second."""
    dump = tmp_path / "dump.json"
    if case == "a FIFO":
        os.mkfifo(dump)
    elif case == "/dev/zero":
        dump.symlink_to("/dev/zero")
    elif case == "not JSON":
        dump.write_text('{"format": ')
    else:
        dump.write_text('{"format": ' + "[" * 200_000 + "]" * 200_000 + "}")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "ttlearn", "memory", "import", str(tmp_path / "store.sqlite"), str(dump)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    errors = [line for line in done.stdout.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stdout + done.stderr, done.stdout
    assert time.monotonic() - started < 20
    assert not (tmp_path / "store.sqlite").exists(), "a refused import created the store"
