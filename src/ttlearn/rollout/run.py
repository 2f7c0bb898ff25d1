"""The one driver: a config into a run directory, checked once, then played unit by unit.

    prepare(out, config)   the config resolved (`RunConfig.resolved`) and checked (`validate`), its directory created,
                           or an existing run reopened to resume
    play(run)              the missing units, each by `rollout.unit.play_unit` from the state it starts from, then
                           the summary

A unit starts from the state after the last finished unit where the memory carries (a session of games, MemRL's
runtime learning; held-out units never carry their writes on), else from the fresh state (or `memory_from`'s). Every
seed derives from (run seed, unit, attempt, step), so a resumed run plays exactly the units an uninterrupted one
would have. Independent units may be played `concurrency` at a time — by default as many as the back ends answer
side by side with unchanged replies — and the control arms ahead of their units, beside the memory arm; records are
still written in unit order by `Run.finish`, the one writer, and are those of one at a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ttlearn.envs.base import Env
from ttlearn.eval.summary import RunSummary, summarize
from ttlearn.llm.base import LLM, make_llm
from ttlearn.llm.cache import ReplayBook
from ttlearn.memory.base import MEMORIES
from ttlearn.players.base import PLAYERS
from ttlearn.registry import UnknownNameError
from ttlearn.rollout.inflight import play_in_order
from ttlearn.rollout.parts import (
    SCRIPTED,
    LLMPool,
    Parts,
    build_parts,
    resolve_moves_per_turn,
    side_by_side,
    validate_parts,
)
from ttlearn.rollout.unit import ControlSource, Unit, play_control, play_unit, plays_control
from ttlearn.runs import Run, RunConfig, holds_run, latest_state, plugin_hint, read_config

Progress = Callable[[int, int, dict[str, Any]], None]
"""Called after every finished unit with (done, total, its record)."""


# ---- the config, checked once --------------------------------------------------------------------------------------
def player_learns(config: RunConfig) -> bool:
    """True for a scripted player that learns from what it plays (LLM players are frozen)."""
    return config.player.startswith(SCRIPTED) and PLAYERS.get(config.player[len(SCRIPTED) :]).learns


def units_are_independent(config: RunConfig) -> bool:
    """True when no unit can influence another: each starts from the fresh state, or nothing carries over in the
    memory or the player; and the memory keeps no files of its own (one store per run)."""
    memory = MEMORIES.get(config.memory)
    nothing_carried = not memory.carries_over and not player_learns(config)
    return (not config.carry_memory or nothing_carried) and not memory.keeps_files


def _check_instances(env: Env, wanted: int, what: str) -> None:
    count = env.instance_count()
    if count is not None and wanted > count:
        raise ValueError(f"{what} {wanted} exceeds the {count} instances of this {env.name} split")


def validate(config: RunConfig, concurrency: int = 1) -> None:
    """What a config cannot check by itself, checked once before any model loads or any directory is written: the
    config's own rules and its memory's declared capabilities (`RunConfig.check`), its names against the registries
    (building its environment once), and `concurrency`. A name no plug-in registered, in a run recorded with
    plug-ins this process has not loaded, says which flag loads them: a run directory never imports code."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    try:
        config.check()
        with validate_parts(config) as env:
            resolve_moves_per_turn(config.moves_per_turn, env)
            _check_instances(env, config.units, "--units")
        if config.validation_tasks:
            with validate_parts(config.validation_config()) as env:
                _check_instances(env, config.validation_tasks, "validation_tasks")
    except UnknownNameError as exc:
        raise UnknownNameError(f"{exc}{plugin_hint(config)}") from None
    if config.memory_from and not Path(config.memory_from).exists():
        raise FileNotFoundError(f"--memory-from {config.memory_from} does not exist")
    if concurrency > 1 and not units_are_independent(config):
        raise ValueError(
            f"the units of this run depend on each other through memory {config.memory!r} (it carries over, keeps "
            "one store per run, or the player learns), so they are played one at a time; --no-carry-memory makes "
            "every unit start afresh"
        )


def prepare(
    out: Path, config: RunConfig | None = None, concurrency: int = 1, check: bool = True, wait: bool = False
) -> Run:
    """The run at `out`, checked and open for writing (its lock held: close it, or use it in a `with`): created from
    `config` (resolved), or reopened to resume — from its own config when `config` is None, or when it already
    holds this one (as recorded, or once resolved). Another process writing it: `wait` for it, else refuse
    (`RunBusyError`). `check=False`: the caller has validated the config already (the arena checks its whole plan up
    front)."""
    if config is None:
        run = Run.open(out, write=True, wait=wait)
    else:
        recorded = read_config(out) if holds_run(out) else None
        config = config if config == recorded else config.resolved()  # a run recorded before today's defaults stays
        if check:
            validate(config, concurrency)
            check = False
        run = Run.create_or_open(out, config, wait)
    if check:
        try:
            validate(run.config, concurrency)
        except BaseException:
            run.close()
            raise
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
    control_ahead: bool = True,
) -> RunSummary:
    """Play the units still missing from `run` (from `prepare`) and write its summary, which it returns.
    `concurrency`: units in flight; None: where the units are independent, as many as the back ends answer side by
    side with unchanged replies (`side_by_side`: the embedded model, a context per idle core), else 1. On such back
    ends the control arms are played ahead of their units (`ControlsAhead`; `control_ahead=False`: each after its
    memory arm, on the same parts).
    Records are the same either way. `replay`: answer every LLM call from a recording instead of a model; `pool`:
    back ends already loaded, shared with other runs in flight (by default the run loads its own and closes them)."""
    start = time.perf_counter()
    if not run.finished:
        shared = pool or LLMPool(llm_factory, replay)
        together = side_by_side(run.config, shared)
        if concurrency is None:
            concurrency = together if units_are_independent(run.config) else 1
        built: list[Parts] = []  # every Parts made, so that whatever happens their environments are closed

        def build(parts_config: RunConfig) -> Parts:
            built.append(build_parts(parts_config, shared, run_dir=run.path))
            return built[-1]

        def finish(unit: Unit) -> None:
            run.finish(*unit)
            if progress is not None:
                progress(run.done, run.total, run.records[-1])

        ahead = None
        try:
            workers = [build(run.config) for _ in range(concurrency)]
            if run.config.control and control_ahead and together > 1 and not player_learns(run.config):
                ahead = ControlsAhead(run, build(run.config.control_config()))
            play_in_order(range(run.done + 1, run.total + 1), workers, _unit_player(run, workers, build, ahead), finish)
        finally:
            if ahead is not None:
                ahead.close()
            for parts in built:
                parts.env.close()
            if pool is None:
                shared.close()
    summary = summarize(run, wall_s=time.perf_counter() - start)
    run.write_summary(summary.to_json())
    return summary


class ControlsAhead:
    """The control arms still to play, played ahead of their units, in unit order, on parts of their own: a control
    depends on its unit's index alone (`play_control`), so it starts at once, beside the memory arm's earlier units
    and epochs, instead of waiting for its unit's memory arm (which, where the memory carries, is one unit at a time).
    A unit then takes its control's result; nothing reaches the run directory before its unit does."""

    def __init__(self, run: Run, parts: Parts) -> None:
        config = run.config
        wanted = [i for i in range(run.done + 1, run.total + 1) if plays_control(config, *config.position(i)[:2])]
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="control")
        self._played = {index: self._pool.submit(play_control, parts, config, index) for index in wanted}

    def of(self, index: int) -> ControlSource:
        return self._played[index].result

    def close(self) -> None:
        """Drop the controls not yet started and wait for the one in flight (its parts are closed after)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def _unit_player(
    run: Run, workers: list[Parts], build: Callable[[RunConfig], Parts], ahead: ControlsAhead | None
) -> Callable[[Parts, int], Unit]:
    """The function that plays unit `index` on a worker's parts, from the state it starts from: the state after the
    last finished task unit where the memory carries, else the fresh state (`memory_from`'s, when given). Held-out
    units play on parts of their own; a unit's control arm comes from `ahead` when given."""
    config = run.config
    held_out = build(config.validation_config()) if config.validation_tasks else None
    fresh = (
        latest_state(Path(config.memory_from))
        if config.memory_from
        else {
            "memory": workers[0].memory.state(),
            "player": workers[0].player.state(),
        }
    )

    def play_index(parts: Parts, index: int) -> Unit:
        phase, epoch, _ = config.position(index)
        if phase == "validation" and held_out is not None:
            parts = held_out
        tasks = [i for i, r in enumerate(run.records[: index - 1], start=1) if r["type"] == "task"]
        start = run.state_after(tasks[-1]) if config.carry_memory and tasks else fresh
        control = ahead.of(index) if ahead is not None and plays_control(config, phase, epoch) else None
        return play_unit(parts, config, index, start, control)

    return play_index
