"""`check_env`: the one contract check every environment must pass (in the spirit of Gymnasium's `check_env`).

For each seed it plays one episode (random legal moves, an unusable free-text reply, or the oracle's moves), replays
the same moves on a twin built from the same options and, after each of `restarts` `restart()`s, on the environment
itself, and finally resets the first seed again; it checks what the play loop, the unit player, the memories and the
reports rely on. Write a new environment, then run `check_env(make_env("mine"))`, or `ttlearn check mine` for the
report of every rule — the test suite does it for every registered one. Several seeds and restarts catch
non-determinism that one episode may not show (a simulator that lists a room's contents in another order only in
some rooms, or after a restart).

An environment that declares `deterministic = False` (a real simulator) is held to what must still hold — legal
actions are strings, rewards and score are numbers, success is a bool, episodes end, the agent sees no hidden fact,
the oracle solves — and the checks that need two runs to agree are skipped and named in the result's "skipped"; no
twin is built for it, since nothing is compared (a simulator may take seconds to start).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

from ttlearn.envs.base import Env, make_env
from ttlearn.types import Observation, StepResult

MAX_STEPS = 400
HIDDEN_PHRASES = ("optimal", "fewest", "solvable", "gold", "canonical solution", "ground truth")
"""Words that only a hidden fact (a solution, a ceiling) would put into what the agent sees."""

DESCRIBES = "describe() must give the rules"
ENDS = f"an episode must end within {MAX_STEPS} steps"
STRINGS = "legal actions must be strings"
TIERS = "action_tier() must give an int or None for every legal action"
REWARDS = "rewards must be numbers"
REJECTS = "a rejected step must give the simulator's reason as text"
FREE_TEXT = "free-text actions need invalid_step to answer an unusable reply"
SCORES = "score() must be a number"
SUCCEEDS = "success() must be a bool or None"
ORACLE = "the oracle must solve every checked instance"
RESTARTS = "restart() must return an observation"
HIDDEN = "what the agent sees must hold no hidden facts"
COUNTS = "instance_count() must be positive"
ADVICE = "advice(reading) must give non-empty text for every declared reading"

RESETS = "reset(seed) must be deterministic given the options and the seed"
REPLAYS = "the same seed and moves must give the same rewards"
RESTART_SAME = "restart() must return the instance's initial observation and replay the same rewards"
RESET_AGAIN = "reset(seed) must give the same instance again after other seeds were played"
INSTANCES = "reset(seed) must play instance seed % instance_count()"
EXACT_CHECKS = (RESETS, REPLAYS, RESTART_SAME, RESET_AGAIN, INSTANCES)
"""What a `deterministic = False` environment is not checked for (the checks that compare two runs)."""

UNDECLARED = " (if the simulator is not deterministic, declare deterministic = False)"


class ContractError(AssertionError):
    """The environment breaks the contract; the message says which rule, `passed` the rules that held before."""

    def __init__(self, message: str, passed: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.passed = list(passed)


class _Rules:
    """The rules checked so far, in order; `require` raises `ContractError` naming the broken rule."""

    def __init__(self) -> None:
        self.passed: dict[str, None] = {}

    def require(self, condition: bool, rule: str, detail: str = "") -> None:
        if not condition:
            hint = UNDECLARED if rule in EXACT_CHECKS else ""
            held = [passed for passed in self.passed if passed != rule]  # it may have held on an earlier seed
            raise ContractError(rule + (f" ({detail})" if detail else "") + hint, held)
        self.passed.setdefault(rule)


def _choose(env: Env, obs: Observation, rng: random.Random, use_oracle: bool, seed: int) -> str:
    if use_oracle:
        return env.oracle_action(seed=seed)
    if obs.legal_actions:
        return rng.choice(list(obs.legal_actions))
    return "this reply names no action"


def _play(
    env: Env, obs: Observation, seed: int, use_oracle: bool, rules: _Rules
) -> tuple[list[str], list[StepResult], int]:
    """An episode from `obs`: the oracle's moves, or seeded random legal moves (free text: an unusable reply,
    which must go through `invalid_step`). Also returns the most legal actions one step offered."""
    rng = random.Random(seed)
    actions: list[str] = []
    results: list[StepResult] = []
    most = 0
    done = False
    while not done:
        rules.require(len(actions) < MAX_STEPS, ENDS)
        rules.require(all(isinstance(a, str) for a in obs.legal_actions), STRINGS)
        tiers = {env.action_tier(a) for a in obs.legal_actions}
        rules.require(all(t is None or isinstance(t, int) for t in tiers), TIERS, f"got {sorted(map(repr, tiers))}")
        most = max(most, len(obs.legal_actions))
        action = _choose(env, obs, rng, use_oracle, seed)
        if obs.legal_actions or use_oracle:
            result = env.step(action)
        else:
            passed = env.invalid_step(action)
            rules.require(passed is not None, FREE_TEXT)
            assert passed is not None
            result = passed
        rules.require(isinstance(result.reward, (int, float)), REWARDS)
        rejected = result.rejected
        rules.require(rejected is None or (isinstance(rejected, str) and bool(rejected.strip())), REJECTS)
        actions.append(action)
        results.append(result)
        obs, done = result.observation, result.done
    return actions, results, most


def _replay(env: Env, actions: list[str], free_text: bool) -> list[float]:
    rewards = []
    for action in actions:
        result = env.invalid_step(action) if free_text else env.step(action)
        assert result is not None
        rewards.append(result.reward)
    return rewards


def _seen_text(env: Env, first: Observation, results: list[StepResult], transcript: str) -> str:
    return "\n".join([env.describe(), env.task(), first.text, *(r.observation.text for r in results), transcript])


def check_env(
    env: Env, seed: int = 3, use_oracle: bool = False, *, seeds: Sequence[int] | None = None, restarts: int = 1
) -> dict[str, Any]:
    """Check `env` against the contract on `seeds` (default: `seed` alone), restarting each instance `restarts`
    times; raises `ContractError` naming the broken rule. With `use_oracle` the episodes are played by
    `oracle_action`, which must then solve them where `success()` is defined. Returns what the first seed played
    ("actions", "score", "success"), the rules that held ("passed"), those a non-deterministic environment is spared
    ("skipped"), the most legal actions one step offered ("most_actions") and the time taken ("seconds"). The twin
    it builds (deterministic environments only) is closed."""
    seeds = [seed] if seeds is None else list(seeds)
    if not seeds or restarts < 1:
        raise ValueError("check_env needs at least one seed and one restart")
    started = time.perf_counter()
    twin = make_env(env.name, **env.config()) if env.deterministic else None
    try:
        report = _check(env, twin, seeds, restarts, use_oracle)
    finally:
        if twin is not None:
            twin.close()
    return {**report, "seconds": time.perf_counter() - started}


def _check(env: Env, twin: Env | None, seeds: list[int], restarts: int, use_oracle: bool) -> dict[str, Any]:
    rules = _Rules()
    rules.require(isinstance(env.describe(), str) and bool(env.describe().strip()), DESCRIBES)
    for reading in env.readings:
        advice = env.advice(reading)
        rules.require(isinstance(advice, str) and bool(advice.strip()), ADVICE, repr(reading))
    if use_oracle:
        rules.require(env.has_oracle, f"{env.name} has no oracle_action")
    played = [_check_seed(env, twin, seed, restarts, use_oracle, rules) for seed in seeds]
    if twin is not None and len(seeds) > 1:
        again = env.reset(seeds[0])
        rules.require(again == played[0]["first"], RESET_AGAIN, f"seed {seeds[0]}")
    first = played[0]
    return {
        "actions": first["actions"],
        "score": first["score"],
        "success": first["success"],
        "passed": list(rules.passed),
        "skipped": [] if twin is not None else list(EXACT_CHECKS),
        "seeds": seeds,
        "restarts": restarts,
        "most_actions": max(p["most"] for p in played),
        "partial_actions": env.partial_actions,
    }


def _check_seed(
    env: Env, twin: Env | None, seed: int, restarts: int, use_oracle: bool, rules: _Rules
) -> dict[str, Any]:
    """The checks of one instance: play it, replay it on the twin and after each restart, look for hidden facts."""
    first = env.reset(seed)
    if twin is not None:
        rules.require(twin.reset(seed) == first, RESETS, f"seed {seed}: the twin saw another first observation")
    free_text = not first.legal_actions
    actions, results, most = _play(env, first, seed, use_oracle, rules)
    replays_free_text = free_text and not use_oracle
    rewards = [r.reward for r in results]
    if twin is not None:
        rules.require(_replay(twin, actions, replays_free_text) == rewards, REPLAYS, f"seed {seed}")
    score, success, transcript = env.score(), env.success(), env.transcript()
    rules.require(isinstance(score, (int, float)), SCORES)
    rules.require(success is None or isinstance(success, bool), SUCCEEDS)
    if use_oracle and success is not None:
        rules.require(success, ORACLE, f"instance {seed} unsolved")

    for number in range(1, restarts + 1):
        restarted = env.restart()
        rules.require(isinstance(restarted, Observation), RESTARTS)
        if twin is not None:
            where = f"seed {seed}, restart {number}"
            rules.require(restarted == first, RESTART_SAME, f"{where}: another initial observation")
            replayed = _replay(env, actions, replays_free_text)
            rules.require(replayed == rewards, RESTART_SAME, f"{where}: other rewards")
            same_end = env.transcript() == transcript and env.score() == score
            rules.require(same_end, RESTART_SAME, f"{where}: another transcript or score")

    seen = _seen_text(env, first, results, transcript).lower()
    leaked = [phrase for phrase in HIDDEN_PHRASES if phrase in seen]
    if free_text and env.has_oracle and not use_oracle:  # the gold answer (solution, query, call) must stay unseen
        env.restart()
        gold = env.oracle_action(seed=seed).strip().lower()
        leaked += [gold[:40]] if len(gold) >= 24 and gold in seen else []  # short calls may appear as examples
    rules.require(not leaked, HIDDEN, f"found {leaked}")

    count = env.instance_count()
    if count is not None:
        rules.require(count > 0, COUNTS)
        if twin is not None:
            rules.require(twin.reset(seed + count) == first, INSTANCES, f"seed {seed} and {seed + count}")
    return {"first": first, "actions": actions, "score": score, "success": success, "most": most}
