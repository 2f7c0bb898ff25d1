"""A household text world (ALFWorld-like): TextWorldExpress's `twc` tidying game and its `cookingworld`.

TextWorldExpress (Jansen & Côté 2022, Apache-2.0) simulates the games in a JVM, about a millisecond a step, and lists
the valid actions at every step: they are this environment's legal actions, sorted so the order is the same every
run. Success and score are the game's own: `tasksuccess`, and the score normalised to 0..1 (twc: the share of
objects put in their usual place; cookingworld: the share of recipe steps done), so a step's reward is the change
in that score.

Each game keeps three disjoint seed folds, 1000 games each: train seeds 0-999, dev 10000-10999, test 20000-20999
(twc also draws its objects from disjoint sets per fold). `reset(seed)` plays game `seed % 1000` of the configured
fold, so MemRL's protocol (memory built on train, measured on test) has no overlap.

The game's gold path is the oracle. twc regenerates it with a random walk on each request (its length varies from
call to call; the game itself is deterministic), and cookingworld's path can hold a step the game would reject at
that point (re-opening something already open): the oracle skips those no-ops.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ttlearn.envs.base import Env
from ttlearn.types import Observation, StepResult

GAMES = ("twc", "cookingworld")
SPLITS = ("train", "dev", "test")
FOLD_SIZE = 1000
_FOLD_START = {"train": 0, "dev": 10000, "test": 20000}

DEFAULT_GAME_PARAMS = {
    # three rooms, four objects to put away, no doors, no inventory limit: gold paths of ~13-33 steps
    "twc": "numLocations=3,numItemsToPutAway=4,includeDoors=0,limitInventorySize=0",
    # three rooms, a two-ingredient recipe, three distractors: gold paths of ~10-23 steps
    "cookingworld": "numLocations=3,numIngredients=2,numDistractorItems=3,includeDoors=0,limitInventorySize=0",
}

_TASKS = {
    "twc": "tidy up: pick up the objects that are out of place and put each where it usually belongs",
    "cookingworld": "cook a meal: find the cookbook, gather and prepare the ingredients it lists, then eat the meal",
}

# The JVM sizes its thread pools and heap by the machine; a text game needs one core and a small heap.
_LIGHT_JVM = "-XX:ActiveProcessorCount=1 -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xmx256m"
_INSTALL_HINT = "pip install 'ttlearn[tasks]' (TextWorldExpress also needs a Java runtime, 8 or newer, on PATH)"


def fold_seed(split: str, seed: int) -> int:
    """The game seed `reset(seed)` plays: game `seed % 1000` of the fold (train 0.., dev 10000.., test 20000..)."""
    return _FOLD_START[split] + seed % FOLD_SIZE


@contextmanager
def _light_jvm_options() -> Iterator[None]:
    """Launch the JVM with `_LIGHT_JVM` appended to any JAVA_TOOL_OPTIONS the user set, restored afterwards."""
    previous = os.environ.get("JAVA_TOOL_OPTIONS")
    os.environ["JAVA_TOOL_OPTIONS"] = f"{previous} {_LIGHT_JVM}" if previous else _LIGHT_JVM
    try:
        yield
    finally:
        if previous is None:
            del os.environ["JAVA_TOOL_OPTIONS"]
        else:
            os.environ["JAVA_TOOL_OPTIONS"] = previous


def _shut_down(game: Any) -> None:
    game.close()


def start_game(name: str, params: str) -> Any:
    """A TextWorldExpress simulator (its own JVM) with game `name` loaded; ValueError for bad game parameters."""
    try:
        from textworld_express import TextWorldExpressEnv
    except ImportError as error:
        raise ImportError(f"the household environment needs textworld-express: {_INSTALL_HINT}") from error
    with _light_jvm_options():
        try:
            game = TextWorldExpressEnv(envStepLimit=10**9)  # the step limit is ours (see Household.step)
        except Exception as error:  # py4j reports a missing or broken Java only as a generic error
            raise RuntimeError(f"could not start TextWorldExpress's JVM ({error}); {_INSTALL_HINT}") from error
    try:
        game.load(name, params)
    except ValueError as error:
        game.close()
        raise ValueError(f"bad game_params {params!r} for {name}: {error}") from None
    return game


class Household(Env):
    """One fold of a TextWorldExpress game. The JVM starts at the first `reset`, so building the env costs nothing;
    `close()` (or garbage collection) stops it.

    An attempt ends on the game's success or failure, or after `step_limit` steps. A reply that names no valid
    action (`invalid_step`) uses up a step and changes nothing, as the game itself answers unknown commands.
    """

    reply_tokens = 24  # the longest actions ("put clean white panties in chest of drawers") run ~12 tokens

    def __init__(
        self,
        game: str = "twc",
        split: str = "train",
        game_params: str | None = None,
        step_limit: int = 50,
        seed: int = 0,
    ) -> None:
        if game not in GAMES:
            raise ValueError(f"game must be one of {', '.join(GAMES)}, got {game!r}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        if step_limit < 1:
            raise ValueError(f"step_limit must be >= 1, got {step_limit}")
        self.game, self.split, self.step_limit = game, split, step_limit
        self.seed = seed  # the run passes its seed to every env; games are chosen by reset(seed) alone
        self.game_params = DEFAULT_GAME_PARAMS[game] if game_params is None else game_params
        self._sim: Any = None
        self._game_seed: int | None = None

    # -- the simulator ----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the JVM; a later `reset` starts a new one."""
        if self._sim is not None:
            self._finalizer()
            self._sim = None

    def _simulator(self) -> Any:
        if self._sim is None:
            self._sim = start_game(self.game, self.game_params)
            self._finalizer = weakref.finalize(self, _shut_down, self._sim)
        return self._sim

    def _started(self) -> None:
        if self._game_seed is None:
            raise ValueError("no game yet: call reset(seed) first")

    # -- instance ---------------------------------------------------------------------------------------------
    def reset(self, seed: int) -> Observation:
        sim = self._simulator()
        self._game_seed = fold_seed(self.split, seed)
        _, info = sim.reset(seed=self._game_seed, gameFold=self.split, generateGoldPath=True)
        self._gold = tuple(sim.getGoldActionSequence())
        return self._begin(info)

    def restart(self) -> Observation:
        self._started()
        _, info = self._simulator().reset(seed=self._game_seed, gameFold=self.split, generateGoldPath=False)
        return self._begin(info)

    def _begin(self, info: dict[str, Any]) -> Observation:
        self._task_text, self._start_text = info["taskDescription"], info["observation"]
        self._info = info
        self._steps = 0
        self._gold_cursor = 0
        self._log: list[str] = []
        return self._observe(f"{self._task_text}\n{self._start_text}")

    # -- play -------------------------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._info["tasksuccess"] or self._info["taskfailure"] or self._steps >= self.step_limit

    def legal_actions(self) -> tuple[str, ...]:
        self._started()
        return () if self.done else tuple(sorted(self._info["validActions"]))

    def step(self, action: str) -> StepResult:
        self._started()
        if self.done:
            raise ValueError("the attempt is over; call restart() or reset()")
        if action not in self._info["validActions"]:
            raise ValueError(f"{action!r} is not a valid action now; choose one of legal_actions()")
        before = self._info["score"]
        text, _, _, self._info = self._sim.step(action)
        self._steps += 1
        if self._gold_cursor < len(self._gold) and action == self._gold[self._gold_cursor]:
            self._gold_cursor += 1
        self._log.append(f"> {action}\n{text.strip()}")
        reward = self._info["score"] - before
        info = {"score": self._info["score"], "won": self._info["tasksuccess"], "lost": self._info["taskfailure"]}
        return StepResult(self._observe(text), reward, self.done, info)

    def invalid_step(self, reply: str) -> StepResult:
        self._started()
        if self.done:
            raise ValueError("the attempt is over; call restart() or reset()")
        self._steps += 1
        text = f"{reply.strip()[:80]!r} is not a valid action here; nothing happens."
        self._log.append(f"> (invalid) {reply.strip()[:80]}\n{text}")
        return StepResult(self._observe(text), 0.0, self.done, {"invalid": True})

    def oracle_action(self, seed: int = 0) -> str:
        """The next step of the game's gold path, skipping steps the game would not accept now (no-ops)."""
        self._started()
        legal = set(self.legal_actions())
        while self._gold_cursor < len(self._gold) and self._gold[self._gold_cursor] not in legal:
            self._gold_cursor += 1
        if self._gold_cursor == len(self._gold):
            raise ValueError("the episode has left the gold path; the oracle only plays it from the start")
        return self._gold[self._gold_cursor]

    # -- reporting --------------------------------------------------------------------------------------------
    def score(self) -> float:
        self._started()
        return float(self._info["score"])

    def success(self) -> bool:
        self._started()
        return bool(self._info["tasksuccess"])

    def describe(self) -> str:
        return (
            f"A text adventure in a house. Your goal: {_TASKS[self.game]}. Each turn, answer with exactly one of the "
            "valid actions listed (for example 'move north', 'open fridge', 'take apple', 'put apple in fridge'). "
            f"The score goes from 0 to 1 as the goal gets done; you have {self.step_limit} steps."
        )

    def task(self) -> str:
        self._started()
        return f"{self._task_text}\n{self._start_text.strip()}"

    def _observe(self, text: str) -> Observation:
        status = f"Score {self._info['score']:.2f}. Step {min(self._steps + 1, self.step_limit)} of {self.step_limit}."
        data = {"score": self._info["score"], "steps": self._steps, "inventory": self._info["inventory"].strip()}
        return Observation(f"{text.strip()}\n{status}", self.legal_actions(), data)

    def transcript(self) -> str:
        self._started()
        if self.success():
            outcome = f"Goal done in {self._steps} steps."
        elif self._info["taskfailure"]:
            outcome = f"Failed after {self._steps} steps."
        else:
            outcome = f"Stopped after {self._steps} steps without finishing."
        return "\n".join([self.task(), *self._log, f"{outcome} Score {self.score():.2f}."])

    def instance_stats(self) -> dict[str, Any]:
        self._started()
        return {
            "game": self.game,
            "split": self.split,
            "game_seed": self._game_seed,
            "gold_length": len(self._gold),
        }

    def instance_count(self) -> int:
        return FOLD_SIZE
