"""Trial runs (LaMer): N attempts at the *same* instance, the memory's reflections in between; K instances.

    env.reset(seed) once → attempt 1 → memory.observe → env.restart() → attempt 2 (sees the context) → … → attempt N

A trial stops early once an attempt succeeds. A memory that learns across tasks (MemRL, MemP, RAG, ExpeL, Dynamic
Cheatsheet) carries over from task to task, one attempt per task by default (MemRL's runtime learning); any other is
reset to its fresh state before every trial, so it only carries what was learnt on this instance: `lamer`
reflections (or transcripts), or nothing for `none`, the plain baseline. With `epochs` > 1 (MemRL's protocol) the
task set is replayed.
Instances are drawn by task index: distinct instances of a finite task set (a seeded permutation of its split), or
a derived seed for generated ones; so a resumed run plays exactly the instances an uninterrupted one would have.
Independent trials (epochs = 1) may be played `concurrency` at a time; records are still written in task order.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ttlearn.envs.base import Env
from ttlearn.eval.trials import summarize_trials
from ttlearn.llm.base import LLM, make_llm
from ttlearn.llm.cache import ReplayBook
from ttlearn.memory.base import MEMORIES
from ttlearn.memory.none import NoMemory
from ttlearn.rollout.inflight import play_in_order
from ttlearn.rollout.loop import Trial, play_trial
from ttlearn.rollout.parts import (
    LLMPool,
    Parts,
    build_parts,
    default_memory_options,
    resolve_moves_per_turn,
    validate_parts,
)
from ttlearn.runs import (
    RunDir,
    TrialConfig,
    append_task,
    is_trial_dir,
    load_trial_config,
    open_trial_dir,
    write_trial_summary,
)
from ttlearn.seeding import derive_seed


def _check_instances(env: Env, wanted: int, what: str) -> None:
    count = env.instance_count()
    if count is not None and wanted > count:
        raise ValueError(f"{what} {wanted} exceeds the {count} instances of this {env.name} split")


def with_defaults(config: TrialConfig) -> TrialConfig:
    """The config with every "as the memory declares" default decided, as the run directory records it: a memory
    that learns across tasks carries from task to task, one attempt each (MemRL's protocol); its family's preset
    (a preset named like the environment) unless the user chose settings; else LaMer's 3 attempts at one task."""
    memory = MEMORIES.get(config.memory)
    carry = memory.learns_across_tasks if config.carry_memory is None else config.carry_memory
    carried = carry or config.epochs > 1 or config.validation_tasks > 0
    attempts = 1 if carried and "attempts" not in config.model_fields_set else config.attempts
    options = {**default_memory_options(config.env, config.memory), **config.memory_options}
    return config.model_copy(update={"carry_memory": carry, "attempts": attempts, "memory_options": options})


def resolved_for(config: TrialConfig, out: Path) -> TrialConfig:
    """The config a run in `out` plays: the recorded one when `config` is it (resuming, even a directory written
    before today's defaults), else `config` `with_defaults`."""
    if is_trial_dir(out) and load_trial_config(out) == config:
        return config
    return with_defaults(config)


def validate_trials(config: TrialConfig, concurrency: int = 1) -> None:
    """Check every name and option of a config `with_defaults` before a model loads or a directory is written."""
    with validate_parts(config) as env:
        resolve_moves_per_turn(config.moves_per_turn, env)
        _check_instances(env, config.tasks, "--tasks")
    if config.validation_tasks:
        with validate_parts(config.validation_config()) as env:
            _check_instances(env, config.validation_tasks, "validation_tasks")
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if config.control and config.memory == "none":
        raise ValueError("--control plays every task without memory, which is what memory 'none' already does")
    if config.memory_options.get("url") and (not config.carries_memory or config.validation_tasks):
        raise ValueError(
            "a memory service namespace (url=) is shared and a run cannot reset it: independent trials would share"
            " one memory and held-out validation would write into it; run with --carry-memory and no"
            " --validation-tasks, or keep the memory local (drop url=)"
        )
    if concurrency > 1 and MEMORIES.get(config.memory).keeps_files:
        raise ValueError(f"memory {config.memory!r} keeps one store per run, so its tasks run one at a time")
    if concurrency > 1 and config.carries_memory:
        raise ValueError(
            f"memory {config.memory!r} carries over from task to task (its default, --carry-memory, --epochs > 1 or "
            "held-out validation), so tasks run one at a time; --no-carry-memory makes every task start afresh"
        )


def task_seed(config: TrialConfig, task: int, instance_count: int | None, kind: str = "task") -> int:
    """The instance of task `task` (1-based): for a finite task set, its index in a seeded permutation of the split
    (distinct for distinct tasks); for generated instances, a seed derived from the run seed. Held-out instances
    ("validation") draw from their own namespace."""
    if instance_count is None:
        return derive_seed(config.seed, kind, task)
    order = np.random.default_rng(derive_seed(config.seed, f"{kind} order")).permutation(instance_count)
    return int(order[(task - 1) % instance_count])


def start_state(
    config: TrialConfig, records: list[dict[str, Any]], fresh: dict[str, Any], run_dir: RunDir
) -> dict[str, Any]:
    """The memory a job starts from: fresh for independent trials, else the memory after the last played task
    (held-out instances never carry their writes on)."""
    last = next((r for r in reversed(records) if r["type"] == "task"), None)
    return run_dir.task_memory(last) if config.carries_memory and last is not None else fresh


def control_record(control: Trial) -> dict[str, Any]:
    """What a task record keeps of its control: the first success, and how many of its steps were invalid (memory
    text that breaks the reply format shows as more invalid steps with memory than without)."""
    steps = [s for episode in control.attempts for s in episode.steps]
    return {
        "control_first_success": control.first_success,
        "control_invalid_steps": sum(not s.valid for s in steps),
        "control_steps": len(steps),
    }


def run_task(parts: Parts, config: TrialConfig, index: int, start_state: dict[str, Any]) -> dict[str, Any]:
    """Play the index-th job (a task, or a held-out instance, of its epoch) from `start_state`; returns its JSON
    record. `parts` must be built from the job's config (`TrialConfig.validation_config` for held-out ones)."""
    start = time.perf_counter()
    kind, epoch, task = config.position(index)
    act_namespace = ("act",) if kind == "task" else ("act", kind)
    seed = task_seed(config, task, parts.env.instance_count(), kind)

    def act_seed(attempt: int, step: int) -> int:
        return derive_seed(config.seed, *act_namespace, epoch, task, attempt, step)

    parts.drain()
    parts.memory.load(copy.deepcopy(start_state))
    trial = play_trial(
        parts.env,
        parts.player,
        parts.memory,
        seed=seed,
        attempts=config.attempts,
        early_stop=config.stops_early,
        observe_last=config.carries_memory,
        act_seed=act_seed,
    )
    control = None
    if config.control and kind == "task" and epoch == config.epochs:
        # Once per instance, in the last epoch (the one the summary pairs; a pooled control would count an instance
        # once per epoch). Common random numbers: the control's decisions draw the very seeds the memory's did.
        control = play_trial(
            parts.env, parts.player, NoMemory(), seed=seed, attempts=config.attempts, early_stop=True, act_seed=act_seed
        )
    instance = dict(trial.instance)
    if parts.env.turns is not None:
        instance["budget"] = parts.env.turns * parts.moves_per_turn
    attempts = []
    for episode in trial.attempts:
        data = episode.to_json()
        data["info"].pop("rules", None)  # the same long text for every attempt; trials.json rebuilds it
        attempts.append(data)
    return {
        "type": kind,
        "epoch": epoch,
        "task": task,
        "seed": trial.seed,
        "first_success": trial.first_success,
        **(control_record(control) if control is not None else {}),
        "instance": instance,
        "attempts": attempts,
        "memory": parts.memory.state(),
        "calls": parts.drain(),
        "wall_s": time.perf_counter() - start,
    }


def run_trials(
    config: TrialConfig,
    out: Path,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
    llm_factory: Callable[[str], LLM] = make_llm,
    concurrency: int = 1,
    replay: ReplayBook | None = None,
) -> dict[str, Any]:
    """Play the tasks still missing from `out` (creating it, or resuming it with the same config) and write the
    summary. `progress(done, total, record)` is called after every finished task; `replay`: answer every LLM call
    from a recording instead of a model."""
    config = resolved_for(config, Path(out))
    validate_trials(config, concurrency)
    records = open_trial_dir(Path(out), config)
    run_dir = RunDir(out)  # one reader and writer of its snapshots
    if len(records) < config.total:
        pool = LLMPool(llm_factory, replay)
        built: list[Parts] = []  # every Parts made, so that whatever happens their environments are closed

        def build(parts_config: TrialConfig) -> Parts:
            built.append(build_parts(parts_config, pool, run_dir=Path(out), moves_per_turn=config.moves_per_turn))
            return built[-1]

        try:
            workers = [build(config) for _ in range(concurrency)]
            held_out = build(config.validation_config()) if config.validation_tasks else None
            fresh = workers[0].memory.state()

            def play(parts: Parts, index: int) -> dict[str, Any]:
                if config.position(index)[0] == "validation" and held_out is not None:
                    parts = held_out
                return run_task(parts, config, index, start_state(config, records, fresh, run_dir))

            def finish(record: dict[str, Any]) -> None:
                records.append(append_task(run_dir, record))
                if progress is not None:
                    progress(len(records), config.total, record)

            play_in_order(range(len(records) + 1, config.total + 1), workers, play, finish)
        finally:
            for parts in built:
                parts.env.close()
            pool.close()
    summary = summarize_trials(records, config)
    write_trial_summary(Path(out), summary)
    return summary
