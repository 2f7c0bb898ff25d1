"""`ttlearn data prepare FAMILY`: build a task family's data set once into the cache, checksummed."""

from __future__ import annotations

import time

import typer

from ttlearn.cli.common import console, friendly, stage_bars

data_app = typer.Typer(help="Build the data sets of task families once into the cache.", no_args_is_help=True)


@data_app.command("prepare")
@friendly
def data_prepare(
    family: str = typer.Argument(..., help="Task family: sql (Spider-dev on SQLite) or tools (BFCL multi-turn)."),
) -> None:
    """Download and build a family's data into $TTLEARN_CACHE/data (default ~/.cache/ttlearn/data), checksummed."""
    from ttlearn.data.prepare import PREPARERS, describe_prepared

    if family not in PREPARERS:
        raise ValueError(f"no data to prepare for {family!r}; families: {', '.join(PREPARERS)}")
    start = time.perf_counter()
    with stage_bars() as report:
        directory = PREPARERS[family](progress=report)
    console.print(f"{describe_prepared(family, directory)} ({time.perf_counter() - start:.1f} s)")
