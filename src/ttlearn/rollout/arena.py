"""The arena: every contestant (a memory method, optionally with its own player) plays the same sequences.

Paired design: a sequence is (opponent, seed); every contestant's run of that sequence has the same run seed, hence
the same environment seed and the same game seeds, so the report can compare methods game by game (and rate them by
Bradley–Terry over these paired battles).

    OUT/
      arena.json                                  the arena config, ttlearn version and git commit of the last start
      runs/<label>/<opponent>/seed<k>/            one ordinary run directory per (contestant, opponent, seed)

Each plan item is one run, played start to finish by one worker process (or Ray task), or by one of `concurrency`
threads of this process that share one loaded back end (the way to keep a server's parallel slots busy). An item whose
run directory holds a summary.json is finished and skipped; any other item is (re)opened and resumed from its last
durable game, so an interrupted arena resumes by running the same command again, without replaying finished sequences. A
run's lock (`RunDir.hold_lock`) keeps two workers — say, an orphan of a killed arena and its successor — from writing
one run at once: the second waits.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ttlearn.registry import PLUGINS_VAR, load_plugins, loaded_plugins
from ttlearn.rollout.parts import LLMPool
from ttlearn.rollout.run import play, validate
from ttlearn.rollout.run import prepare as prepare_run
from ttlearn.runs import (
    ARENA_FILE,
    NO_OPPONENT,
    Run,
    RunConfig,
    RunDir,
    arena_run,
    check_trusted,
    credential_urls,
    games,
    holds_run,
)
from ttlearn.untrusted import write_atomic
from ttlearn.version import __version__

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
SINGLE_THREAD_ENV = {"TTLEARN_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""Set in every worker: N workers with one thread each beat N workers fighting over every core."""


def _check_name(kind: str, name: str) -> str:
    if not _SAFE_NAME.match(name):
        raise ValueError(f"{kind} {name!r} cannot name a directory: use letters, digits and _ . + - only")
    return name


class Contestant(BaseModel):
    """One entry of the arena: a memory method with its options, shown in the tables as `label`.

    `player` overrides the arena's player, for reference entries such as a `scripted:random` floor or a
    `scripted:oracle` ceiling; `writer` overrides the memory writer (e.g. a trained MemoPilot writer beside the
    untrained one). A plain string in YAML or on the command line is a memory name without options.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    options: dict[str, Any] = Field(default_factory=dict)
    label: str = ""
    player: str | None = None
    writer: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _default_label(self) -> Contestant:
        self.label = _check_name("contestant label", self.label or self.name)
        return self


class ArenaConfig(BaseModel):
    """What to compare, against whom, how often: the contestants, the opponents and seeds of the sequences, and the
    run every sequence plays (`run`, a `RunConfig` template: any run option, `--games N` included). Loadable from YAML
    (`load_arena_config`), where the run options stand beside the arena's own."""

    model_config = ConfigDict(extra="forbid")

    run: RunConfig
    """Every run of the plan is this one with a contestant's memory (and player or writer, where it names one), an
    opponent and a seed."""
    memories: list[Contestant] = Field(min_length=1)
    opponents: list[str] = Field(default_factory=list)
    """Empty for environments without opponents: then each seed is one sequence, labelled `default`."""
    seeds: int | list[int] = 5
    """A count k (seeds 0..k−1) or an explicit list; every contestant plays every (opponent, seed)."""

    @model_validator(mode="before")
    @classmethod
    def _run_options_beside(cls, data: Any) -> Any:
        """The YAML form: the run options beside `memories`, `opponents` and `seeds`, and `games: N` for the session
        of N games (`runs.games`)."""
        if not isinstance(data, dict) or "run" in data:
            return data
        arena = {k: v for k, v in data.items() if k in cls.model_fields}
        run = {k: v for k, v in data.items() if k not in cls.model_fields}
        if "games" in run:
            if "units" in run:
                raise ValueError("games: N is N units of one attempt with the memory carried; give units or games")
            run = {**games(run.pop("games")), **run}
        return {**arena, "run": run}

    @field_validator("run")
    @classmethod
    def _plan_sets_memory_and_seed(cls, run: RunConfig) -> RunConfig:
        named = sorted(run.model_fields_set & {"memory", "memory_options", "seed"})
        if named:
            raise ValueError(
                f"{', '.join(named)}: the plan sets each run's; name the contestants in `memories` and "
                "the sequences in `seeds`"
            )
        missing = [spec for spec in run.plugins if spec not in loaded_plugins()]
        if missing:
            raise ValueError(
                f"plug-in {missing[0]} is named but not loaded; a config never imports code: load it with "
                f"--plugin {missing[0]} (before the command) or ${PLUGINS_VAR}"
            )
        return run

    @field_validator("seeds")
    @classmethod
    def _check_seeds(cls, seeds: int | list[int]) -> int | list[int]:
        if isinstance(seeds, int) and seeds < 1:
            raise ValueError(f"seeds must be a positive count or a list, got {seeds}")
        if isinstance(seeds, list) and (not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0):
            raise ValueError(f"a seed list must be non-empty, without repeats, of non-negative integers: {seeds}")
        return seeds

    @field_validator("opponents")
    @classmethod
    def _check_opponents(cls, opponents: list[str]) -> list[str]:
        if len(set(opponents)) != len(opponents):
            raise ValueError(f"opponents repeat: {opponents}")
        return [_check_name("opponent", o) for o in opponents]

    @model_validator(mode="after")
    def _check_consistency(self) -> ArenaConfig:
        labels = [c.label for c in self.memories]
        if len(set(labels)) != len(labels):
            raise ValueError(f"contestant labels repeat: {labels}; give repeated memories a distinct `label`")
        if self.opponents and "opponent" in self.run.env_options:
            raise ValueError("set the opponent through `opponents`, not env_options")
        return self

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)


def load_arena_config(path: Path | None = None, **overrides: Any) -> ArenaConfig:
    """An arena config from a YAML file, with `overrides` (None = not given; the flat names of the YAML form) on top;
    env_options are merged."""
    data: dict[str, Any] = {}
    if path is not None:
        if not Path(path).is_file():
            raise FileNotFoundError(f"arena config {path} does not exist")
        data = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path} must hold a mapping of arena options")
        if isinstance(data.get("run"), dict):
            data = {**data.pop("run"), **data}
    env_options = {**data.get("env_options", {}), **(overrides.pop("env_options", None) or {})}
    given = {k: v for k, v in overrides.items() if v is not None}
    if "games" in given:  # the command line's preset replaces the file's unit count
        data.pop("units", None)
    data.update(given)
    if env_options:
        data["env_options"] = env_options
    return ArenaConfig.model_validate(data)


@dataclass(frozen=True)
class PlanItem:
    label: str
    opponent: str
    seed: int
    path: Path
    config: RunConfig

    @property
    def name(self) -> str:
        return f"{self.label}/{self.opponent}/seed{self.seed}"


def plan(config: ArenaConfig, out: Path) -> list[PlanItem]:
    """Every (seed, opponent, contestant), in that order, so a stopped arena still holds complete paired sets."""
    items = []
    for seed in config.seed_list:
        for opponent in config.opponents or [NO_OPPONENT]:
            env_options = {**config.run.env_options, **({"opponent": opponent} if config.opponents else {})}
            for c in config.memories:
                own = {"player": c.player, "writer": c.writer}
                update = {"env_options": env_options, "memory": c.name, "memory_options": c.options, "seed": seed}
                run_config = config.run.model_copy(update={**update, **{k: v for k, v in own.items() if v}})
                path = arena_run(out, c.label, opponent, seed)
                items.append(PlanItem(c.label, opponent, seed, path, run_config.resolved()))
    return items


def is_finished(item: PlanItem) -> bool:
    """True when the item's run holds its summary, which its worker writes after the last game. Reads only: an
    orphaned worker may still be appending to an unfinished run. Refuses a run directory of another config (the
    ttlearn version aside: the report lists the versions of all runs)."""
    if not holds_run(item.path):
        return False
    changed = Run.open(item.path).differs_from(item.config)
    if changed:
        raise ValueError(f"{item.path} holds a run with other {', '.join(changed)}; use another --out for this arena")
    return RunDir(item.path).summary.exists()


def git_commit() -> str | None:
    """The commit of the ttlearn source tree (suffixed +dirty with local changes), or None outside a checkout."""
    here = Path(__file__).parent
    try:
        head = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def prepare(config: ArenaConfig, out: Path) -> tuple[list[PlanItem], list[PlanItem]]:
    """Validate every planned run, record the arena, and split the plan into (to play, already finished)."""
    items = plan(config, out)
    for item in items:
        if item.seed == items[0].seed:  # other seeds differ only in seed values, which every env accepts
            validate(item.config)
    finished = [item for item in items if is_finished(item)]
    Path(out).mkdir(parents=True, exist_ok=True)
    record = {"config": config.model_dump(), "ttlearn_version": __version__, "git_commit": git_commit()}
    write_atomic(Path(out) / ARENA_FILE, json.dumps(record, indent=2, sort_keys=True))  # never through a link
    return [item for item in items if item not in finished], finished


# ---- playing one run (in a worker) ---------------------------------------------------------------------------------
def use_one_thread() -> None:
    """Worker initialiser: one compute thread per worker, set before any model or torch loads."""
    os.environ.update(SINGLE_THREAD_ENV)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def play_item(path: str, config_json: str, pool: LLMPool | None = None) -> dict[str, Any]:
    """Create or resume one run and play its missing games; returns what the progress bar shows. `pool`: back ends
    shared with other runs in flight in this process. The arena validated its plan before handing it out. A worker
    waits for the run's lock where another (an orphan of a killed arena) still writes it."""
    config = RunConfig.model_validate_json(config_json)
    load_plugins(config.plugins, origin="the arena")  # the parent's own --plugin / $TTLEARN_PLUGINS, never a file's
    with prepare_run(Path(path), config, check=False, wait=True) as run:
        own_store = [str(config.memory_options["store"])] if "store" in config.memory_options else []
        check_trusted(run.config, credential_urls(config), run.path, stores=own_store)  # where the command says
        already = run.done
        summary = play(run, pool=pool)
    return {"played": run.done - already, "mean_score": summary.mean_score, "wall_s": summary.wall_s}


# ---- executing a plan ---------------------------------------------------------------------------------------------
def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def execute(
    items: list[PlanItem],
    workers: int | None = None,
    ray: bool = False,
    ray_address: str | None = None,
    concurrency: int = 1,
) -> Iterator[tuple[PlanItem, dict[str, Any]]]:
    """Play the items in parallel worker processes, as Ray tasks with `ray`, or `concurrency` at a time on threads
    sharing one back end per spec, yielding (item, outcome) as each finishes. Stops at the first failing run (after
    the runs in flight end) with `RunFailed`: every later run would most likely fail the same way."""
    if ray:
        yield from _execute_ray(items, ray_address, workers)
        return
    if concurrency > 1:
        yield from _execute_threads(items, concurrency)
        return
    workers = workers or default_workers()
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), initializer=use_one_thread)
    yield from _collect(pool, lambda item: pool.submit(play_item, str(item.path), item.config.model_dump_json()), items)


def _execute_threads(items: list[PlanItem], concurrency: int) -> Iterator[tuple[PlanItem, dict[str, Any]]]:
    shared = LLMPool()
    try:
        threads = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="arena")
        submit = lambda item: threads.submit(play_item, str(item.path), item.config.model_dump_json(), shared)  # noqa: E731
        yield from _collect(threads, submit, items)
    finally:
        shared.close()


def _collect(
    pool: Executor, submit: Callable[[PlanItem], Future], items: list[PlanItem]
) -> Iterator[tuple[PlanItem, dict[str, Any]]]:
    """Submit every item, yield (item, outcome) as each finishes; shut the pool down however this ends."""
    try:
        pending: dict[Future, PlanItem] = {submit(item): item for item in items}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=lambda f: pending[f].name):
                item = pending.pop(future)
                yield item, _outcome(item, future.result)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class RunFailed(RuntimeError):
    """A run of the plan raised; the arena stopped. Finished runs are kept: fix the cause and run it again."""


def _outcome(item: PlanItem, result: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return result()
    except Exception as exc:
        raise RunFailed(f"run {item.name} failed: {type(exc).__name__}: {exc}") from exc


def _execute_ray(
    items: list[PlanItem], address: str | None, workers: int | None = None
) -> Iterator[tuple[PlanItem, dict[str, Any]]]:
    """The same plan as Ray tasks, one CPU each. `address` goes to ray.init: None means $RAY_ADDRESS if set, else
    a new local Ray, which runs `workers` tasks at once (default: one per CPU). On a cluster, every node needs
    ttlearn installed and OUT on a shared file system; runs of a memory in PostgreSQL (`store=postgresql://…`) then
    share it from every node."""
    try:
        import ray
    except ImportError:
        raise ValueError("--ray needs Ray, which is not installed: pip install 'ray[default]'") from None
    local = address == "local" or (address is None and not os.environ.get("RAY_ADDRESS"))
    ray.init(
        address=address,
        num_cpus=workers if local else None,
        runtime_env={"env_vars": SINGLE_THREAD_ENV},
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(play_item)
        pending = {task.remote(str(item.path), item.config.model_dump_json()): item for item in items}
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            item = pending.pop(ref)
            yield item, _outcome(item, lambda: ray.get(ref))  # noqa: B023 - called at once
    finally:
        ray.shutdown()
