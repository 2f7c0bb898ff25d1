"""`ttlearn rejudge` of a crafted run (issue 41): the recorded options stay inside the environment's limits, and
SIGINT / SIGTERM end it at once, its sandboxed queries with it (no process of its outlives it).

The run is real: a recorded SQL run whose every answer is a recursive query that never ends (each is stopped at the
run's timeout), played on the small built-in database with a scripted model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import FakeLLM
from processes import descendants, running
from runhelp import play_run

from ttlearn.runs import RunConfig

ROOT = Path(__file__).resolve().parents[2]
FOREVER = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"


@pytest.fixture(scope="module")
def endless_run(tmp_path_factory) -> Path:
    """A finished SQL run of 3 units whose answers never end, recorded with a 300 ms timeout."""
    out = tmp_path_factory.mktemp("endless") / "run"
    config = RunConfig(
        env="sql", env_options={"dataset": "mini", "timeout_ms": 300, "prefill": False}, memory="none",
        player="qwen-coder", units=3, attempts=1,
    )  # fmt: skip
    play_run(out, config, llm_factory=lambda spec: FakeLLM(lambda prompt: f"```sql\n{FOREVER}\n```"))
    return out


def crafted(run: Path, where: Path, timeout_ms: int) -> Path:
    copy = where / "run"
    copy.mkdir()
    for path in run.iterdir():
        copy.joinpath(path.name).write_bytes(path.read_bytes())
    config = json.loads((copy / "run.json").read_text())
    config["env_options"]["timeout_ms"] = timeout_ms
    (copy / "run.json").write_text(json.dumps(config))
    return copy


def deliverable_sigint() -> None:
    """SIGINT back at its default in the child: a suite started in the background (`cmd &`) inherits it ignored, and
    a Python child started so ignores it too, which would test the shell, not ttlearn."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def rejudge(run: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ttlearn", "rejudge", str(run), "-e", "metric=strict"],
        env={**os.environ, **env, "PYTHONPATH": str(ROOT / "src")}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True, preexec_fn=deliverable_sigint,
    )  # fmt: skip


def test_a_recorded_timeout_past_the_environments_maximum_is_refused(endless_run, tmp_path):
    """A recorded timeout_ms of 10⁹ kept rejudge running past 60 s (each endless query ran for ever): now the
    environment refuses it in one line, before any query runs."""
    run = crafted(endless_run, tmp_path, 10**9)
    started = time.monotonic()
    process = rejudge(run, {})
    try:
        output, _ = process.communicate(timeout=60)
    finally:
        os.killpg(process.pid, signal.SIGKILL) if process.poll() is None else None
    assert process.returncode == 2 and "timeout_ms" in output, output
    assert [line for line in output.splitlines() if line.startswith("error:")] == [output.strip()]
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_rejudge_and_its_sandboxes_at_once(endless_run, tmp_path, sig):
    """At the environment's maximum each endless query runs 30 s in its sandbox. A SIGTERM left the two sandbox
    processes running (under PID 1, with a CPU limit of 10⁶ s once); after a SIGINT ttlearn itself lived on."""
    run = crafted(endless_run, tmp_path, 30_000)  # the maximum (SQLEnv.MAX_TIMEOUT_MS)
    process = rejudge(run, {})
    try:
        deadline, below = time.monotonic() + 60, set()
        while time.monotonic() < deadline and not below:  # until a query's sandbox runs
            time.sleep(0.2)
            below = descendants(process.pid)
        assert below, "no sandbox was started"
        time.sleep(0.5)
        below |= descendants(process.pid)
        os.kill(process.pid, sig)
        process.communicate(timeout=10)  # at once, not after the query's 30 s
        time.sleep(0.5)
        assert not [pid for pid in below if running(pid)], "a sandbox process outlived rejudge"
        assert process.returncode != 0
    finally:
        for pid in {process.pid, *below} if process.poll() is None else below:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_a_lock_that_is_a_fifo_is_refused_at_once(endless_run, tmp_path):
    """A `.lock` that is a FIFO hung rejudge for ever: the lock was opened to write without O_NONBLOCK, which waits
    for a reader. It is now refused like any file of a run directory that is not a regular one."""
    run = crafted(endless_run, tmp_path, 300)
    (run / ".lock").unlink(missing_ok=True)
    os.mkfifo(run / ".lock")
    process = rejudge(run, {"COLUMNS": "1000"})  # the error's one line unwrapped
    try:
        output, _ = process.communicate(timeout=30)
    finally:
        os.killpg(process.pid, signal.SIGKILL) if process.poll() is None else None
    assert process.returncode == 2 and "not a regular file" in output, output
    assert [line for line in output.splitlines() if line.startswith("error:")] == [output.strip()]
