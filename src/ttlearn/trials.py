"""Multi-attempt trials (LaMer): N attempts at the *same* instance, with the memory's reflections in between.

    env.reset(seed) once → attempt 1 → memory.observe → env.restart() → attempt 2 (sees the context) → … → attempt N

A trial stops early once an attempt succeeds. The memory is reset to its fresh state before every trial, so it only
carries what was learnt on this instance: `lamer` reflections (or transcripts), or nothing for `none`, the plain
baseline. With no memory the attempts are independent samples, so by default they are all played (no early stop)
and pass@k (Chen et al.) is reported beside success@k as the control.

A run over K instances lives in a directory:

    OUT/trials.json     the TrialConfig
    OUT/tasks.jsonl     one record per finished instance: its attempts (steps, rewards, success), LLM calls, facts
    OUT/summary.json    success@1..N, pass@1..N (memory off), trajectory entropy, instance-set ceilings

A task becomes durable in one appended line; a killed run leaves at most a torn last line, which reopening drops,
and instances are seeded by index, so a resumed run plays exactly the instances an uninterrupted one would have.
"""

from __future__ import annotations

import copy
import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from ttlearn.agent import PLAYERS, Decision, LLMPlayer, Player
from ttlearn.envs.base import Env
from ttlearn.eval.metrics import (
    mcnemar_exact,
    mean_pass_at_k,
    mean_trajectory_entropy,
    success_at_k,
    wilson_interval,
)
from ttlearn.llm.base import LLM, make_llm
from ttlearn.llm.cache import RecordingLLM
from ttlearn.memory.base import MEMORIES, Memory, make_memory
from ttlearn.memory.memrl import run_protocol
from ttlearn.runs import PartsConfig, append_durable, read_durable
from ttlearn.session import SCRIPTED, derive_seed, validate_parts, writer_spec
from ttlearn.types import Episode, Step

INSTANCE_FACTS = ("optimal_length", "min_reveals", "no_guess")
"""Per-instance ceilings an environment may expose: Sokoban's optimal move count, Minesweeper's fewest reveals and
whether logic alone solves it."""

Mark = Callable[[str, int, int], None]
"""Told ("act", attempt, step) before each decision and ("reflect", attempt, 0) before each memory write, so a
trainer can file the LLM calls that follow under the right step."""


class TrialConfig(PartsConfig):
    """A multi-attempt run: `tasks` instances, `attempts` attempts each. Validated before any model loads."""

    memory: str = "lamer"
    tasks: int = Field(10, ge=1)
    attempts: int = Field(3, ge=1)
    early_stop: bool | None = None
    """Stop a trial at its first success; None: stop with a memory, play every attempt with memory "none"."""
    epochs: int = Field(1, ge=1)
    """MemRL's protocol: play the same task set this many times; the memory then carries over between tasks and
    epochs (runtime learning) instead of starting fresh for every task, and the summary adds last-epoch and
    cumulative success."""
    moves_per_turn: int | None = Field(None, ge=1)
    """Scored decisions per turn for LLM players on choice-scoring back ends (Sokoban takes up to 3 moves a turn,
    scoring picks one); None: the environment's `actions_per_turn` (1 where it has none)."""

    @property
    def carries_memory(self) -> bool:
        return self.epochs > 1

    @property
    def total(self) -> int:
        return self.tasks * self.epochs

    def position(self, index: int) -> tuple[int, int]:
        """(epoch, task) of the index-th trial (1-based): epochs replay tasks 1..K in order."""
        return (index - 1) // self.tasks + 1, (index - 1) % self.tasks + 1

    @property
    def stops_early(self) -> bool:
        return self.memory != "none" if self.early_stop is None else self.early_stop


# ---- the player for multi-move turns -----------------------------------------------------------------------------
class TurnPlayer(Player):
    """Composes one turn of up to `moves` single-move decisions by an inner player.

    Choice scoring picks one legal action per call, which would cap Sokoban at one move per turn (7 moves per attempt,
    while levels need 5–21). So the inner player decides again on a private copy of the environment advanced by the
    moves chosen so far: every decision sees the true board it acts on. The copy's status line counts the turn as
    taken (it says turn t + 1 while the real turn t is being composed, and on the last turn that copy is already
    over; the board is still the one the next move acts on). The turn ends early when the moves so far solve it.
    """

    name = "turn"

    def __init__(self, inner: Player, moves: int) -> None:
        if moves < 1:
            raise ValueError(f"moves per turn must be >= 1, got {moves}")
        self.inner, self.moves = inner, moves

    def begin_episode(self, env: Env) -> None:
        self.inner.begin_episode(env)

    def end_episode(self, env: Env, obs: Any) -> None:
        self.inner.end_episode(env, obs)

    def act(self, env: Env, obs: Any, memory: str, *, seed: int) -> Decision:
        chosen: list[Decision] = []
        view_env, view = env, obs
        for k in range(self.moves):
            chosen.append(self.inner.act(view_env, view, memory, seed=derive_seed(seed, "move", k)))
            if k + 1 == self.moves:
                break
            view_env = copy.deepcopy(env)
            view = view_env.step(", ".join(d.action for d in chosen)).observation
            if view_env.success():
                break
        return Decision(
            ", ".join(d.action for d in chosen),
            all(d.valid for d in chosen),
            " | ".join(d.raw for d in chosen if d.raw),
            {"decisions": len(chosen)},
        )


# ---- one trial ---------------------------------------------------------------------------------------------------
@dataclass
class Trial:
    seed: int
    attempts: list[Episode]
    instance: dict[str, Any] = field(default_factory=dict)

    @property
    def first_success(self) -> int | None:
        return next((e.index for e in self.attempts if e.success), None)


def instance_facts(env: Env, moves_per_turn: int) -> dict[str, Any]:
    """The ceilings the environment exposes for this instance, plus `budget`: the most moves an attempt can make."""
    facts = {name: getattr(env, name) for name in INSTANCE_FACTS if hasattr(env, name)}
    turns = getattr(env, "turns", None)
    if turns is not None:
        facts["budget"] = turns * moves_per_turn
    return facts


def play_attempt(
    env: Env,
    player: Player,
    obs: Any,
    context: str,
    *,
    index: int,
    seed: int,
    act_seed: Callable[[int], int],
    mark: Mark | None = None,
) -> Episode:
    """Play one attempt from `obs` to the end; the player sees `context` (the memory) at every decision."""
    player.begin_episode(env)
    task = env.task()
    steps: list[Step] = []
    done = False
    while not done:
        if mark is not None:
            mark("act", index, len(steps))
        decision = player.act(env, obs, context, seed=act_seed(len(steps)))
        result = env.step(decision.action)
        steps.append(Step(obs.text, decision.action, result.reward, decision.valid, decision.raw, dict(result.info)))
        obs, done = result.observation, result.done
    player.end_episode(env, obs)
    info = {"rules": env.describe(), "transcript": env.transcript(), "context": context}
    return Episode(index, seed, task, tuple(steps), env.score(), env.success(), info)


def play_trial(
    env: Env,
    player: Player,
    memory: Memory,
    *,
    seed: int,
    attempts: int,
    early_stop: bool,
    act_seed: Callable[[int, int], int],
    moves_per_turn: int = 1,
    mark: Mark | None = None,
    observe_last: bool = False,
) -> Trial:
    """Up to `attempts` attempts at the instance `seed`, the memory writing between them (never after the last or
    after a success that ends the trial, unless `observe_last`: a memory carried to later tasks learns from every
    attempt). `act_seed(attempt, step)` seeds each decision. The caller resets the memory; this only feeds it."""
    if attempts < 1:
        raise ValueError(f"a trial needs at least one attempt, got {attempts}")
    obs = env.reset(seed)
    trial = Trial(seed, [], instance_facts(env, moves_per_turn))
    for index in range(1, attempts + 1):
        if index > 1:
            obs = env.restart()
        context = memory.context(env.task())
        episode = play_attempt(
            env, player, obs, context, index=index, seed=seed, act_seed=functools.partial(act_seed, index), mark=mark
        )
        trial.attempts.append(episode)
        last = index == attempts or bool(episode.success and early_stop)
        if last and not observe_last:
            break
        if mark is not None:
            mark("reflect", index, 0)
        memory.observe(episode)
        if last:
            break
    return trial


# ---- the run directory -------------------------------------------------------------------------------------------
CONFIG_FILE, TASKS_FILE, SUMMARY_FILE = "trials.json", "tasks.jsonl", "summary.json"


def read_tasks(out: Path, *, repair: bool = True) -> list[dict[str, Any]]:
    """The finished task records of a run directory (`read_durable`: a torn last line is dropped, and cut only when
    `repair`)."""
    path = Path(out) / TASKS_FILE
    return read_durable(path, repair=repair) if path.exists() else []


def append_task(out: Path, record: dict[str, Any]) -> None:
    append_durable(Path(out) / TASKS_FILE, [record])


def open_run_dir(out: Path, config: TrialConfig) -> list[dict[str, Any]]:
    """Create the directory, or reopen it when it holds the same config; returns the tasks already finished."""
    out = Path(out)
    config_file = out / CONFIG_FILE
    if config_file.exists():
        saved = TrialConfig.model_validate_json(config_file.read_text())
        if saved != config:
            raise FileExistsError(
                f"{out} holds a different trial run; resume it with its own config or use another --out"
            )
        return read_tasks(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not a trial run directory")
    out.mkdir(parents=True, exist_ok=True)
    config_file.write_text(config.model_dump_json(indent=2))
    return []


def load_trial_config(out: Path) -> TrialConfig:
    """The config of a trial run directory, to resume it with `run_trials(load_trial_config(out), out)`."""
    path = Path(out) / CONFIG_FILE
    if not path.exists():
        raise FileNotFoundError(f"{out} is not a trial run directory (no {CONFIG_FILE})")
    return TrialConfig.model_validate_json(path.read_text())


def is_trial_dir(path: Path) -> bool:
    return (Path(path) / CONFIG_FILE).is_file()


def format_task(record: dict[str, Any]) -> str:
    """One finished task as plain text: its instance facts, then each attempt's context, moves and outcome."""
    lines = [
        f"task {record['task']} (epoch {record['epoch']}, seed {record['seed']}) · {json.dumps(record['instance'])}"
    ]
    for attempt in record["attempts"]:
        outcome = "solved" if attempt["success"] else "unsolved"
        lines.append(f"attempt {attempt['index']}: score {attempt['score']:+g}, {outcome}")
        context = attempt["info"].get("context", "")
        if context:
            lines.append("  saw: " + " ".join(context.split()))
        for step in attempt["steps"]:
            flag = "" if step["valid"] else " (invalid → fallback)"
            lines.append(f"  {step['action']} → {step['reward']:+g}{flag}")
    return "\n".join(lines)


# ---- summary -----------------------------------------------------------------------------------------------------
def _stats(values: list[float]) -> dict[str, float]:
    return {"mean": float(np.mean(values)), "min": float(min(values)), "max": float(max(values))}


def instance_summary(instances: list[dict[str, Any]]) -> dict[str, Any]:
    """Ceilings of the instance set: optimal-length / fewest-reveals stats, the no-guess rate, and the share of
    instances whose need (optimal moves, fewest reveals) fits in an attempt's move budget at all."""
    out: dict[str, Any] = {}
    for name in ("optimal_length", "min_reveals"):
        values = [i[name] for i in instances if name in i]
        if values:
            out[name] = _stats(values)
            budgets = [(i[name], i["budget"]) for i in instances if name in i and "budget" in i]
            if budgets:
                out["within_budget_rate"] = float(np.mean([need <= budget for need, budget in budgets]))
    flags = [i["no_guess"] for i in instances if "no_guess" in i]
    if flags:
        out["no_guess_rate"] = float(np.mean(flags))
    return out


def summarize_trials(records: list[dict[str, Any]], config: TrialConfig) -> dict[str, Any]:
    """Everything the table shows, from task records alone.

    success@k: solved within the first k sequential attempts, with its 95 % Wilson interval over the tasks.
    pass@k: the unbiased estimator over the n attempts of each task, reported only when they are independent samples
    (memory "none") and all were played (no early stop).
    Trajectory entropy: per instance, the Shannon entropy (bits) of the distribution of distinct action sequences
    over its attempts, averaged over instances.
    """
    if not records:
        raise ValueError("no finished tasks to summarise")
    n = config.attempts
    attempts = [[Episode.from_json(a) for a in r["attempts"]] for r in records]
    first = [next((e.index for e in eps if e.success), None) for eps in attempts]
    summary: dict[str, Any] = {
        "env": config.env,
        "memory": config.memory,
        "memory_options": config.memory_options,
        "player": config.player,
        "tasks": len(records),
        "attempts": n,
        "success_at_k": success_at_k(first, n).tolist(),
        "success_at_k_ci95": [
            list(wilson_interval(sum(a is not None and a <= k for a in first), len(first))) for k in range(1, n + 1)
        ],
        "trajectory_entropy": mean_trajectory_entropy(
            [[tuple(s.action for s in e.steps) for e in eps] for eps in attempts]
        ),
        "mean_attempts": float(np.mean([len(eps) for eps in attempts])),
        "first_attempt_score": float(np.mean([eps[0].score for eps in attempts])),
        "invalid_rate": float(np.mean([not s.valid for eps in attempts for e in eps for s in e.steps])),
        "wall_s_per_task": float(np.mean([r["wall_s"] for r in records])),
        "instances": instance_summary([r["instance"] for r in records]),
        "pass_at_k": None,
    }
    if config.epochs > 1:
        per_epoch: list[dict[int, bool]] = [{} for _ in range(config.epochs)]
        for record in records:
            per_epoch[record["epoch"] - 1][record["task"]] = record["first_success"] is not None
        protocol = run_protocol([e for e in per_epoch if e])
        summary["protocol"] = {
            "epoch_success": protocol.per_epoch,
            "last_epoch_success": protocol.last_epoch_success,
            "cumulative_success": protocol.cumulative_success,
        }
    if config.memory == "none" and all(len(eps) == n for eps in attempts):
        samples = [(n, sum(bool(e.success) for e in eps)) for eps in attempts]
        summary["pass_at_k"] = [mean_pass_at_k(samples, k) for k in range(1, n + 1)]
    return summary


def compare_trials(a: list[dict[str, Any]], b: list[dict[str, Any]], attempts: int) -> dict[str, Any]:
    """success@k of two runs on the tasks both finished (paired by seed, so the same instances), with the
    discordant counts and the exact McNemar p-value per k: the honest test of "A beats B" on one task set."""
    first_b = {(r["epoch"], r["seed"]): r["first_success"] for r in b}
    pairs = [(r["first_success"], first_b[(r["epoch"], r["seed"])]) for r in a if (r["epoch"], r["seed"]) in first_b]
    if not pairs:
        raise ValueError("the two runs share no finished task (compare runs of the same env, seed and task set)")
    rows = []
    for k in range(1, attempts + 1):
        hits = [(x is not None and x <= k, y is not None and y <= k) for x, y in pairs]
        only_a, only_b = sum(x and not y for x, y in hits), sum(y and not x for x, y in hits)
        rows.append(
            {
                "k": k,
                "a": sum(x for x, _ in hits) / len(hits),
                "b": sum(y for _, y in hits) / len(hits),
                "only_a": only_a,
                "only_b": only_b,
                "p_value": mcnemar_exact(only_a, only_b),
            }
        )
    return {"tasks": len(pairs), "rows": rows}


def format_comparison(comparison: dict[str, Any], name_a: str, name_b: str) -> str:
    lines = [f"paired on {comparison['tasks']} shared tasks · A = {name_a} · B = {name_b}"]
    lines.append(f"{'k':<3}{'A':<8}{'B':<8}{'A−B':<8}{'only A':<8}{'only B':<8}McNemar p")
    for row in comparison["rows"]:
        lines.append(
            f"{row['k']:<3}{row['a']:<8.3f}{row['b']:<8.3f}{row['a'] - row['b']:<+8.3f}"
            f"{row['only_a']:<8}{row['only_b']:<8}{row['p_value']:.3f}"
        )
    return "\n".join(lines)


# ---- building and running ----------------------------------------------------------------------------------------
def resolve_moves_per_turn(requested: int | None, env: Env) -> int:
    """Scored decisions per turn: `requested`, or the environment's `actions_per_turn` (1 where it has none)."""
    allowed = getattr(env, "actions_per_turn", 1)
    moves = allowed if requested is None else requested
    if moves > allowed:
        raise ValueError(f"moves_per_turn={moves} exceeds the {allowed} action(s) per turn {env.name} allows")
    return moves


def validate_trials(config: TrialConfig) -> Env:
    """Check every name and option before a model loads or a directory is written."""
    env = validate_parts(config)
    resolve_moves_per_turn(config.moves_per_turn, env)
    return env


@dataclass
class TrialParts:
    """The live parts of a trial run; `calls` collects the LLM calls of the task in progress."""

    env: Env
    player: Player
    memory: Memory
    moves_per_turn: int
    llms: list[LLM]
    calls: list[dict[str, Any]] = field(default_factory=list)

    def close(self) -> None:
        for llm in self.llms:
            llm.close()


def build_parts(config: TrialConfig, llm_factory: Callable[[str], LLM] = make_llm) -> TrialParts:
    env = validate_trials(config)
    loaded: dict[str, LLM] = {}
    calls: list[dict[str, Any]] = []

    def recorded(spec: str, role: str) -> LLM:
        if spec not in loaded:
            loaded[spec] = llm_factory(spec)
        return RecordingLLM(loaded[spec], role, calls.append, spec)

    whole_turn = getattr(env, "actions_per_turn", 1)
    if config.player.startswith(SCRIPTED):  # scripted players write whole turns themselves
        player: Player = PLAYERS.build(config.player[len(SCRIPTED) :])
        moves = whole_turn
    else:
        llm = recorded(config.player, "player")
        player = LLMPlayer(llm, temperature=config.temperature)
        moves = resolve_moves_per_turn(config.moves_per_turn, env) if llm.supports_choices else whole_turn
        if llm.supports_choices and moves > 1:
            player = TurnPlayer(player, moves)
    writer = None
    if MEMORIES.get(config.memory).needs_llm:
        spec = writer_spec(config)
        writer = recorded(spec, "memory")
    memory = make_memory(config.memory, writer, **config.memory_options)
    return TrialParts(env, player, memory, moves, list(loaded.values()), calls)


def task_seed(config: TrialConfig, task: int) -> int:
    return derive_seed(config.seed, "task", task)


def run_task(parts: TrialParts, config: TrialConfig, index: int, start_state: dict[str, Any]) -> dict[str, Any]:
    """Play the index-th trial (instance `task` of its epoch) from `start_state`; returns its JSON record."""
    start = time.perf_counter()
    epoch, task = config.position(index)
    parts.calls.clear()
    parts.memory.load(copy.deepcopy(start_state))
    trial = play_trial(
        parts.env,
        parts.player,
        parts.memory,
        seed=task_seed(config, task),
        attempts=config.attempts,
        early_stop=config.stops_early,
        moves_per_turn=parts.moves_per_turn,
        observe_last=config.carries_memory,
        act_seed=lambda attempt, step: derive_seed(config.seed, "act", epoch, task, attempt, step),
    )
    attempts = []
    for episode in trial.attempts:
        data = episode.to_json()
        data["info"].pop("rules", None)  # the same long text for every attempt; trials.json rebuilds it
        attempts.append(data)
    return {
        "type": "task",
        "epoch": epoch,
        "task": task,
        "seed": trial.seed,
        "first_success": trial.first_success,
        "instance": trial.instance,
        "attempts": attempts,
        "memory": parts.memory.state(),
        "calls": list(parts.calls),
        "wall_s": time.perf_counter() - start,
    }


def run_trials(
    config: TrialConfig,
    out: Path,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
    llm_factory: Callable[[str], LLM] = make_llm,
) -> dict[str, Any]:
    """Play the tasks still missing from `out` (creating it, or resuming it with the same config) and write the
    summary. `progress(done, total, record)` is called after every finished task."""
    validate_trials(config)
    records = open_run_dir(Path(out), config)
    if len(records) < config.total:
        parts = build_parts(config, llm_factory)
        fresh = parts.memory.state()
        try:
            for index in range(len(records) + 1, config.total + 1):
                carried = config.carries_memory and records
                record = run_task(parts, config, index, records[-1]["memory"] if carried else fresh)
                append_task(Path(out), record)
                records.append(record)
                if progress is not None:
                    progress(len(records), config.total, record)
        finally:
            parts.close()
    summary = summarize_trials(records, config)
    (Path(out) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    """A plain-text table of success@k (and pass@k) for the CLI to print."""
    options = "".join(f" {k}={v}" for k, v in summary.get("memory_options", {}).items())
    memory = f"{summary['memory']}{f' ({options.strip()})' if options else ''}"
    lines = [f"{summary['env']} · memory {memory} · {summary['player']} · {summary['tasks']} tasks"]
    lines.append((f"{'k':<3}{'success@k':<11}{'95% CI':<15}" + ("pass@k" if summary["pass_at_k"] else "")).rstrip())
    for k, value in enumerate(summary["success_at_k"], start=1):
        low, high = summary["success_at_k_ci95"][k - 1]
        extra = f"{summary['pass_at_k'][k - 1]:.3f}" if summary["pass_at_k"] else ""
        lines.append(f"{k:<3}{value:<11.3f}{f'{low:.3f}–{high:.3f}':<15}{extra}".rstrip())
    lines.append(
        f"trajectory entropy {summary['trajectory_entropy']:.3f} bits · invalid {summary['invalid_rate']:.1%}"
        f" · {summary['wall_s_per_task']:.1f} s/task"
    )
    if summary.get("protocol"):
        p = summary["protocol"]
        rates = " ".join(f"{r:.2f}" for r in p["epoch_success"])
        lines.append(
            f"epochs: success {rates} · last epoch {p['last_epoch_success']:.3f}"
            f" · cumulative {p['cumulative_success']:.3f}"
        )
    if summary["instances"]:
        lines.append("instances: " + json.dumps(summary["instances"]))
    return "\n".join(lines)
