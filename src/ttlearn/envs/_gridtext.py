"""Text helpers shared by the grid puzzles (Sokoban, Minesweeper): numbered boards."""

from __future__ import annotations

from collections.abc import Sequence


def render_grid(symbols: Sequence[Sequence[str]]) -> str:
    """A board with 1-indexed column numbers on top and row numbers on the left, one symbol per cell.

    Numbers are printed because small models cannot count cells: "row 3, column 4" must be readable off the text.
    """
    width = len(str(max(len(symbols), len(symbols[0]) if symbols else 0)))
    header = " " * (width + 1) + " ".join(str(c).rjust(width) for c in range(1, len(symbols[0]) + 1))
    lines = [header]
    for r, row in enumerate(symbols, start=1):
        lines.append(str(r).rjust(width) + " " + " ".join(s.rjust(width) for s in row))
    return "\n".join(lines)
