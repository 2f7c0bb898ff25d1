"""Minesweeper, the LaMer testbed: reveal every safe cell of a small board in a few turns.

The board is generated around a first click that opens a cascade (no mine on or next to it) and that click is
already played when the episode starts. The exact logic here enumerates every mine layout of the frontier consistent
with the numbers shown, weighting each by the ways to place the remaining mines elsewhere, so it knows each hidden
cell's true mine probability under the uniform prior. That one computation backs the no-guess checker (are there
always provably safe cells?), the oracle (reveal a safe cell, preferring one sure to cascade) and the ceiling report.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import comb
from typing import Any

from ttlearn.envs._gridtext import render_grid
from ttlearn.envs.base import Env, answer_part
from ttlearn.types import Observation, StepResult

Cell = tuple[int, int]
_MAX_LAYOUT_TRIES = 1000
LEGEND = "? hidden, . empty (no adjacent mine), 1-8 adjacent mines, X the mine you hit"


@dataclass(frozen=True)
class Board:
    rows: int
    cols: int
    mines: frozenset[Cell]

    def cells(self) -> list[Cell]:
        return [(r, c) for r in range(self.rows) for c in range(self.cols)]

    def neighbours(self, cell: Cell) -> list[Cell]:
        r, c = cell
        return [
            (r + dr, c + dc)
            for dr in (-1, 0, 1)
            for dc in (-1, 0, 1)
            if (dr or dc) and 0 <= r + dr < self.rows and 0 <= c + dc < self.cols
        ]

    def count(self, cell: Cell) -> int:
        return sum(n in self.mines for n in self.neighbours(cell))

    def opened_by(self, cell: Cell) -> set[Cell]:
        """The cells a click on a safe `cell` reveals: itself, and through every 0 it reaches, all their neighbours."""
        opened, frontier = {cell}, [cell]
        while frontier:
            current = frontier.pop()
            if self.count(current) == 0:
                for n in self.neighbours(current):
                    if n not in opened:
                        opened.add(n)
                        frontier.append(n)
        return opened


def generate_board(rng: random.Random, rows: int, cols: int, mines: int) -> tuple[Board, Cell]:
    """A uniform random first click, and `mines` mines uniform among the cells not on or next to it (so it cascades).

    Layouts where that first cascade already clears the board are redrawn: the episode would be over before it began.
    """
    empty = Board(rows, cols, frozenset())
    first = rng.choice(empty.cells())
    allowed = [c for c in empty.cells() if c not in {first, *empty.neighbours(first)}]
    for _ in range(_MAX_LAYOUT_TRIES):
        board = Board(rows, cols, frozenset(rng.sample(allowed, mines)))
        if len(board.opened_by(first)) + mines < rows * cols:
            return board, first
    raise RuntimeError(f"every {rows}x{cols} layout with {mines} mines is cleared by the first click; add mines")


def reveal_reward(already_revealed: bool, hit_mine: bool, opened: int, won: bool) -> float:
    """LaMer's reward for one reveal action.

    r = −1 if the cell was already revealed (ineffective), −0.1 if it is a mine (the episode ends), else
    +0.5 for a single cell (opened = 1) or +2 for a cascade (opened > 1), plus +10 when this reveal wins the game.
    """
    if already_revealed:
        return -1.0
    if hit_mine:
        return -0.1
    return (0.5 if opened == 1 else 2.0) + (10.0 if won else 0.0)


# -- exact logic ----------------------------------------------------------------------------------------------


def _frontier_layouts(constraints: list[tuple[list[Cell], int]], mines: int) -> Iterator[frozenset[Cell]]:
    """Every set of mines on the constrained cells that meets each (cells, count) constraint, by backtracking."""
    order: list[Cell] = []
    for cells, _ in constraints:
        order.extend(c for c in cells if c not in order)
    touching: dict[Cell, list[int]] = {cell: [] for cell in order}
    for index, (cells, _) in enumerate(constraints):
        for cell in cells:
            touching[cell].append(index)
    needed = [count for _, count in constraints]
    open_cells = [len(cells) for cells, _ in constraints]
    chosen: list[Cell] = []

    def extend(position: int) -> Iterator[frozenset[Cell]]:
        if position == len(order):
            yield frozenset(chosen)
            return
        cell = order[position]
        for is_mine in (False, True):
            if is_mine and len(chosen) == mines:
                continue
            for k in touching[cell]:
                open_cells[k] -= 1
                needed[k] -= is_mine
            if all(0 <= needed[k] <= open_cells[k] for k in touching[cell]):
                if is_mine:
                    chosen.append(cell)
                yield from extend(position + 1)
                if is_mine:
                    chosen.pop()
            for k in touching[cell]:
                open_cells[k] += 1
                needed[k] += is_mine

    return extend(0)


@dataclass(frozen=True)
class Odds:
    """Exact chances for the hidden cells, given what is revealed and the total mine count (uniform prior).

    `mine[c]` = P(c is a mine); `opening[c]` = P(c and all its hidden neighbours are safe), i.e. that revealing c
    cascades (or, with no hidden neighbour, simply that it is safe).
    """

    mine: dict[Cell, Fraction]
    opening: dict[Cell, Fraction]

    def safe(self) -> list[Cell]:
        return sorted(c for c, p in self.mine.items() if p == 0)


def odds(rows: int, cols: int, mines: int, revealed: Mapping[Cell, int]) -> Odds:
    """Enumerate frontier layouts; each with k mines stands for C(I, M − k) layouts of the I unconstrained cells.

    For a set S of hidden cells that must all be safe, split into frontier part F and unconstrained part J:
    P(S safe) = Σ_layouts [layout ∩ F = ∅] · C(I − |J|, M − k) / Σ_layouts C(I, M − k).
    """
    board = Board(rows, cols, frozenset())
    hidden = [c for c in board.cells() if c not in revealed]
    constraints = []
    for cell, count in sorted(revealed.items()):
        cells = [n for n in board.neighbours(cell) if n not in revealed]
        if cells:
            constraints.append((cells, count))
    frontier = {c for cells, _ in constraints for c in cells}
    loose = len(hidden) - len(frontier)
    layouts = [(layout, len(layout)) for layout in _frontier_layouts(constraints, mines)]
    total = sum(comb(loose, mines - k) for _, k in layouts)
    if total == 0:
        raise ValueError("no mine layout is consistent with the revealed numbers")

    def all_safe(cells: list[Cell]) -> Fraction:
        on_frontier = {c for c in cells if c in frontier}
        off_frontier = len(cells) - len(on_frontier)
        ways = sum(comb(loose - off_frontier, mines - k) for layout, k in layouts if not layout & on_frontier)
        return Fraction(ways, total)

    mine = {c: 1 - all_safe([c]) for c in hidden}
    opening = {c: all_safe([c, *(n for n in board.neighbours(c) if n not in revealed)]) for c in hidden}
    return Odds(mine, opening)


def best_reveal(found: Odds) -> Cell:
    """The least likely mine (a provably safe cell when there is one); ties go to the likeliest cascade, then to
    reading order. Preferring cascades saves turns, which matters with LaMer's 7-turn budget."""
    return min(found.mine, key=lambda c: (found.mine[c], -found.opening[c], c))


def solvable_without_guessing(board: Board, first_click: Cell) -> bool:
    """Whether logic alone clears the board after `first_click`: repeatedly reveal every provably safe cell.

    Uses the exact odds (the total mine count included), so "provably safe" means safe in every consistent layout.
    """
    revealed = {c: board.count(c) for c in board.opened_by(first_click)}
    goal = board.rows * board.cols - len(board.mines)
    while len(revealed) < goal:
        safe = odds(board.rows, board.cols, len(board.mines), revealed).safe()
        if not safe:
            return False
        for cell in safe:
            revealed.update((c, board.count(c)) for c in board.opened_by(cell))
    return True


def min_reveals(board: Board, revealed: set[Cell]) -> int:
    """The fewest reveals that clear the rest with full knowledge (the board's remaining "3BV").

    One click per hidden opening (a connected group of 0 cells, which opens whole) plus one per hidden numbered
    safe cell that borders no 0 cell (nothing else reveals it).
    """
    hidden_safe = [c for c in board.cells() if c not in revealed and c not in board.mines]
    zeros = {c for c in hidden_safe if board.count(c) == 0}
    openings, seen = 0, set()
    for cell in sorted(zeros):
        if cell not in seen:
            openings += 1
            seen |= {c for c in board.opened_by(cell) if c in zeros}
    isolated = sum(
        1
        for c in hidden_safe
        if c not in zeros and not any(n not in board.mines and board.count(n) == 0 for n in board.neighbours(c))
    )
    return openings + isolated


# -- text -----------------------------------------------------------------------------------------------------

_ROW_COL = re.compile(r"row\D{0,3}?(\d+)\D{1,20}?col(?:umn)?\D{0,3}?(\d+)", re.IGNORECASE)
_PAIR = re.compile(r"(\d+)\s*[,;:\s]\s*(\d+)")


def parse_cell(text: str, rows: int, cols: int) -> Cell | None:
    """The 0-indexed cell a reply names, from "reveal 3 4", "(3, 4)", "row 3 col 4", … (1-indexed), or None."""
    part = answer_part(text)
    match = _ROW_COL.search(part) or _PAIR.search(part)
    if match is None:
        return None
    r, c = int(match.group(1)), int(match.group(2))
    return (r - 1, c - 1) if 1 <= r <= rows and 1 <= c <= cols else None


def action_for(cell: Cell) -> str:
    return f"reveal {cell[0] + 1} {cell[1] + 1}"


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


class Minesweeper(Env):
    """Reveal all safe cells within `turns` reveals; the first click is already played and opened a cascade.

    `step` accepts "reveal R C" for any cell on the board (1-indexed); revealing a revealed cell is the ineffective
    action LaMer penalises (−1). `legal_actions()` lists every cell, revealed ones included, so a player that picks
    among legal actions (choice scoring, the random fallback) can make that mistake as a free-text player can, and
    the penalty teaches. A reply that names no cell passes the turn for `invalid_reward` (LaMer: −0.1). A mine ends
    the attempt.
    """

    trajectory_discount = 0.6
    """github.com/mlbio-epfl/LaMer, examples/minesweeper/lamer_minesweeper_qwen3_4b.sh: traj_gamma 0.6; the paper's
    ablation reads "Minesweeper needs a higher γ_traj", which this released value does not show (docs/lamer.md)."""

    def __init__(
        self, rows: int = 6, cols: int = 6, mines: int = 3, turns: int = 7, invalid_reward: float = -0.1, seed: int = 0
    ) -> None:
        _check(3 <= rows <= 16 and 3 <= cols <= 16, f"rows and cols must be 3-16, got {rows}x{cols}")
        room = rows * cols - 9
        _check(1 <= mines <= room, f"mines must be 1-{room} on a {rows}x{cols} board (first click keeps 9 clear)")
        _check(turns >= 1, f"turns must be >= 1, got {turns}")
        self.rows, self.cols, self.mines, self.turns, self.seed = rows, cols, mines, turns, seed
        self.invalid_reward = invalid_reward
        self.reset(seed)

    # -- instance ---------------------------------------------------------------------------------------------
    def reset(self, seed: int) -> Observation:
        board, first = generate_board(random.Random(seed), self.rows, self.cols, self.mines)
        return self.load_board(board, first)

    def load_board(self, board: Board, first_click: Cell) -> Observation:
        """Play a given board (hand-made ones included) from a safe first click."""
        _check(
            (board.rows, board.cols, len(board.mines)) == (self.rows, self.cols, self.mines),
            f"board is {board.rows}x{board.cols} with {len(board.mines)} mines; this environment plays "
            f"{self.rows}x{self.cols} with {self.mines}",
        )
        _check(first_click not in board.mines, "the first click must be safe")
        self.board, self.first_click = board, first_click
        self.start = frozenset(board.opened_by(first_click))
        self.no_guess = solvable_without_guessing(board, first_click)
        self.min_reveals = min_reveals(board, set(self.start))
        return self.restart()

    def restart(self) -> Observation:
        self.revealed: set[Cell] = set(self.start)
        self.exploded: Cell | None = None
        self.turn = 0
        self.total = 0.0
        self.log: list[str] = []
        return self._observe()

    # -- play -------------------------------------------------------------------------------------------------
    @property
    def won(self) -> bool:
        return len(self.revealed) + len(self.board.mines) == self.rows * self.cols

    @property
    def done(self) -> bool:
        return self.won or self.exploded is not None or self.turn >= self.turns

    def legal_actions(self) -> tuple[str, ...]:
        return tuple(action_for(c) for c in self.board.cells())

    def step(self, action: str) -> StepResult:
        _check(not self.done, "the attempt is over; call restart() or reset()")
        match = re.fullmatch(r"\s*reveal\s+(\d+)\s+(\d+)\s*", action.lower())
        if match is None:
            raise ValueError(f"expected 'reveal R C' (1-indexed), got {action!r}")
        r, c = int(match.group(1)) - 1, int(match.group(2)) - 1
        _check(0 <= r < self.rows and 0 <= c < self.cols, f"{action!r} is off the {self.rows}x{self.cols} board")
        cell = (r, c)
        already, hit = cell in self.revealed, cell in self.board.mines
        opened = set() if already or hit else self.board.opened_by(cell) - self.revealed
        self.revealed |= opened
        if hit:
            self.exploded = cell
        reward = reveal_reward(already, hit, len(opened), self.won)
        outcome = "already revealed" if already else "MINE" if hit else f"{len(opened)} cell(s) opened"
        info = {"opened": len(opened), "ineffective": already, "mine": hit}
        return self._end_turn(reward, f"{action_for(cell)} -> {outcome}", info)

    def invalid_step(self, reply: str) -> StepResult:
        """No reveal: the turn passes and costs `invalid_reward`."""
        _check(not self.done, "the attempt is over; call restart() or reset()")
        info = {"opened": 0, "ineffective": False, "mine": False, "invalid": True}
        return self._end_turn(self.invalid_reward, "no valid reveal", info)

    def _end_turn(self, reward: float, outcome: str, info: dict[str, Any]) -> StepResult:
        self.turn += 1
        self.total = round(self.total + reward, 6)
        self.log.append(f"Turn {self.turn}: {outcome}, reward {reward:+g}")
        return StepResult(self._observe(), reward, self.done, {**info, "won": self.won})

    def parse_action(self, text: str, legal_actions: Sequence[str]) -> str | None:
        """The cell a free-text reply names, as "reveal R C"; any on-board cell (revealing a shown one is penalised)."""
        cell = parse_cell(text, self.rows, self.cols)
        return None if cell is None else action_for(cell)

    def oracle_action(self, seed: int = 0) -> str:
        """A provably safe cell (likeliest to cascade first); when none exists, the least likely mine."""
        known = {c: self.board.count(c) for c in self.revealed}
        return action_for(best_reveal(odds(self.rows, self.cols, self.mines, known)))

    def state_key(self) -> str:
        return "revealed " + " ".join(f"{r + 1},{c + 1}" for r, c in sorted(self.revealed))

    # -- reporting --------------------------------------------------------------------------------------------
    def score(self) -> float:
        return self.total

    def success(self) -> bool:
        return self.won

    def describe(self) -> str:
        return (
            f"Minesweeper on a {self.rows}x{self.cols} board with {self.mines} mines. A number is how many of the 8 "
            "surrounding cells hold a mine; an empty cell (.) has none, and revealing one opens its neighbours too. "
            'Reveal every safe cell without hitting a mine. Answer "reveal R C" with row R and column C as numbered '
            f"on the board. You have {self.turns} reveals. Rewards: +0.5 for revealing a single cell, +2 for a "
            "reveal that opens several, +10 for clearing the board, -0.1 for hitting a mine (game over), "
            f"-1 for revealing a cell that is already revealed, {self.invalid_reward:g} for an answer that names no "
            f"cell (the turn passes).\nLegend: {LEGEND}."
        )

    def task(self) -> str:
        return f"Minesweeper board ({self.mines} mines):\n{self._render(self.start)}\nLegend: {LEGEND}."

    def _render(self, revealed: set[Cell] | frozenset[Cell]) -> str:
        def symbol(cell: Cell) -> str:
            if cell == self.exploded:
                return "X"
            if cell not in revealed:
                return "?"
            return str(self.board.count(cell) or ".")

        return render_grid([[symbol((r, c)) for c in range(self.cols)] for r in range(self.rows)])

    def _observe(self) -> Observation:
        lines = [
            self._render(self.revealed),
            f"Legend: {LEGEND}.",
            (
                f"Mines: {self.mines}. Hidden cells: {self.rows * self.cols - len(self.revealed)}. "
                f"Turn {min(self.turn + 1, self.turns)} of {self.turns}."
            ),
        ]
        if self.log:
            lines.append(f"Last: {self.log[-1]}")
        data: dict[str, Any] = {
            "revealed": {f"{r + 1},{c + 1}": self.board.count((r, c)) for r, c in sorted(self.revealed)},
            "mines": self.mines,
            "turn": self.turn,
        }
        return Observation("\n".join(lines), self.legal_actions(), data)

    def transcript(self) -> str:
        if self.won:
            outcome = f"Won in {self.turn} reveals."
        elif self.exploded is not None:
            outcome = f"Lost: hit the mine at row {self.exploded[0] + 1}, column {self.exploded[1] + 1}."
        else:
            hidden_safe = self.rows * self.cols - self.mines - len(self.revealed)
            outcome = f"Out of turns with {hidden_safe} safe cell(s) still hidden."
        return "\n".join([self.task(), *self.log, f"{outcome} Score {self.total:g}."])

    def instance_stats(self) -> dict[str, Any]:
        return {"min_reveals": self.min_reveals, "no_guess": self.no_guess}
