"""For tests: a run played in one call (`ttlearn.run`, what `ttlearn run` does without the CLI), its records, and
the CLI in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import ttlearn
from ttlearn.eval.summary import RunSummary
from ttlearn.runs import Run, RunConfig


def scripted_config(**overrides: Any) -> RunConfig:
    """A session of 4 RPS games of 10 rounds against cycle3 by the scripted learner with a history memory: a run that
    plays in a second, with a memory and a player that both carry over."""
    base: dict[str, Any] = {
        "env": "rps",
        "env_options": {"opponent": "cycle3", "rounds": 10},
        "memory": "history",
        "player": "scripted:learner",
        "units": 4,
        "attempts": 1,
        "carry_memory": True,
        "seed": 3,
    }
    return RunConfig(**{**base, **overrides})


def play_run(out: Path, config: RunConfig | None = None, **options: Any) -> RunSummary:
    """`ttlearn.run(config, out, **options)`, the Python entry point, with the directory first as the tests name it."""
    return ttlearn.run(config, out, **options)


def unit_records(out: Path) -> list[dict[str, Any]]:
    """The finished unit records of the run at `out`, read as a reader does (a torn tail skipped, never cut)."""
    return Run.open(out).records


def cli(*args: str, **kwargs: Any) -> subprocess.Popen:
    """`python -m ttlearn ARGS` in a child process of this checkout, its output merged into one text pipe."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    return subprocess.Popen(
        [sys.executable, "-m", "ttlearn", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )
