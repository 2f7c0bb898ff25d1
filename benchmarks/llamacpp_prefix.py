"""What exact replies cost: llama.cpp with whole-block prefix reuse (ttlearn's) against unrestricted prefix reuse.

Unrestricted reuse keeps every cached token a new prompt shares with the last one; the kept keys and values were
computed in other batches than a fresh evaluation would use, so a greedy reply can depend on the calls before it.
ttlearn keeps only whole aligned `n_batch` blocks of the previous prompt (`Slot.reuse_exactly`). This script
answers the same SQL prompts (one database's questions, ttlearn's own prompt) in two orders with each policy, and
prints how many replies differ between the orders (exactness) and the wall time of each policy (ratio to the
unrestricted baseline, measured in the same run).

    python benchmarks/llamacpp_prefix.py [--llm qwen-coder] [--database concert_singer] [--prompts 6]
"""

from __future__ import annotations

import argparse
import time

from ttlearn.envs.sql import SQLEnv
from ttlearn.llm.llamacpp import LlamaCpp, Slot
from ttlearn.llm.models import EMBEDDED, model_path
from ttlearn.players.llm import build_messages


def reuse_everything(self: Slot, tokens: list[int]) -> None:
    """The policy before: keep the longest cached prefix, whatever batch computed it."""
    common = 0
    for a, b in zip(self.llama.input_ids[: self.llama.n_tokens], tokens[:-1]):
        if a != b:
            break
        common += 1
    self.llama.n_tokens = common


def answer_all(llm: LlamaCpp, prompts: list[list[dict]], order: list[int]) -> tuple[dict[int, str], float]:
    start = time.perf_counter()
    replies = {i: llm.complete(prompts[i], max_tokens=SQLEnv.reply_tokens, temperature=0.0, seed=0).text for i in order}
    return replies, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="qwen-coder")
    parser.add_argument("--database", default="concert_singer")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--n-batch", type=int, default=64, help="llama.cpp's batch (the reuse block) size")
    args = parser.parse_args()
    env = SQLEnv(database=args.database)
    prompts = []
    for seed in range(args.prompts):
        obs = env.reset(seed)
        prompts.append(build_messages(env.describe(), "", obs.text, ()))
    if args.llm not in EMBEDDED:
        raise SystemExit(f"{args.llm} is not an embedded llama.cpp model; choose one of: {', '.join(EMBEDDED)}")
    llm = LlamaCpp(model_path(args.llm), args.llm, n_batch=args.n_batch)
    llm.greedy_replies = None  # every reply evaluated: the same prompts are asked in two orders
    tokens = [len(llm._tokens(llm.render(p), first=True)) for p in prompts]
    forward, backward = list(range(len(prompts))), list(reversed(range(len(prompts))))
    results = {}
    exact = Slot.reuse_exactly
    for policy in ("unrestricted", "whole blocks"):
        Slot.reuse_exactly = reuse_everything if policy == "unrestricted" else exact
        a, time_a = answer_all(llm, prompts, forward)
        b, time_b = answer_all(llm, prompts, backward)
        differ = sum(a[i] != b[i] for i in forward)
        results[policy] = (differ, time_a + time_b)
    Slot.reuse_exactly = exact
    base = results["unrestricted"][1]
    print(
        f"{args.llm} · n_batch {args.n_batch} · {len(prompts)} Spider prompts ({args.database}, "
        f"{min(tokens)}–{max(tokens)} tokens) answered in two orders, greedy"
    )
    print("policy          replies that differ between orders   wall s   ratio to unrestricted")
    for policy, (differ, wall) in results.items():
        print(f"{policy:15s} {differ:12d} of {len(prompts):<22d} {wall:7.1f}   {wall / base:8.2f}")


if __name__ == "__main__":
    main()
