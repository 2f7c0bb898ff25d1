"""`ttlearn results`: the README's measured table, rebuilt from the result folders under results/."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ttlearn.cli.common import console
from ttlearn.eval.results import render, replace_table


def results(
    root: Path = typer.Option(Path("results"), help="The results folder (its table.json lists the rows)."),
    write: Optional[Path] = typer.Option(None, help="Replace the table between the markers of this file (README.md)."),
) -> None:
    """Print the measured table from results/ alone, or write it into the README."""
    table = render(root)
    if write is None:
        console.print(table, markup=False, highlight=False, soft_wrap=True)
        return
    write.write_text(replace_table(write.read_text(), table))
    console.print(f"rebuilt the results table of {write} from {root}")
