"""How often GiGPO's step groups form: the share of action steps whose anchor recurs in its group (instance).

A step alone with its anchor gets A_step = 0, so this share bounds how much of the batch the step advantage reaches.
Compared: the observation text (the old anchor: it holds the turn counter and the last move) and (attempt,
`env.state_key()`) (the board alone). The first step of an attempt is left out: every trial starts on the same board,
so it always shares. The trials are played by the seeded random scripted player, no LLM needed.

    python benchmarks/gigpo_anchors.py --instances 20 --group 4 --attempts 3
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Hashable

from ttlearn.envs.base import make_env
from ttlearn.memory.base import make_memory
from ttlearn.players.base import PLAYERS
from ttlearn.rollout.loop import play_trial
from ttlearn.seeding import derive_seed


def shared_shares(env_name: str, instances: int, group: int, attempts: int) -> tuple[int, float, float]:
    """(later steps counted, share with a recurring text anchor, share with a recurring (attempt, state) anchor)."""
    env, player = make_env(env_name), PLAYERS.build("random")
    counted = by_text = by_state = 0
    for instance in range(instances):
        steps: list[tuple[str, Hashable, int]] = []
        for trial in range(group):
            states: dict[tuple[int, int], Hashable] = {}

            def mark(kind: str, attempt: int, index: int, states=states) -> None:
                if kind == "act":
                    states[(attempt, index)] = env.state_key()

            played = play_trial(
                env,
                player,
                make_memory("none"),
                seed=derive_seed(7, instance),
                attempts=attempts,
                early_stop=False,
                mark=mark,
                act_seed=lambda a, s, t=trial, i=instance: derive_seed(1, i, t, a, s),
            )
            for episode in played.attempts:
                for index, step in enumerate(episode.steps):
                    steps.append((step.observation, (episode.index, states[(episode.index, index)]), index))
        texts, anchors = Counter(s[0] for s in steps), Counter(s[1] for s in steps)
        later = [s for s in steps if s[2] > 0]
        counted += len(later)
        by_text += sum(texts[s[0]] > 1 for s in later)
        by_state += sum(anchors[s[1]] > 1 for s in later)
    return counted, by_text / counted, by_state / counted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=20)
    parser.add_argument("--group", type=int, default=4, help="trials per instance")
    parser.add_argument("--attempts", type=int, default=3)
    args = parser.parse_args()
    for name in ("sokoban", "minesweeper"):
        counted, text, state = shared_shares(name, args.instances, args.group, args.attempts)
        print(
            f"{name}: {counted} later steps; anchor recurs in its group: text {text:.1%}, (attempt, state) {state:.1%}"
        )


if __name__ == "__main__":
    main()
