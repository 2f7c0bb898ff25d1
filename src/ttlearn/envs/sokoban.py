"""Sokoban, the LaMer testbed: push every box onto a target in a few turns of up to three moves each.

Levels come from our own generator. It carves a room by a random walk, puts the boxes on their targets, and then
explores *every* way to pull them back: a breadth-first search over (player, boxes) states with the moves reversed.
That search labels each state with its exact **move-optimal** solution length (every step counts, pushes or not,
matching LaMer's "solvable in 5–21 moves" and the 7 × 3 action budget), so the generator picks a level of a wanted
length directly, and the label is the instance's ceiling (`optimal_length`). A forward breadth-first solver plans from
any state for the oracle and, in the tests, re-derives the label independently.
"""

from __future__ import annotations

import random
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ttlearn.envs._gridtext import render_grid
from ttlearn.envs.base import Env, answer_part
from ttlearn.types import Observation, StepResult

Cell = tuple[int, int]
DIRECTIONS: dict[str, Cell] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
LEGEND = "# wall, _ floor, . target, $ box, * box on target, @ player, + player on target"
_MAX_ROOM_TRIES = 2000


@dataclass(frozen=True)
class Room:
    """The fixed part of a level: a square of `size` cells, its walls (the border included) and the targets."""

    size: int
    walls: frozenset[Cell]
    targets: frozenset[Cell]

    def floor(self) -> list[Cell]:
        return [(r, c) for r in range(self.size) for c in range(self.size) if (r, c) not in self.walls]


@dataclass(frozen=True)
class State:
    """The moving part: where the player and the boxes are."""

    player: Cell
    boxes: frozenset[Cell]


def _shift(cell: Cell, delta: Cell, times: int = 1) -> Cell:
    return (cell[0] + times * delta[0], cell[1] + times * delta[1])


def boxes_on_targets(room: Room, state: State) -> int:
    return len(state.boxes & room.targets)


def is_solved(room: Room, state: State) -> bool:
    return state.boxes == room.targets


def move(room: Room, state: State, direction: str) -> State | None:
    """The state after one move, or None when a wall or a box that cannot be pushed blocks it."""
    delta = DIRECTIONS[direction]
    ahead = _shift(state.player, delta)
    if ahead in room.walls:
        return None
    if ahead not in state.boxes:
        return State(ahead, state.boxes)
    beyond = _shift(ahead, delta)
    if beyond in room.walls or beyond in state.boxes:
        return None
    return State(ahead, (state.boxes - {ahead}) | {beyond})


def move_reward(on_target_before: int, on_target_after: int, solved: bool) -> float:
    """LaMer's per-move reward: r = −0.1 + (b_after − b_before) + 10·[solved].

    b counts boxes on targets, so pushing a box onto a target earns +1 and off one −1. A blocked move leaves the state
    unchanged (b_after = b_before) and costs the step penalty only.
    """
    return -0.1 + (on_target_after - on_target_before) + (10.0 if solved else 0.0)


def solve(room: Room, start: State) -> list[str] | None:
    """A move-optimal plan from `start` by forward breadth-first search, or None when no plan exists (deadlock)."""
    parent: dict[State, tuple[State, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if is_solved(room, state):
            plan: list[str] = []
            link = parent[state]
            while link is not None:
                state, direction = link
                plan.append(direction)
                link = parent[state]
            return plan[::-1]
        for direction in DIRECTIONS:
            nxt = move(room, state, direction)
            if nxt is not None and nxt not in parent:
                parent[nxt] = (state, direction)
                queue.append(nxt)
    return None


def distances_to_solution(room: Room) -> dict[State, int]:
    """Move-optimal solution length of every state from which the room can be solved (reverse breadth-first search).

    The search starts from every solved state (boxes on targets, player on any free floor cell) and undoes moves: the
    player steps back into a free cell, optionally pulling the box it was standing against. Undoing a move costs one
    move, so the depth at which a state is first met is its exact forward distance to the nearest solved state.
    """
    solved = [State(cell, room.targets) for cell in room.floor() if cell not in room.targets]
    dist = {state: 0 for state in solved}
    queue = deque(solved)
    while queue:
        state = queue.popleft()
        for delta in DIRECTIONS.values():
            back = _shift(state.player, delta)
            if back in room.walls or back in state.boxes:
                continue
            successors = [State(back, state.boxes)]
            pulled = _shift(state.player, delta, -1)
            if pulled in state.boxes:
                successors.append(State(back, (state.boxes - {pulled}) | {state.player}))
            for prev in successors:
                if prev not in dist:
                    dist[prev] = dist[state] + 1
                    queue.append(prev)
    return dist


def carve_room(rng: random.Random, size: int, boxes: int) -> Room:
    """A walled square whose floor is a random walk covering 55–85 % of the interior, with `boxes` targets on it."""
    interior = [(r, c) for r in range(1, size - 1) for c in range(1, size - 1)]
    wanted = max(2 * boxes + 3, round(len(interior) * rng.uniform(0.55, 0.85)))
    cell = rng.choice(interior)
    floor = {cell}
    steps = list(DIRECTIONS.values())
    while len(floor) < wanted:
        nxt = _shift(cell, rng.choice(steps))
        if 1 <= nxt[0] <= size - 2 and 1 <= nxt[1] <= size - 2:
            cell = nxt
            floor.add(cell)
    walls = frozenset((r, c) for r in range(size) for c in range(size)) - floor
    return Room(size, walls, frozenset(rng.sample(sorted(floor), boxes)))


def generate_level(
    rng: random.Random, size: int, boxes: int, min_moves: int, max_moves: int
) -> tuple[Room, State, int]:
    """A level whose move-optimal length is drawn uniformly from [min_moves, max_moves], with that length.

    The length is drawn first; rooms that offer no state of that length are rejected, and a state of that length is
    picked uniformly in the first room that does. Drawing per room instead would favour short levels, since every
    room has short ones and few have long ones.
    """
    length = rng.randint(min_moves, max_moves)
    for _ in range(_MAX_ROOM_TRIES):
        room = carve_room(rng, size, boxes)
        candidates = [state for state, d in distances_to_solution(room).items() if d == length]
        if candidates:
            candidates.sort(key=lambda s: (s.player, sorted(s.boxes)))
            return room, rng.choice(candidates), length
    raise RuntimeError(
        f"no {size}x{size} room with {boxes} boxes has a {length}-move level ({_MAX_ROOM_TRIES} rooms tried); "
        "lower max_moves"
    )


def render(room: Room, state: State) -> str:
    """The board with row/column numbers; symbols as in `LEGEND` (the usual Sokoban notation)."""
    symbols = []
    for r in range(room.size):
        row = []
        for c in range(room.size):
            cell, target = (r, c), (r, c) in room.targets
            if cell in room.walls:
                row.append("#")
            elif cell in state.boxes:
                row.append("*" if target else "$")
            elif cell == state.player:
                row.append("+" if target else "@")
            else:
                row.append("." if target else "_")
        symbols.append(row)
    return render_grid(symbols)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


class Sokoban(Env):
    """Push all boxes onto the targets within `turns` turns of up to `actions_per_turn` moves.

    `step` takes one move or a comma/space separated list ("up, left, left"); moves into walls or unpushable boxes
    are penalised and leave the state unchanged. A reply that names no move passes the turn for `invalid_reward`
    (LaMer: −0.1). The attempt ends when solved or after `turns` turns.
    """

    trajectory_discount = 0.9
    """github.com/mlbio-epfl/LaMer, examples/sokoban/lamer_sokoban_qwen3_4b.sh: traj_gamma 0.9 (docs/lamer.md)."""

    def __init__(
        self,
        size: int = 6,
        boxes: int = 2,
        min_moves: int = 5,
        max_moves: int = 21,
        turns: int = 7,
        actions_per_turn: int = 3,
        invalid_reward: float = -0.1,
        seed: int = 0,
    ) -> None:
        _check(5 <= size <= 9, f"size must be 5-9 (the solver enumerates all states), got {size}")
        _check(1 <= boxes <= 3, f"boxes must be 1-3, got {boxes}")
        _check((size - 2) ** 2 >= 2 * boxes + 3, f"a {size}x{size} room has no space for {boxes} boxes")
        _check(1 <= min_moves <= max_moves, f"need 1 <= min_moves <= max_moves, got {min_moves}, {max_moves}")
        _check(turns >= 1, f"turns must be >= 1, got {turns}")
        _check(actions_per_turn >= 1, f"actions_per_turn must be >= 1, got {actions_per_turn}")
        self.size, self.boxes, self.min_moves, self.max_moves = size, boxes, min_moves, max_moves
        self.turns, self.actions_per_turn, self.seed = turns, actions_per_turn, seed
        self.invalid_reward = invalid_reward
        self.reset(seed)

    # -- instance ---------------------------------------------------------------------------------------------
    def reset(self, seed: int) -> Observation:
        room, start, length = generate_level(random.Random(seed), self.size, self.boxes, self.min_moves, self.max_moves)
        return self.load_level(room, start, optimal_length=length)

    def load_level(self, room: Room, start: State, *, optimal_length: int | None = None) -> Observation:
        """Play a given level (hand-made ones included); its optimal length is searched when not given."""
        if optimal_length is None:
            plan = solve(room, start)
            if plan is None:
                raise ValueError("this level cannot be solved")
            optimal_length = len(plan)
        self.room, self.start, self.optimal_length = room, start, optimal_length
        return self.restart()

    def restart(self) -> Observation:
        self.state = self.start
        self.turn = 0
        self.total = 0.0
        self.moves_made = 0
        self.log: list[str] = []
        return self._observe()

    # -- play -------------------------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return is_solved(self.room, self.state) or self.turn >= self.turns

    def legal_actions(self) -> tuple[str, ...]:
        return tuple(DIRECTIONS)

    def _moves(self, action: str) -> list[str]:
        moves = [m for m in re.split(r"[,\s]+", action.strip().lower()) if m]
        _check(bool(moves), f"empty action: give 1 to {self.actions_per_turn} of {', '.join(DIRECTIONS)}")
        unknown = [m for m in moves if m not in DIRECTIONS]
        _check(not unknown, f"unknown move(s) {', '.join(unknown)}; use {', '.join(DIRECTIONS)}")
        _check(len(moves) <= self.actions_per_turn, f"{len(moves)} moves given, at most {self.actions_per_turn}")
        return moves

    def step(self, action: str) -> StepResult:
        _check(not self.done, "the attempt is over; call restart() or reset()")
        reward, outcomes, blocked = 0.0, [], 0
        for direction in self._moves(action):
            before = boxes_on_targets(self.room, self.state)
            nxt = move(self.room, self.state, direction)
            if nxt is None:
                blocked += 1
                outcomes.append(f"{direction} (blocked)")
            else:
                pushed = nxt.boxes != self.state.boxes
                self.state = nxt
                outcomes.append(f"{direction} ({'pushed' if pushed else 'moved'})")
            self.moves_made += 1
            reward += move_reward(before, boxes_on_targets(self.room, self.state), is_solved(self.room, self.state))
            if is_solved(self.room, self.state):
                break
        return self._end_turn(reward, ", ".join(outcomes), {"moves": outcomes, "blocked": blocked})

    def invalid_step(self, reply: str) -> StepResult:
        """No move: the turn passes and costs `invalid_reward`."""
        _check(not self.done, "the attempt is over; call restart() or reset()")
        return self._end_turn(self.invalid_reward, "no valid move", {"moves": [], "blocked": 0, "invalid": True})

    def _end_turn(self, reward: float, outcome: str, info: dict[str, Any]) -> StepResult:
        self.turn += 1
        reward = round(reward, 6)
        self.total = round(self.total + reward, 6)
        self.log.append(f"Turn {self.turn}: {outcome} -> reward {reward:+g}")
        info = {**info, "solved": is_solved(self.room, self.state)}
        return StepResult(self._observe(), reward, self.done, info)

    def parse_action(self, text: str, legal_actions: Sequence[str]) -> str | None:
        """The first `actions_per_turn` moves named in a free-text reply (its tagged answer if any), or None."""
        words = "|".join(re.escape(a) for a in legal_actions)
        moves = re.findall(rf"\b({words})\b", answer_part(text).lower()) if words else []
        return ", ".join(moves[: self.actions_per_turn]) or None

    def oracle_action(self, seed: int = 0) -> str:
        """The next moves (up to one turn's worth) of a move-optimal plan from the current state.

        From a deadlock no plan exists; the oracle then makes the first unblocked move, so it still plays legally.
        """
        plan = solve(self.room, self.state)
        if plan is None:
            return next((d for d in DIRECTIONS if move(self.room, self.state, d) is not None), "up")
        return ", ".join(plan[: self.actions_per_turn])

    def state_key(self) -> str:
        boxes = " ".join(f"{r},{c}" for r, c in sorted(self.state.boxes))
        return f"player {self.state.player[0]},{self.state.player[1]} boxes {boxes}"

    # -- reporting --------------------------------------------------------------------------------------------
    def score(self) -> float:
        return self.total

    def success(self) -> bool:
        return is_solved(self.room, self.state)

    def describe(self) -> str:
        return (
            "Sokoban. You are the player (@) in a walled room. Push every box ($) onto a target (.): walk into a box "
            "to push it one cell; you cannot pull boxes or push two at once. Moves: up, down, left, right "
            "(up = toward row 1). "
            f'Each turn give 1 to {self.actions_per_turn} moves separated by commas, e.g. "up, left, left". '
            f"You have {self.turns} turns. Rewards: -0.1 per move, +1 for a box pushed onto a target, -1 for a box "
            "pushed off one, +10 when all boxes are on targets; a move into a wall or a blocked box costs -0.1 "
            f"and does nothing; an answer with no move passes the turn for {self.invalid_reward:g}.\nLegend: {LEGEND}."
        )

    def task(self) -> str:
        return f"Sokoban level:\n{render(self.room, self.start)}\nLegend: {LEGEND}."

    def _observe(self) -> Observation:
        on = boxes_on_targets(self.room, self.state)
        lines = [
            render(self.room, self.state),
            f"Legend: {LEGEND}.",
            (
                f"Boxes on targets: {on} of {len(self.room.targets)}. "
                f"Turn {min(self.turn + 1, self.turns)} of {self.turns} (up to {self.actions_per_turn} moves per turn)."
            ),
        ]
        if self.log:
            lines.append(f"Last: {self.log[-1]}")
        data: dict[str, Any] = {
            "player": self.state.player,
            "boxes": sorted(self.state.boxes),
            "targets": sorted(self.room.targets),
            "turn": self.turn,
        }
        return Observation("\n".join(lines), self.legal_actions(), data)

    def transcript(self) -> str:
        if self.success():
            outcome = f"Solved in {self.moves_made} moves over {self.turn} turns."
        else:
            outcome = (
                f"Not solved after {self.turn} turns: {boxes_on_targets(self.room, self.state)} of "
                f"{len(self.room.targets)} boxes on targets."
            )
        return "\n".join([self.task(), *self.log, f"{outcome} Score {self.total:g}."])

    def instance_stats(self) -> dict[str, Any]:
        return {"optimal_length": self.optimal_length}
