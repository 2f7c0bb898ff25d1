"""The one episode loop, used by the unit player, both trainers and the arena.

An episode is played from an observation until the environment says it is done. Each decision sees the memory's
context for the current situation; a decision that names no action goes to the environment's `invalid_step` (the
turn passes with a penalty), or, for games where a move is compulsory, is replaced by a seeded random legal move —
counted invalid either way, as is a command the simulator rejects (`StepResult.rejected`). A trial is N such
episodes at one instance, `restart()`ed between them, the memory observing each attempt before the next.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ttlearn.envs.base import Env
from ttlearn.memory.base import Memory
from ttlearn.players.base import Decision, Player
from ttlearn.seeding import derive_seed
from ttlearn.types import REJECTED, Episode, Observation, Step, StepResult

Mark = Callable[[str, int, int], None]
"""Told ("act", attempt, step) before each decision and ("reflect", attempt, 0) before each memory write, so a
trainer can file the LLM calls that follow under the right step."""


def apply_decision(env: Env, obs: Observation, decision: Decision, seed: int) -> tuple[str, StepResult]:
    """Play a decision; returns the action actually played ("" when the turn passed) and the step's result."""
    if decision.valid:
        return decision.action, env.step(decision.action)
    passed = env.invalid_step(decision.raw)
    if passed is not None:
        return "", passed
    if not obs.legal_actions:
        raise ValueError(f"environment {env.name!r} has free-text actions but no invalid_step to answer a bad reply")
    fallback = random.Random(derive_seed(seed, "fallback")).choice(list(obs.legal_actions))
    return fallback, env.step(fallback)


def played_step(obs: Observation, decision: Decision, action: str, result: StepResult) -> Step:
    """The record of one decision: invalid when the player named no action (its cause) or when the simulator
    rejected the command (its reason under info "rejected")."""
    if decision.valid and result.rejected is not None:
        info = {**result.info, "rejected": result.rejected}
        return Step(obs.text, action, result.reward, False, decision.raw, info, REJECTED)
    cause = "" if decision.valid else decision.cause
    return Step(obs.text, action, result.reward, decision.valid, decision.raw, dict(result.info), cause)


def play_episode(
    env: Env,
    player: Player,
    context: Callable[[str], str],
    *,
    index: int,
    seed: int,
    act_seed: Callable[[int], int],
    obs: Observation | None = None,
    on_step: Callable[[Step, str], None] | None = None,
    mark: Mark | None = None,
) -> Episode:
    """Episode `index` of instance `seed`, from `obs` (default: `env.reset(seed)`) to the end.

    `context(env.task())` is the memory shown at each decision; `act_seed(step)` seeds each decision;
    `on_step(step, context)` sees every step as it is played."""
    if obs is None:
        obs = env.reset(seed)
    player.begin_episode(env)
    task = env.task()
    steps: list[Step] = []
    shown = ""
    done = False
    while not done:
        shown = context(env.task())
        if mark is not None:
            mark("act", index, len(steps))
        decision_seed = act_seed(len(steps))
        decision = player.act(env, obs, shown, seed=decision_seed)
        action, result = apply_decision(env, obs, decision, decision_seed)
        steps.append(played_step(obs, decision, action, result))
        if on_step is not None:
            on_step(steps[-1], shown)
        obs, done = result.observation, result.done
    player.end_episode(env, obs)
    answer = env.format_answer([s.action for s in steps if s.valid and s.action])
    info: dict[str, Any] = {"rules": env.describe(), "transcript": env.transcript(), "answer": answer, "context": shown}
    if env.readings:  # how a reading of the opponent becomes advice, for a memory that names one (`Env.advice`)
        info["advice"] = {reading: env.advice(reading) for reading in env.readings}
    return Episode(index, seed, task, tuple(steps), env.score(), env.success(), info)


def game_seeds(run_seed: int, game: int) -> tuple[int, Callable[[int], int]]:
    """The seeds of game `game` (1-based) of the sequence seeded `run_seed` — its instance, and step → its
    decision's seed — by the rule sessions used before one config existed ("session-v1"), which MemoPilot's trainer
    keeps so that its sequences replay as those sessions did."""
    return derive_seed(run_seed, "game", game), lambda step: derive_seed(run_seed, "act", game, step)


def play_sequence_game(
    env: Env,
    player: Player,
    context: Callable[[str], str],
    run_seed: int,
    index: int,
) -> Episode:
    """Game `index` (1-based) of the sequence seeded `run_seed`, with `game_seeds`."""
    seed, act_seed = game_seeds(run_seed, index)
    return play_episode(env, player, context, index=index, seed=seed, act_seed=act_seed)


@dataclass
class Trial:
    seed: int
    attempts: list[Episode]
    instance: dict[str, Any] = field(default_factory=dict)

    @property
    def first_success(self) -> int | None:
        return next((attempt for attempt, e in enumerate(self.attempts, start=1) if e.success), None)


def play_trial(
    env: Env,
    player: Player,
    memory: Memory,
    *,
    seed: int,
    attempts: int,
    early_stop: bool,
    act_seed: Callable[[int, int], int],
    mark: Mark | None = None,
    observe_last: bool = False,
    episode_index: Callable[[int], int] = lambda attempt: attempt,
    per_step_context: bool = False,
    info: dict[str, Any] | None = None,
) -> Trial:
    """Up to `attempts` attempts at the instance `seed`, the memory writing between them (never after the last or
    after a success that ends the trial, unless `observe_last`: a memory carried to later units learns from every
    attempt). Each attempt sees the context the memory gave at its start (`per_step_context`: asked again at every
    decision, for the situation then). `act_seed(attempt, step)` seeds each decision; `episode_index(attempt)` is the
    index its episode carries; `info` is added to every episode's info before the memory sees it. The caller resets
    the memory; this only feeds it."""
    if attempts < 1:
        raise ValueError(f"a trial needs at least one attempt, got {attempts}")
    obs = env.reset(seed)
    trial = Trial(seed, [], env.instance_stats())
    for attempt in range(1, attempts + 1):
        if attempt > 1:
            obs = env.restart()
        if per_step_context:
            context = memory.context
        else:
            shown = memory.context(env.task())
            context = lambda _query, shown=shown: shown  # noqa: E731 - the attempt's context, fixed at its start
        episode = play_episode(
            env,
            player,
            context,
            index=episode_index(attempt),
            seed=seed,
            act_seed=lambda step, attempt=attempt: act_seed(attempt, step),
            obs=obs,
            mark=mark,
        )
        episode.info.update(info or {})
        trial.attempts.append(episode)
        last = attempt == attempts or bool(episode.success and early_stop)
        if last and not observe_last:
            break
        if mark is not None:
            mark("reflect", attempt, 0)
        memory.observe(episode)
        if last:
            break
    return trial
