"""The one unit player: a unit is one task instance played `attempts` times (LaMer's reflections in between), from
the state it starts from; a game is a unit with one attempt.

    env.reset(seed) → attempt 1 → memory.observe → env.restart() → attempt 2 (sees the context) → … → N

A unit stops early once an attempt succeeds (`RunConfig.early_stop`). Its control arm — the same instance and
decision seeds, nothing in the memory slot — is played after it on the same parts, or ahead of it on parts of its own
(`play_control`).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ttlearn.memory.none import NoMemory
from ttlearn.rollout.loop import Trial, play_trial
from ttlearn.rollout.parts import Parts
from ttlearn.runs import RunConfig
from ttlearn.seeding import derive_seed

Unit = tuple[dict[str, Any], dict[str, Any]]
"""What playing one unit yields for `Run.finish`: its record and the {memory, player} state after it."""


@dataclass(frozen=True)
class UnitSeeds:
    """Where a unit's randomness comes from: its instance, each decision, and the index its attempts carry."""

    instance: int
    act: Callable[[int, int], int]
    """(attempt, step) → the decision's seed."""
    episode_index: Callable[[int], int]
    """attempt → the index its episode carries (what a memory's text calls it)."""
    per_step_context: bool
    """Ask the memory for its context at every decision, for the situation then (a retrieval memory's query changes
    from round to round of a game), rather than once at the start of each attempt (trial runs before one config
    existed)."""
    info: dict[str, Any]
    """What every episode of the unit carries in its info."""


def unit_seeds(config: RunConfig, index: int, instance_count: int | None) -> UnitSeeds:
    """The seeds of the index-th unit — task `task` of `epoch` (`phase` "task", or "validation" for a held-out
    instance) — by the run's recorded rule. "unit" and "trials-v1": for a finite task set, the task's index in a
    seeded permutation of the split (distinct tasks, distinct instances); for generated instances, a seed derived from
    the run seed; held-out instances draw from their own namespace; an attempt's episode carries its attempt number,
    and under "unit" also the unit (`info["unit"]`, what memories call a game by). "session-v1" (sessions before one
    config existed): the game's seed and its decisions derive from (run seed, game) alone, and the episode carries
    the game's number."""
    run_seed = config.seed
    phase, epoch, task = config.position(index)
    if config.seeding == "session-v1":
        return UnitSeeds(
            instance=derive_seed(run_seed, "game", task),
            act=lambda _attempt, step: derive_seed(run_seed, "act", task, step),
            episode_index=lambda _attempt: task,
            per_step_context=True,
            info={},
        )
    if instance_count is None:
        instance = derive_seed(run_seed, phase, task)
    else:
        order = np.random.default_rng(derive_seed(run_seed, f"{phase} order")).permutation(instance_count)
        instance = int(order[(task - 1) % instance_count])
    namespace = ("act",) if phase == "task" else ("act", phase)
    return UnitSeeds(
        instance=instance,
        act=lambda attempt, step: derive_seed(run_seed, *namespace, epoch, task, attempt, step),
        episode_index=lambda attempt: attempt,
        per_step_context=config.seeding == "unit",
        info={"unit": index} if config.seeding == "unit" else {},
    )


def plays_control(config: RunConfig, phase: str, epoch: int) -> bool:
    """A control arm is played once per instance, in the last epoch (the one the summary pairs; a pooled control
    would count an instance once per epoch)."""
    return config.control and phase == "task" and epoch == config.epochs


def control_record(control: Trial) -> dict[str, Any]:
    """What a unit record keeps of its control: the first success, and how many of its steps were invalid (memory
    text that breaks the reply format shows as more invalid steps with memory than without)."""
    steps = [s for episode in control.attempts for s in episode.steps]
    return {
        "control_first_success": control.first_success,
        "control_invalid_steps": sum(not s.valid for s in steps),
        "control_steps": len(steps),
    }


def _play_arm(on: Parts, seeds: UnitSeeds, attempts: int, memory: Any, early_stop: bool, observe_last: bool) -> Trial:
    """One arm of a unit on `on`'s environment and player, with `memory` in the memory slot."""
    return play_trial(
        on.env,
        on.player,
        memory,
        seed=seeds.instance,
        attempts=attempts,
        early_stop=early_stop,
        observe_last=observe_last,
        act_seed=seeds.act,
        episode_index=seeds.episode_index,
        per_step_context=seeds.per_step_context,
        info=seeds.info,
    )


def play_control(on: Parts, config: RunConfig, index: int) -> tuple[Trial, list[dict[str, Any]]]:
    """Unit `index`'s control arm on `on` (built from `RunConfig.control_config`, or the unit's own parts): the
    same instance and — common random numbers — the very decision seeds of the memory arm, nothing in the memory
    slot. It depends on the unit's index alone, so it may be played at any time. Returns it and its call records."""
    on.drain()
    seeds = unit_seeds(config, index, on.env.instance_count())
    return _play_arm(on, seeds, int(config.attempts), NoMemory(), True, False), on.drain()


ControlSource = Callable[[], tuple[Trial, list[dict[str, Any]]]]
"""Where a unit's control arm comes from when it is played elsewhere (ahead of its unit, on parts of its own)."""


def play_unit(
    parts: Parts, config: RunConfig, index: int, start: dict[str, Any], control: ControlSource | None = None
) -> Unit:
    """Play the index-th unit of the run from the state `start` ({memory, player}); returns its record and the
    state after it. `parts` must be built from the unit's config (`RunConfig.validation_config` for held-out
    units). Where the unit has a control arm, it is `control()` when given, else played here after the memory arm;
    its calls are recorded after the memory arm's either way."""
    began = time.perf_counter()
    phase, epoch, task = config.position(index)
    parts.drain()
    parts.memory.load(copy.deepcopy(start["memory"]))
    parts.player.load(copy.deepcopy(start.get("player", {})))
    seeds = unit_seeds(config, index, parts.env.instance_count())
    # a held-out unit plays with the memory frozen: it retrieves, and never writes or updates a Q (MemRL's runner)
    learns = bool(config.carry_memory) and phase == "task"
    trial = _play_arm(parts, seeds, int(config.attempts), parts.memory, bool(config.early_stop), learns)
    calls = parts.drain()
    controlled = None
    if plays_control(config, phase, epoch):
        controlled, control_calls = control() if control is not None else play_control(parts, config, index)
        calls += control_calls
    instance = dict(trial.instance)
    if parts.env.turns is not None:
        instance["budget"] = parts.env.turns * parts.moves_per_turn
    attempts = []
    for episode in trial.attempts:
        data = episode.to_json()
        data["info"].pop("rules", None)  # the same long text for every attempt; the environment says it again
        attempts.append(data)
    record = {
        "index": index,
        "type": phase,
        "epoch": epoch,
        "task": task,
        "seed": trial.seed,
        "first_success": trial.first_success,
        "score": trial.attempts[-1].score,
        **(control_record(controlled) if controlled is not None else {}),
        "instance": instance,
        "attempts": attempts,
        "calls": calls,
        "wall_s": time.perf_counter() - began,
    }
    return record, {"memory": parts.memory.state(), "player": parts.player.state()}
