"""The one driver: a config (of either kind) into a run directory, checked once, then played unit by unit.

A run's `kind` says what its unit is:

- a *session* (`RunConfig`): the unit is a game; one sequence of games, the memory carried from each to the next.
  Game g is played with its own seed, the memory observes it, and the memory (and player) state after it is stored.
- a *trial run* (`TrialConfig`): the unit is a task with attempts (LaMer):

      env.reset(seed) → attempt 1 → memory.observe → env.restart() → attempt 2 (sees the context) → … → N

  A trial stops early once an attempt succeeds. A memory that learns across tasks (MemRL, MemP, RAG, ExpeL, Dynamic
  Cheatsheet) carries over from task to task, one attempt per task by default (MemRL's runtime learning); any other
  starts every trial from its fresh state, so it only carries what was learnt on this instance. With `epochs` > 1
  (MemRL's protocol) the task set is replayed, with held-out validation instances after every epoch. Instances are
  drawn by task index (a seeded permutation of a finite split, or a derived seed), so a resumed run plays exactly
  the instances an uninterrupted one would.

Every seed derives from (run seed, unit, step), so a resumed run plays exactly the units an uninterrupted one would
have. Independent units (no memory carried, no learning player) may be played `concurrency` at a time — by default
as many as the back ends answer side by side with unchanged replies — and a trial's control arm beside its memory
arm; records are still written in unit order by `Run.finish`, the one writer, and are those of one at a time.
`prepare` checks a config once (`validate`: the configs check themselves, this adds what needs the registries) and
opens its directory; `play` plays what is missing and writes the summary.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ttlearn.envs.base import Env, recorded_defaults
from ttlearn.eval.summary import summarize
from ttlearn.llm.base import LLM, make_llm
from ttlearn.llm.cache import ReplayBook
from ttlearn.memory.base import MEMORIES
from ttlearn.memory.none import NoMemory
from ttlearn.players.base import PLAYERS
from ttlearn.registry import UnknownNameError
from ttlearn.rollout.inflight import play_in_order
from ttlearn.rollout.loop import Trial, play_sequence_game, play_trial
from ttlearn.rollout.parts import (
    SCRIPTED,
    LLMPool,
    Parts,
    build_parts,
    default_memory_options,
    resolve_moves_per_turn,
    side_by_side,
    validate_parts,
)
from ttlearn.runs import Run, RunConfig, RunDir, TrialConfig, latest_state, parse_config, plugin_hint
from ttlearn.seeding import derive_seed
from ttlearn.types import Step

Config = RunConfig | TrialConfig
Unit = tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]
"""What playing one unit yields for `Run.finish`: its record, the state to snapshot, the events to write before it."""
Progress = Callable[[int, int, dict[str, Any]], None]
"""Called after every finished unit with (done, total, its record)."""


# ---- the config, decided and checked once --------------------------------------------------------------------------
def resolve(config: Config) -> Config:
    """The config with every "as the memory declares" default decided, as the run directory records it. A trial
    run's memory that learns across tasks carries from task to task, one attempt each (MemRL's protocol); its
    family's preset (a preset named like the environment) unless the user chose settings; else LaMer's 3 attempts
    at one task. Either kind records today's default of every option whose default changed (`Env.legacy_options`)."""
    config = config.model_copy(update={"env_options": {**recorded_defaults(config.env), **config.env_options}})
    if isinstance(config, RunConfig):
        return config
    memory = MEMORIES.get(config.memory)
    carry = memory.learns_across_tasks if config.carry_memory is None else config.carry_memory
    carried = carry or config.epochs > 1 or config.validation_tasks > 0
    attempts = 1 if carried and "attempts" not in config.model_fields_set else config.attempts
    options = {**default_memory_options(config.env, config.memory), **config.memory_options}
    return config.model_copy(update={"carry_memory": carry, "attempts": attempts, "memory_options": options})


def player_learns(cfg: Config) -> bool:
    """True for a scripted player that learns from what it plays (LLM players are frozen)."""
    return cfg.player.startswith(SCRIPTED) and PLAYERS.get(cfg.player[len(SCRIPTED) :]).learns


def games_are_independent(cfg: RunConfig) -> bool:
    """True when no game can influence another: nothing carries over in the memory or the player."""
    return not MEMORIES.get(cfg.memory).carries_over and not player_learns(cfg)


def units_are_independent(config: Config) -> bool:
    """True when the units of a run may be in flight together (what `validate` allows for `concurrency` > 1)."""
    if isinstance(config, RunConfig):
        return games_are_independent(config)
    return not config.carries_memory and not MEMORIES.get(config.memory).keeps_files


def _check_instances(env: Env, wanted: int, what: str) -> None:
    count = env.instance_count()
    if count is not None and wanted > count:
        raise ValueError(f"{what} {wanted} exceeds the {count} instances of this {env.name} split")


def validate(config: Config, concurrency: int = 1) -> None:
    """What a config cannot check by itself, checked once before any model loads or any directory is written: its
    names against the registries (building its environment once), and the declared capabilities of its memory and
    player against the kind of run and `concurrency`. A name no plug-in registered, in a run recorded with
    plug-ins this process has not loaded, says which flag loads them: a run directory never imports code."""
    try:
        _validate(config, concurrency)
    except UnknownNameError as exc:
        raise UnknownNameError(f"{exc}{plugin_hint(config)}") from None


def _validate(config: Config, concurrency: int) -> None:
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    parse_config(config.model_dump())  # its own checks again: `model_copy(update=…)` skips them
    memory = MEMORIES.get(config.memory)
    with validate_parts(config) as env:
        resolve_moves_per_turn(config.moves_per_turn, env)
        if isinstance(config, TrialConfig):
            _check_instances(env, config.tasks, "--tasks")
    if isinstance(config, RunConfig):
        if memory.needs_trials:
            raise ValueError(
                f"memory {config.memory!r} reflects between attempts at one task: add --tasks K (trial mode)"
            )
        if config.memory_from and not Path(config.memory_from).exists():
            raise FileNotFoundError(f"--memory-from {config.memory_from} does not exist")
        if concurrency > 1 and not games_are_independent(config):
            raise ValueError(
                f"the games of one sequence depend on each other through memory {config.memory!r} (or a learning "
                "player), so they are played one at a time; --concurrency applies to memory none, to trial runs "
                "(--tasks) and to the arena"
            )
        return
    if config.validation_tasks:
        with validate_parts(config.validation_config()) as env:
            _check_instances(env, config.validation_tasks, "validation_tasks")
    if config.memory_options.get("url") and (not config.carries_memory or config.validation_tasks):
        raise ValueError(
            "a memory service namespace (url=) is shared and a run cannot reset it: independent trials would share"
            " one memory and held-out validation would write into it; run with --carry-memory and no"
            " --validation-tasks, or keep the memory local (drop url=)"
        )
    if concurrency > 1 and memory.keeps_files:
        raise ValueError(f"memory {config.memory!r} keeps one store per run, so its tasks run one at a time")
    if concurrency > 1 and config.carries_memory:
        raise ValueError(
            f"memory {config.memory!r} carries over from task to task (its default, --carry-memory, --epochs > 1 or "
            "held-out validation), so tasks run one at a time; --no-carry-memory makes every task start afresh"
        )


def prepare(out: Path, config: Config | None = None, concurrency: int = 1, check: bool = True) -> Run:
    """The run at `out`, checked and ready to play: created from `config` (resolved), or reopened to resume —
    from its own config when `config` is None, or when it already holds this one (as recorded, or once resolved). `check=False`: the caller has
    validated the config already (the arena checks its whole plan up front)."""
    if config is None:
        run = Run.open(out)
    else:
        recorded = RunDir(out).config() if RunDir(out).kind in ("trials", "session") else None
        config = config if config == recorded else resolve(config)  # a run recorded before today's defaults stays
        if check:
            validate(config, concurrency)
            check = False
        run = Run.create_or_open(out, config)
    if check:
        validate(run.config, concurrency)
    return run


# ---- playing ---------------------------------------------------------------------------------------------------
def play(
    run: Run,
    progress: Progress | None = None,
    *,
    llm_factory: Callable[[str], LLM] = make_llm,
    concurrency: int | None = None,
    replay: ReplayBook | None = None,
    pool: LLMPool | None = None,
    control_beside: bool = True,
) -> dict[str, Any]:
    """Play the units still missing from `run` (from `prepare`) and write its summary, which it returns.
    `concurrency`: units in flight; None: where the units are independent, as many as the back ends answer side by
    side with unchanged replies (`side_by_side`: the embedded model, a context per idle core), else 1. A trial's
    control arm is played beside its memory arm on such back ends too (`control_beside=False`: after it, on the same
    parts, as before). Records are the same either way. `replay`: answer every LLM call from a recording instead of
    a model; `pool`: back ends already loaded, shared with other runs in flight (by default the run loads its own and
    closes them)."""
    start = time.perf_counter()
    if not run.finished:
        shared = pool or LLMPool(llm_factory, replay)
        together = side_by_side(run.config, shared)
        if concurrency is None:
            concurrency = together if units_are_independent(run.config) else 1
        control_beside = control_beside and together > 1
        built: list[Parts] = []  # every Parts made, so that whatever happens their environments are closed

        def build(parts_config: Config) -> Parts:
            built.append(build_parts(parts_config, shared, run_dir=run.path))
            return built[-1]

        def finish(unit: Unit) -> None:
            run.finish(*unit)
            if progress is not None:
                progress(run.done, run.total, run.records[-1])

        try:
            workers = [build(run.config) for _ in range(concurrency)]
            if run.unit == "game":
                play_unit = _game_player(run, workers)
            else:
                play_unit = _task_player(run, workers, build, control_beside)
            play_in_order(range(run.done + 1, run.total + 1), workers, play_unit, finish)
        finally:
            for parts in built:
                parts.env.close()
            if pool is None:
                shared.close()
    summary = summarize(run, wall_s=time.perf_counter() - start)
    run.write_summary(summary)
    return summary


def play_run(out: Path, config: Config | None = None, progress: Progress | None = None, **options: Any) -> dict:
    """`prepare` then `play` (`options`: those of `play`); returns the summary."""
    return play(prepare(out, config, options.get("concurrency") or 1), progress, **options)


# ---- a session's unit: one game --------------------------------------------------------------------------------
def _game_player(run: Run, workers: list[Parts]) -> Callable[[Parts, int], Unit]:
    """Load the state the missing games start from (the last finished game's, or `memory_from`'s) into every
    worker; returns the function that plays game `index`."""
    config = run.config
    assert isinstance(config, RunConfig)
    state = None
    if run.done:
        state = run.state_after(run.done)
    elif config.memory_from:
        state = latest_state(Path(config.memory_from))
    if state is not None:
        for parts in workers:
            parts.memory.load(state["memory"])
            parts.player.load(state.get("player", {}))
    return lambda parts, index: play_game(parts, config.seed, index)


def play_game(parts: Parts, run_seed: int, index: int) -> Unit:
    """Game `index` of the sequence seeded `run_seed`, then the memory's update; returns the game record (its
    episode with its LLM accounting in `info`), the state to snapshot and the game's events."""
    start = time.perf_counter()
    parts.drain()
    steps = 0

    def record(step: Step, shown: str) -> None:
        nonlocal steps
        steps += 1
        parts.events.append({"type": "step", "step": steps, "memory": shown, **step.to_json()})

    episode = play_sequence_game(parts.env, parts.player, parts.memory.context, run_seed, index, record)
    parts.memory.observe(episode)
    events = parts.drain()
    calls = [e for e in events if e.get("type") == "call"]
    episode.info.update(
        wall_s=time.perf_counter() - start,
        llm_s=sum(c["wall_s"] for c in calls),
        llm_calls=len(calls),
        prompt_tokens=sum(c["completion"]["prompt_tokens"] for c in calls),
        completion_tokens=sum(c["completion"]["completion_tokens"] for c in calls),
    )
    state = {"memory": parts.memory.state(), "player": parts.player.state()}
    return {"type": "game", "game": index, "episode": episode.to_json()}, state, events


# ---- a trial run's unit: one task with its attempts ----------------------------------------------------------------
def _task_player(
    run: Run, workers: list[Parts], build: Callable[[Config], Parts], control_beside: bool = True
) -> Callable[[Parts, int], Unit]:
    """Build the held-out instances' parts; returns the function that plays job `index` from the memory it starts
    from: fresh for independent trials, else the memory after the last played task (held-out instances never carry
    their writes on). A control arm is played beside the memory arm, on parts of its own, when the player does not
    learn (the two arms then share nothing but the LLM back ends)."""
    config = run.config
    assert isinstance(config, TrialConfig)
    held_out = build(config.validation_config()) if config.validation_tasks else None
    fresh = workers[0].memory.state()
    control_config = config.model_copy(update={"memory": "none", "memory_options": {}})
    beside: dict[int, Parts] = {}  # each worker's control parts, built when it first plays a control

    def play_job(parts: Parts, index: int) -> Unit:
        kind, epoch, _ = config.position(index)
        if kind == "validation" and held_out is not None:
            parts = held_out
        tasks = [i for i, r in enumerate(run.records, start=1) if r.get("type", "task") == "task"]
        start = run.state_after(tasks[-1]) if config.carries_memory and tasks else fresh
        control_parts = None
        if control_beside and plays_control(config, kind, epoch) and not player_learns(config):
            if id(parts) not in beside:
                beside[id(parts)] = build(control_config)
            control_parts = beside[id(parts)]
        return run_task(parts, config, index, start, control_parts)

    return play_job


def task_seed(config: TrialConfig, task: int, instance_count: int | None, kind: str = "task") -> int:
    """The instance of task `task` (1-based): for a finite task set, its index in a seeded permutation of the split
    (distinct for distinct tasks); for generated instances, a seed derived from the run seed. Held-out instances
    ("validation") draw from their own namespace."""
    if instance_count is None:
        return derive_seed(config.seed, kind, task)
    order = np.random.default_rng(derive_seed(config.seed, f"{kind} order")).permutation(instance_count)
    return int(order[(task - 1) % instance_count])


def control_record(control: Trial) -> dict[str, Any]:
    """What a task record keeps of its control: the first success, and how many of its steps were invalid (memory
    text that breaks the reply format shows as more invalid steps with memory than without)."""
    steps = [s for episode in control.attempts for s in episode.steps]
    return {
        "control_first_success": control.first_success,
        "control_invalid_steps": sum(not s.valid for s in steps),
        "control_steps": len(steps),
    }


def plays_control(config: TrialConfig, kind: str, epoch: int) -> bool:
    """A control arm is played once per instance, in the last epoch (the one the summary pairs; a pooled control would
    count an instance once per epoch)."""
    return config.control and kind == "task" and epoch == config.epochs


def run_task(
    parts: Parts, config: TrialConfig, index: int, start_state: dict[str, Any], beside: Parts | None = None
) -> Unit:
    """Play the index-th job (a task, or a held-out instance, of its epoch) from `start_state`; returns its record,
    the memory after it and no separate events (its LLM calls are in the record). `parts` must be built from the
    job's config (`TrialConfig.validation_config` for held-out ones). `beside`: other parts (same player, memory
    none) on which the control arm is played at the same time as the memory arm; its calls are recorded after the
    memory arm's, as if played after it."""
    start = time.perf_counter()
    kind, epoch, task = config.position(index)
    act_namespace = ("act",) if kind == "task" else ("act", kind)
    seed = task_seed(config, task, parts.env.instance_count(), kind)

    def act_seed(attempt: int, step: int) -> int:
        return derive_seed(config.seed, *act_namespace, epoch, task, attempt, step)

    def memory_arm() -> Trial:
        return play_trial(
            parts.env,
            parts.player,
            parts.memory,
            seed=seed,
            attempts=config.attempts,
            early_stop=config.stops_early,
            observe_last=config.carries_memory,
            act_seed=act_seed,
        )

    def control_arm(on: Parts) -> Trial:
        # Common random numbers: the control's decisions draw the very seeds the memory's did.
        return play_trial(
            on.env, on.player, NoMemory(), seed=seed, attempts=config.attempts, early_stop=True, act_seed=act_seed
        )

    parts.drain()
    parts.memory.load(copy.deepcopy(start_state))
    control = None
    if not plays_control(config, kind, epoch):
        trial = memory_arm()
    elif beside is None:
        trial = memory_arm()
        control = control_arm(parts)
    else:
        beside.drain()
        with ThreadPoolExecutor(1, thread_name_prefix="control") as pool:
            played = pool.submit(control_arm, beside)
            trial = memory_arm()
            control = played.result()
        parts.events.extend(beside.drain())
    instance = dict(trial.instance)
    if parts.env.turns is not None:
        instance["budget"] = parts.env.turns * parts.moves_per_turn
    attempts = []
    for episode in trial.attempts:
        data = episode.to_json()
        data["info"].pop("rules", None)  # the same long text for every attempt; trials.json rebuilds it
        attempts.append(data)
    record = {
        "type": kind,
        "epoch": epoch,
        "task": task,
        "seed": trial.seed,
        "first_success": trial.first_success,
        **(control_record(control) if control is not None else {}),
        "instance": instance,
        "attempts": attempts,
        "calls": parts.drain(),
        "wall_s": time.perf_counter() - start,
    }
    return record, parts.memory.state(), []
