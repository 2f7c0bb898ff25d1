"""The most a memory can give a model: success with no memory, with a repeated task's verified answer, with a
distractor — the first check for any new model.

Tasks repeat when the environment says so: instances whose `instance_stats()["answer_key"]` agree are the same task
in other words (Spider: paraphrases with one gold query). The benchmark plays every selected instance once without
memory (the control, and the source of verified answers: only the model's own answers that the environment accepted,
never gold data), then plays each instance that has a solved repeat again twice:

- **repeat**: the memory slot shows the repeat's task and its verified answer, rendered exactly as MemRL's
  `write=answer` items are (`render_answer`);
- **distractor**: the same, for the solved non-repeat whose task shares the most words with this one.

Each arm is paired with the control on the same instances (exact McNemar). A model that gains nothing in the repeat
arm cannot gain from a retrieval memory either; a large loss in the distractor arm says retrieval precision matters
more than recall. The ratio columns divide by the control's success.

    python benchmarks/memory_ceiling.py --llm qwen-coder --env sql -e split=train -e database=NAME [--tasks N]
"""

from __future__ import annotations

import argparse
import re
import time
from collections import defaultdict

from ttlearn.envs import make_env
from ttlearn.eval.metrics import mcnemar_exact
from ttlearn.llm import make_llm
from ttlearn.memory.memrl import render_answer
from ttlearn.players.llm import LLMPlayer
from ttlearn.rollout.loop import play_episode
from ttlearn.seeding import derive_seed

WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


def parse_options(pairs: list[str]) -> dict:
    options = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        options[key] = int(value) if value.lstrip("-").isdigit() else value
    return options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="qwen-coder")
    parser.add_argument("--env", default="sql")
    parser.add_argument("-e", "--env-opt", action="append", default=[], help="environment option KEY=VALUE")
    parser.add_argument("--tasks", type=int, default=0, help="at most this many instances (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    env = make_env(args.env, **parse_options(args.env_opt))
    count = env.instance_count()
    if count is None:
        raise SystemExit(f"{args.env} generates its instances: no task repeats, so there is no ceiling to measure")
    instances = range(count if args.tasks <= 0 else min(count, args.tasks))
    keys, tasks = {}, {}
    for i in instances:
        env.reset(i)
        key = env.instance_stats().get("answer_key")
        if key is None:
            raise SystemExit(f"{args.env} names no answer_key in instance_stats(): it cannot say which tasks repeat")
        keys[i], tasks[i] = key, env.task()
    groups = defaultdict(list)
    for i, key in keys.items():
        groups[key].append(i)
    print(f"{args.env} {args.env_opt}: {len(keys)} instances, {sum(len(g) > 1 for g in groups.values())} repeated "
          f"tasks covering {sum(len(g) for g in groups.values() if len(g) > 1)} instances · player {args.llm}")

    player = LLMPlayer(make_llm(args.llm), retries=0)

    def play(i: int, note: str):
        return play_episode(env, player, lambda _query: note, index=1, seed=i,
                            act_seed=lambda step: derive_seed(args.seed, "ceiling", i, step))

    start = time.perf_counter()
    control, answers = {}, {}
    for n, i in enumerate(instances, 1):
        episode = play(i, "")
        control[i] = bool(episode.success)
        if episode.success:
            answers[i] = episode.info["answer"]
        print(f"\rcontrol {n}/{len(keys)} · solved {sum(control.values())}", end="", flush=True)
    print()
    arms: dict[str, dict[int, bool]] = {"repeat": {}, "distractor": {}}
    for i in instances:
        repeats = [j for j in groups[keys[i]] if j != i and j in answers]
        others = [j for j in answers if keys[j] != keys[i]]
        if not repeats or not others:
            continue
        shown = {
            "repeat": repeats[0],
            "distractor": max(others, key=lambda j: (len(words(tasks[j]) & words(tasks[i])), -j)),
        }
        for arm, j in shown.items():
            arms[arm][i] = bool(play(i, render_answer(tasks[j], answers[j], True)).success)
        print(f"\rmemory arms: {len(arms['repeat'])} instances", end="", flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s")
    paired = sorted(arms["repeat"])
    if not paired:
        print("no instance has a solved repeat: nothing to compare (more tasks, or another database)")
        return
    base = sum(control[i] for i in paired)
    print(f"\n{len(paired)} instances with a solved repeat        solved   ratio to control   only arm / only ctl   p")
    print(f"no memory (control)                      {base:6d}   {1.0:16.2f}")
    for arm in ("repeat", "distractor"):
        got = sum(arms[arm][i] for i in paired)
        only_arm = sum(arms[arm][i] and not control[i] for i in paired)
        only_ctl = sum(control[i] and not arms[arm][i] for i in paired)
        ratio = got / base if base else float("inf")
        print(f"{arm + ' answer shown':40s} {got:6d}   {ratio:16.2f}   {only_arm:9d} / {only_ctl:<9d} "
              f"{mcnemar_exact(only_arm, only_ctl):.3g}")


if __name__ == "__main__":
    main()
