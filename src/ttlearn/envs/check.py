"""`check_env`: the one contract check every environment must pass (in the spirit of Gymnasium's `check_env`).

It plays one seeded episode (random legal moves, an unusable free-text reply, or the oracle's moves), replays the
same moves on a twin built from the same options and, after `restart()`, on the environment itself, and checks what
the play loop, the trial runner, the memories and the reports rely on. Write a new
environment, then run `check_env(make_env("mine"))` — the test suite does it for every registered one.

An environment that declares `deterministic = False` (a real simulator) is held to what must still hold — legal
actions are strings, rewards and score are numbers, success is a bool, episodes end, the agent sees no hidden fact,
the oracle solves — and the checks that need two runs to agree are skipped and named in the result's "skipped".
"""

from __future__ import annotations

import random
from typing import Any

from ttlearn.envs.base import Env, make_env
from ttlearn.types import Observation, StepResult

MAX_STEPS = 400
HIDDEN_PHRASES = ("optimal", "fewest", "solvable", "gold", "canonical solution", "ground truth")
"""Words that only a hidden fact (a solution, a ceiling) would put into what the agent sees."""


class ContractError(AssertionError):
    """The environment breaks the contract; the message says which rule."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ContractError(message)


def _choose(env: Env, obs: Observation, rng: random.Random, use_oracle: bool, seed: int) -> str:
    if use_oracle:
        return env.oracle_action(seed=seed)
    if obs.legal_actions:
        return rng.choice(list(obs.legal_actions))
    return "this reply names no action"


def _play(env: Env, obs: Observation, seed: int, use_oracle: bool) -> tuple[list[str], list[StepResult]]:
    """An episode from `obs`: the oracle's moves, or seeded random legal moves (free text: an unusable reply,
    which must go through `invalid_step`)."""
    rng = random.Random(seed)
    actions: list[str] = []
    results: list[StepResult] = []
    done = False
    while not done:
        _require(len(actions) < MAX_STEPS, f"no end after {MAX_STEPS} steps")
        _require(all(isinstance(a, str) for a in obs.legal_actions), "legal actions must be strings")
        action = _choose(env, obs, rng, use_oracle, seed)
        if obs.legal_actions or use_oracle:
            result = env.step(action)
        else:
            passed = env.invalid_step(action)
            _require(passed is not None, "free-text actions need invalid_step to answer an unusable reply")
            result = passed
        _require(isinstance(result.reward, (int, float)), "rewards must be numbers")
        actions.append(action)
        results.append(result)
        obs, done = result.observation, result.done
    return actions, results


def _replay(env: Env, actions: list[str], free_text: bool) -> list[float]:
    rewards = []
    for action in actions:
        result = env.invalid_step(action) if free_text else env.step(action)
        assert result is not None
        rewards.append(result.reward)
    return rewards


def _seen_text(env: Env, first: Observation, results: list[StepResult], transcript: str) -> str:
    return "\n".join([env.describe(), env.task(), first.text, *(r.observation.text for r in results), transcript])


EXACT_CHECKS = (
    "reset(seed) is deterministic",
    "the same seed and moves give the same rewards",
    "restart() returns the initial observation and replays the same rewards",
    "reset(seed) plays instance seed % instance_count()",
)
"""What a `deterministic = False` environment is not checked for (the checks that compare two runs)."""


def check_env(env: Env, seed: int = 3, use_oracle: bool = False) -> dict[str, Any]:
    """Check `env` against the contract; raises `ContractError` naming the broken rule. With `use_oracle` the episode
    is played by `oracle_action`, which must then solve it where `success()` is defined. Returns what was played,
    and under "skipped" the checks a non-deterministic environment is spared. The twin it builds is closed."""
    twin = make_env(env.name, **env.config())
    try:
        return _check(env, twin, seed, use_oracle)
    finally:
        twin.close()


def _check(env: Env, twin: Env, seed: int, use_oracle: bool) -> dict[str, Any]:
    exact = env.deterministic
    first, twin_first = env.reset(seed), twin.reset(seed)
    _require(not exact or first == twin_first, "reset(seed) must be deterministic given the options and the seed")
    _require(isinstance(env.describe(), str) and env.describe().strip(), "describe() must give the rules")
    free_text = not first.legal_actions
    if use_oracle:
        _require(env.has_oracle, f"{env.name} has no oracle_action")
    actions, results = _play(env, first, seed, use_oracle)
    replays_free_text = free_text and not use_oracle
    _require(
        not exact or _replay(twin, actions, replays_free_text) == [r.reward for r in results],
        "the same seed and moves must give the same rewards",
    )
    score, success, transcript = env.score(), env.success(), env.transcript()
    _require(isinstance(score, (int, float)), "score() must be a number")
    _require(success is None or isinstance(success, bool), "success() must be a bool or None")
    if use_oracle and success is not None:
        _require(success, f"the oracle must solve instance {seed}")

    restarted = env.restart()
    _require(isinstance(restarted, Observation), "restart() must return an observation")
    if exact:
        _require(restarted == first, "restart() must return the instance's initial observation")
        replayed = _replay(env, actions, replays_free_text)
        _require(replayed == [r.reward for r in results], "after restart() the same moves must give the same rewards")
        _require(env.transcript() == transcript and env.score() == score, "a restarted replay must end the same way")

    seen = _seen_text(env, first, results, transcript).lower()
    leaked = [phrase for phrase in HIDDEN_PHRASES if phrase in seen]
    if free_text and env.has_oracle and not use_oracle:  # the gold answer (solution, query, call) must stay unseen
        env.restart()
        gold = env.oracle_action(seed=seed).strip().lower()
        leaked += [gold[:40]] if len(gold) >= 24 and gold in seen else []  # short calls may appear as examples
    _require(not leaked, f"what the agent sees holds hidden facts: {leaked}")

    count = env.instance_count()
    if count is not None:
        _require(count > 0, "instance_count() must be positive")
        same = not exact or twin.reset(seed + count) == first
        _require(same, "reset(seed) must play instance seed % instance_count()")
    skipped = [] if exact else list(EXACT_CHECKS)
    return {"actions": actions, "score": score, "success": success, "skipped": skipped}
