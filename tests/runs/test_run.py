"""`Run`: a torn tail dropped by the writer, never by a reader; one writer at a time (two `resume`s of one directory
never both append a unit); records committed compressed read like any others."""

from __future__ import annotations

import gzip
import json
import lzma
import shutil
import time
from pathlib import Path

import pytest
from runhelp import cli, play_run, scripted_config
from typer.testing import CliRunner

from ttlearn.cli import app
from ttlearn.rollout.run import play as play_units
from ttlearn.runs import Run, RunBusyError, RunDir
from ttlearn.types import Episode


def scores(run: Run) -> list[float]:
    return [Episode.from_json(r["attempts"][-1]).score for r in run.records]


def test_torn_tail_is_skipped_by_readers_and_cut_by_the_writer_which_plays_the_unit_again(tmp_path):
    play_run(tmp_path / "full", scripted_config())
    play_run(tmp_path / "torn", scripted_config(units=2))
    units = RunDir(tmp_path / "torn").units
    with open(units, "a") as fh:
        fh.write('{"index": 3, "type": "task", "attempts": [{"steps')  # a write cut by a kill
    torn = units.read_bytes()
    assert Run.open(tmp_path / "torn").done == 2 and units.read_bytes() == torn  # a reader never cuts
    with Run.open(tmp_path / "torn", write=True) as reopened:
        assert reopened.done == 2 and not units.read_bytes().endswith(b"steps")
        reopened.config = scripted_config()  # extend the run to the full length
        play_units(reopened)
    again = Run.open(tmp_path / "torn")
    assert [r["index"] for r in again.records] == [1, 2, 3, 4]
    assert scores(again) == scores(Run.open(tmp_path / "full"))


def test_existing_run_is_not_overwritten(tmp_path):
    play_run(tmp_path / "r", scripted_config(units=1))
    with pytest.raises(FileExistsError):
        Run.create(tmp_path / "r", scripted_config())


def test_one_writer_at_a_time_and_readers_beside_it(tmp_path):
    out = tmp_path / "r"
    play_run(out, scripted_config(units=1))
    with Run.open(out, write=True) as writer:
        with pytest.raises(RunBusyError, match="being written by another process"):
            Run.open(out, write=True)
        with pytest.raises(RunBusyError):
            Run.create_or_open(out, writer.config)
        assert Run.open(out).done == 1  # readers never wait
        with pytest.raises(ValueError, match="opened to read"):
            Run.open(out).write_summary({})
    Run.open(out, write=True).close()  # released with the writer


def test_a_resume_while_another_process_writes_the_run_is_refused_in_one_line(tmp_path):
    out = tmp_path / "r"
    Run.create(out, scripted_config(units=2)).close()  # created, nothing played yet
    with Run.open(out, write=True):  # another resume of it, still playing
        result = CliRunner().invoke(app, ["resume", str(out)], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and result.output.startswith("error: ") and "being written by another" in result.output
    assert result.output.count("\n") == 1
    assert Run.open(out).done == 0  # the refused resume appended nothing


def unit_indices(path: Path) -> list[int]:
    """The indices of the units on disk (a torn last line skipped)."""
    indices = []
    for line in RunDir(path).units.read_text().splitlines():
        try:
            indices.append(json.loads(line)["index"])
        except json.JSONDecodeError:
            continue
    return indices


def test_two_concurrent_resumes_never_duplicate_a_unit(tmp_path):
    """Two processes resume one directory: the first plays, the second says in one line that another process writes
    it and exits 2; every unit is on disk once, in order."""
    out = tmp_path / "r"
    config = scripted_config(env_options={"opponent": "probe", "rounds": 300}, units=12)
    Run.create(out, config).close()
    first = cli("resume", str(out))
    deadline = time.time() + 120
    while not unit_indices(out) and time.time() < deadline:  # the first resume holds the lock once it appends
        time.sleep(0.02)
    second = cli("resume", str(out))
    assert second.wait(timeout=120) == 2
    refused = " ".join(second.stdout.read().split())  # as one line, however the console wrapped it
    assert refused.startswith("error: ") and "being written by another process" in refused
    assert first.wait(timeout=300) == 0, first.stdout.read()
    assert unit_indices(out) == list(range(1, 13))


@pytest.mark.parametrize("suffix,compress", [(".gz", gzip.compress), (".xz", lzma.compress)])
def test_records_committed_compressed_are_read_like_any_others(tmp_path, suffix, compress):
    assert suffix in RunDir.PACKED
    play_run(tmp_path / "plain", scripted_config(units=2))
    packed = tmp_path / "packed"
    shutil.copytree(tmp_path / "plain", packed)
    units = RunDir(packed).units
    units.with_name(units.name + suffix).write_bytes(compress(units.read_bytes()))
    units.unlink()
    assert Run.open(packed).records == Run.open(tmp_path / "plain").records
