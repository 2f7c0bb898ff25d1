"""A ScienceWorld-sized stand-in simulator, as a one-file plug-in (`ttlearn --plugin tests/plugins/simlab.py …`).

`simlab`: three rooms; the task names one of 16 things in the kitchen or the workshop (the task list comes from the
simulator, so it is cached in a file: `task_list`), and is solved by focusing on it.
The hallway offers 533 actions a step — `connect X to Y` for every pair of the 22 things in it, `examine`, `pick up`
and `focus on` each, `look around`, `inventory`, `task`, and `open door to …` — of which a handful matter: the doors,
then `go to …`, then the one right `focus on`. Every `focus on` ends the task (the wrong one unsolved). Like the real
simulator it accepts commands it does not list (`partial_actions`) and rejects the ones it does not know, with its
reason. With `rank=True` it ranks its actions for the player's shortlist (`action_tier`); `unstable=True` makes it
list a room's contents in an order that drifts after a few episodes in one process, as a simulator with a rebuilt
cache would, while still declaring itself deterministic (`ttlearn check` must catch it).

`typist:TEXT@N`: a back end that types TEXT at every step, and whose context holds N characters of prompt (over it:
`ContextOverflow`), for runs whose invalid steps have every cause.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from ttlearn.cache import cache_root
from ttlearn.envs.base import ENVS, Env
from ttlearn.llm.base import LLM, LLMS, ContextOverflow, Message
from ttlearn.types import Completion, Observation, StepResult

CONTENTS = {
    "hallway": (
        "red chair",
        "blue vase",
        "old clock",
        "wooden bench",
        "green rug",
        "small table",
        "tall lamp",
        "brass bell",
        "glass jar",
        "paper map",
        "iron key",
        "cotton coat",
        "leather boot",
        "silver coin",
        "clay pot",
        "stone bust",
        "white candle",
        "black umbrella",
        "woolen hat",
        "copper wire",
        "plastic bucket",
        "rubber ball",
    ),
    "kitchen": (
        "metal pot",
        "glass thermometer",
        "ceramic bowl",
        "steel sink",
        "wooden spoon",
        "tin can",
        "gas stove",
        "orange juice",
    ),
    "workshop": (
        "electric battery",
        "light bulb",
        "steel hammer",
        "copper nail",
        "yellow cable",
        "wooden plank",
        "glue stick",
        "solar panel",
    ),
}
DOORS = {"hallway": ("kitchen", "workshop"), "kitchen": ("hallway",), "workshop": ("hallway",)}
UNKNOWN = "No known action matches that input."
TURNS = 30
SIMULATOR_VERSION = "1.0"
simulator_starts = 0
"""How often the (pretend) simulator was started to list its tasks: once per cache, never per environment built."""


def ask_simulator_for_tasks() -> list[tuple[str, str]]:
    """What the real simulator answers only once it is running (ScienceWorld: a task's variations): slow."""
    global simulator_starts
    simulator_starts += 1
    return [(room, thing) for room in ("kitchen", "workshop") for thing in CONTENTS[room]]


def task_list() -> list[tuple[str, str]]:
    """The (room, thing) tasks, from a file in ttlearn's cache keyed by the simulator's version, written once (by a
    rename, so a killed process leaves no half file): building the environment and `instance_count()` stay cheap in
    every later process, and validation starts no simulator."""
    path = cache_root() / "plugins" / f"simlab-tasks-{SIMULATOR_VERSION}.json"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(ask_simulator_for_tasks()))
        partial.replace(path)
    return [(room, thing) for room, thing in json.loads(path.read_text())]


@ENVS.register("simlab")
class SimLab(Env):
    """Find the named object and focus on it, among hundreds of listed actions (module docstring)."""

    partial_actions = True
    reply_tokens = 12

    room: str
    opened: set[str]
    held: list[str]
    log: list[str]

    def __init__(self, seed: int = 0, rank: bool = True, unstable: bool = False) -> None:
        self.rank, self.unstable = rank, unstable
        self.starts = 0
        self.target, self.target_room = "", ""
        self.room, self.opened, self.held = "hallway", set(), []
        self.turn, self.focused, self.log = 0, "", []

    def describe(self) -> str:
        return "You are in a small laboratory house. Type one command a turn, such as look around."

    def task(self) -> str:
        return f"Your task is to find the {self.target} and focus on it."

    def instance_count(self) -> int:
        return len(task_list())

    def reset(self, seed: int) -> Observation:
        self.target_room, self.target = task_list()[seed % self.instance_count()]
        return self.restart()

    def restart(self) -> Observation:
        self.starts += 1
        self.room, self.opened, self.held = "hallway", set(), []
        self.turn, self.focused, self.log = 0, "", [self.task()]
        return self._observe(f"{self.task()}\n{self._look()}")

    def _things(self) -> list[str]:
        things = list(CONTENTS[self.room]) + [t for t in self.held if t not in CONTENTS[self.room]]
        drift = self.starts // 3 if self.unstable else 0  # the listing order changes every third episode
        return things[drift % len(things) :] + things[: drift % len(things)]

    def _look(self) -> str:
        doors = ", ".join(f"{d} ({'open' if d in self.opened else 'closed'})" for d in DOORS[self.room])
        return f"This room is called the {self.room}. In it, you see: {', '.join(self._things())}. Doors: {doors}."

    def legal_actions(self) -> tuple[str, ...]:
        things = self._things()
        moves = ["look around", "inventory", "task"]
        moves += [f"open door to {d}" for d in DOORS[self.room] if d not in self.opened]
        moves += [f"go to {d}" for d in DOORS[self.room] if d in self.opened]
        for verb in ("examine", "pick up", "focus on"):
            moves += [f"{verb} {t}" for t in things]
        moves += [f"connect {a} to {b}" for a in things for b in things if a != b]
        return tuple(moves)

    def action_tier(self, action: str) -> int | None:
        """Navigation and looking first (pinned), then handling things, then the task-ending focus; wiring things
        together and re-reading the task last."""
        if not self.rank:
            return super().action_tier(action)
        if action == "look around" or action.startswith(("open door to ", "go to ")):
            return 0
        if action == "inventory" or action.startswith(("examine ", "pick up ")):
            return 1
        return 2 if action.startswith("focus on ") else 3

    def _observe(self, text: str) -> Observation:
        return Observation(text, self.legal_actions(), {"room": self.room})

    def step(self, action: str) -> StepResult:
        self.turn += 1
        command = " ".join(action.lower().split())
        if command not in self.legal_actions():
            return self._answer(action, UNKNOWN, rejected=UNKNOWN)
        if command.startswith("focus on "):
            self.focused = command.removeprefix("focus on ")
            solved = self.focused == self.target
            verdict = "You completed the task." if solved else "That is not what the task asked for."
            return self._answer(action, f"You focus on the {self.focused}. {verdict}", reward=float(solved), end=True)
        return self._answer(action, self._do(command))

    def _do(self, command: str) -> str:
        if command == "look around":
            return self._look()
        if command == "task":
            return self.task()
        if command == "inventory":
            return f"In your inventory: {', '.join(self.held) or 'nothing'}."
        if command.startswith("open door to "):
            self.opened.add(command.removeprefix("open door to "))
            return "The door is now open."
        if command.startswith("go to "):
            self.room = command.removeprefix("go to ")
            return f"You move to the {self.room}.\n{self._look()}"
        if command.startswith("pick up "):
            self.held.append(command.removeprefix("pick up "))
            return "You move it to your inventory."
        if command.startswith("examine "):
            return f"A {command.removeprefix('examine ')}."
        return "The two are now connected."

    def _answer(
        self, action: str, text: str, *, reward: float = 0.0, end: bool = False, rejected: str | None = None
    ) -> StepResult:
        self.log.append(f"> {action}\n{text}")
        done = end or self.turn >= TURNS
        return StepResult(self._observe(text), reward, done, rejected=rejected)

    def invalid_step(self, reply: str) -> StepResult:
        """A turn with no command (an unreadable reply, a prompt over the context): nothing happens."""
        self.turn += 1
        return self._answer("", "Nothing happens.")

    def score(self) -> float:
        return float(self.success())

    def success(self) -> bool:
        return bool(self.focused) and self.focused == self.target

    def transcript(self) -> str:
        return "\n".join(self.log)

    def oracle_action(self, seed: int) -> str:
        if self.room == self.target_room:
            return f"focus on {self.target}"
        if self.room != "hallway":
            return "go to hallway"
        return f"go to {self.target_room}" if self.target_room in self.opened else f"open door to {self.target_room}"


class Typist(LLM):
    """Types the same command at every step; a prompt longer than `context` characters overflows."""

    def __init__(self, text: str, context: int) -> None:
        self.text, self.context, self.spec = text, context, f"typist:{text}@{context}"

    def complete(
        self, messages: Sequence[Message], *, max_tokens=128, temperature=0.0, seed=0, stop=(), choices=None
    ) -> Completion:
        size = sum(len(m["content"]) for m in messages)
        if size > self.context:
            raise ContextOverflow(f"prompt of {size} characters exceeds the context of {self.context}", size)
        return Completion(self.text)


@LLMS.register("typist")
def typist(argument: str) -> Typist:
    text, _, context = argument.rpartition("@")
    return Typist(text, int(context))
