"""`ttlearn results`: the measured table of docs/results.md, rebuilt from the result folders under results/."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ttlearn.cli.common import console
from ttlearn.eval.results import render, replace_table
from ttlearn.untrusted import read_text, write_atomic


def results(
    root: Path = typer.Option(Path("results"), help="The results folder (its table.json lists the rows)."),
    write: Optional[Path] = typer.Option(
        None, help="Replace the table between the markers of this file (docs/results.md)."
    ),
) -> None:
    """Print the measured table from results/ alone, or write it into the results page."""
    table = render(root)
    if write is None:
        console.print(table, markup=False, highlight=False, soft_wrap=True)
        return
    # FILE is read as any named file is (a link, FIFO or device refused, the read bounded) and replaced, never
    # written through: a README that links elsewhere would otherwise rewrite what it links to
    write_atomic(write, replace_table(read_text(write), table))
    console.print(f"rebuilt the results table of {write} from {root}")
