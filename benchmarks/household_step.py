"""A household step through the env vs a raw TextWorldExpress step (target: ratio ≤ 1.2).

Plays the gold-path oracle once per seed to record the actions, then replays those actions in alternating rounds,
through `Household.step` and straight on the same simulator (`TextWorldExpressEnv.step`, same JVM, same game), and
prints the median time per step of each and their ratio. Resets are not timed.

    python benchmarks/household_step.py --game twc --seeds 20 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

from ttlearn.envs.household import Household, fold_seed


def record(env: Household, seeds: range) -> list[tuple[int, list[str]]]:
    episodes = []
    for seed in seeds:
        env.reset(seed)
        actions: list[str] = []
        while not env.done:
            actions.append(env.oracle_action(seed))
            env.step(actions[-1])
        episodes.append((seed, actions))
    return episodes


def through_env(env: Household, episodes: list[tuple[int, list[str]]]) -> float:
    total = 0.0
    for seed, actions in episodes:
        env.reset(seed)
        start = time.perf_counter()
        for action in actions:
            env.step(action)
        total += time.perf_counter() - start
    return total


def raw(env: Household, episodes: list[tuple[int, list[str]]]) -> float:
    simulator, total = env._simulator(), 0.0
    for seed, actions in episodes:
        simulator.reset(seed=fold_seed(env.split, seed), gameFold=env.split, generateGoldPath=False)
        start = time.perf_counter()
        for action in actions:
            simulator.step(action)
        total += time.perf_counter() - start
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--game", default="twc", choices=["twc", "cookingworld"])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    env = Household(game=args.game)
    try:
        episodes = record(env, range(args.seeds))
        steps = sum(len(actions) for _, actions in episodes)
        through_env(env, episodes), raw(env, episodes)  # warm the JVM's compiler on both paths
        env_s, raw_s = [], []
        for _ in range(args.rounds):
            env_s.append(through_env(env, episodes) / steps)
            raw_s.append(raw(env, episodes) / steps)
    finally:
        env.close()
    env_us, raw_us = statistics.median(env_s) * 1e6, statistics.median(raw_s) * 1e6
    print(f"{args.game}: {steps} steps x {args.rounds} rounds")
    print(f"per step: household {env_us:.0f} us, raw TextWorldExpress {raw_us:.0f} us")
    print(f"ratio: {env_us / raw_us:.3f} (target <= 1.2)")


if __name__ == "__main__":
    main()
