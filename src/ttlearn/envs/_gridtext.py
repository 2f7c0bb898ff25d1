"""Text helpers shared by the grid puzzles (Sokoban, Minesweeper): numbered boards and the answer part of a reply."""

from __future__ import annotations

import re
from collections.abc import Sequence

_TAGGED = re.compile(r"<(action|answer)>(.*?)</\1>", re.IGNORECASE | re.DOTALL)


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


def answer_part(text: str) -> str:
    """The content of the last <action>…</action> or <answer>…</answer> block, else the whole reply.

    Models that reason before answering mention moves they reject; the tagged block is what they chose.
    """
    blocks = _TAGGED.findall(text)
    return blocks[-1][1] if blocks else text
