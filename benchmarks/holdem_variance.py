"""How many hands does heads-up limit hold'em need? Per-hand SD with and without duplicate dealing.

For each styled opponent, a baseline bot plays the player's seat for `--hands` hands, once with plain dealing and
once with duplicate dealing (the same number of hands, as mirrored pairs). It prints the per-hand SD in big blinds,
the hands needed to resolve 100 mbb/hand at 95 % (n = (1.96 · SD / 0.1)²) and the baseline's win rate with its
95 % CI from the duplicate run.

    PYTHONPATH=src python benchmarks/holdem_variance.py --hands 2000 --player tight
"""

from __future__ import annotations

import argparse
import math
import time

from ttlearn.envs.holdem import HoldemEnv, hands_needed, mbb_per_hand, per_hand_sd
from ttlearn.envs.holdem_bots import STYLES


def play(opponent: str, player: str, hands: int, duplicate: bool, seed: int) -> list[float]:
    """The player's per-hand results in bb over one game of `hands` hands."""
    env = HoldemEnv(opponent=opponent, hands=hands // 2 if duplicate else hands, duplicate=duplicate, seed=seed)
    env.reset(seed)
    done = False
    while not done:
        done = env.step(env.bot_action(player)).done
    return [r.player_net_bb for r in env.records]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hands", type=int, default=2000)
    parser.add_argument("--player", default="tight", choices=list(STYLES))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    print(f"baseline player: {args.player}; {args.hands} hands per cell; margin ±100 mbb/hand at 95 %\n")
    print(
        "| opponent | SD/hand plain (bb) | hands needed plain | SD/hand duplicate (bb) | hands needed duplicate "
        "| variance ratio | baseline mbb/hand (duplicate, 95 % CI) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    start = time.perf_counter()
    for opponent in STYLES:
        plain = play(opponent, args.player, args.hands, duplicate=False, seed=args.seed)
        dup = play(opponent, args.player, args.hands, duplicate=True, seed=args.seed)
        sd_plain, sd_dup = per_hand_sd(plain), per_hand_sd(dup, duplicate=True)
        rate = mbb_per_hand(sum(dup), len(dup))
        half_width = 1000 * 1.96 * sd_dup / math.sqrt(len(dup))
        ratio = f"{(sd_plain / sd_dup) ** 2:.1f}×" if sd_dup else "— (self-play)"
        print(
            f"| {opponent} | {sd_plain:.2f} | {hands_needed(sd_plain):,.0f} | {sd_dup:.2f} | "
            f"{hands_needed(sd_dup):,.0f} | {ratio} | {rate:+.0f} ± {half_width:.0f} |"
        )
    hands_played = 2 * args.hands * len(STYLES)
    print(
        f"\n{hands_played} hands in {time.perf_counter() - start:.0f} s "
        f"({1000 * (time.perf_counter() - start) / hands_played:.1f} ms/hand)"
    )


if __name__ == "__main__":
    main()
