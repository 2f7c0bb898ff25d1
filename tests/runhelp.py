"""Playing a run in one call, for tests: what `ttlearn run` does without the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttlearn.rollout.run import play, prepare
from ttlearn.runs import Run, RunConfig


def play_run(out: Path, config: RunConfig | None = None, **options: Any) -> dict[str, Any]:
    """`prepare` then `play` (`options`: those of `play`); returns the summary."""
    return play(prepare(out, config, options.get("concurrency") or 1), **options)


def unit_records(out: Path, *, repair: bool = True) -> list[dict[str, Any]]:
    """The finished unit records of the run at `out`."""
    return Run.open(out, repair=repair).records
