"""Independent sequences side by side on one back end: aggregate decode throughput at N = 1, 2, 4 in flight against
the same N replies one at a time, ratios measured in the same run.

Each of N threads asks the one shared back end for a greedy reply to a prompt of its own (short SQL questions, each
under one 64-token block, so no prompt reuses another's cache). On the embedded runtime every call in flight runs on a
llama.cpp context of its own over the shared weights (`Slot`) with an equal share of the threads; one at a time, each
call gets all of them. `--llm hf:smollm2` measures the torch back end the same way (calls in flight share the model,
torch's threads as `--threads` sets them, else torch's default), any other spec its own back end. For every N both
orders are measured `--repeats` times, alternating, and the script prints tokens generated per second (prompt
evaluation included), the ratio together ÷ one at a time (goal on 2 idle cores: ≥ 1.8 at N = 2, ≥ 2.5 at N = 4),
and whether every reply in flight was the one given alone.

    python benchmarks/decode_throughput.py [--llm qwen-coder|hf:smollm2|SPEC] [--sizes 1 2 4] [--tokens 64]
        [--repeats 2] [--threads T]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from ttlearn.llm import LLM, make_llm
from ttlearn.llm.cores import default_threads
from ttlearn.llm.llamacpp import LlamaCpp
from ttlearn.llm.models import EMBEDDED, model_path

TABLES = ["singer", "concert", "stadium", "employee", "shop", "course", "student", "teacher"]


def ask(table: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Write a long SQLite query with joins and comments over the table {table}."}]


def replies(llm: LLM, prompts: list[list[dict[str, str]]], tokens: int, together: bool) -> tuple[list, float]:
    """The greedy replies to `prompts` (all in flight at once, or one after another) and the wall seconds."""

    def one(prompt: list[dict[str, str]]) -> tuple[str, int]:
        reply = llm.complete(prompt, max_tokens=tokens, temperature=0.0, seed=0)
        return reply.text, reply.completion_tokens

    start = time.perf_counter()
    if together:
        with ThreadPoolExecutor(len(prompts)) as pool:
            answers = list(pool.map(one, prompts))
    else:
        answers = [one(prompt) for prompt in prompts]
    return answers, time.perf_counter() - start


def load(spec: str, threads: int | None, slots: int) -> tuple[LLM, str]:
    """The back end under test and its thread count, as printed."""
    if spec in EMBEDDED:
        threads = threads or default_threads()
        llm = LlamaCpp(model_path(spec), spec, n_threads=threads, max_slots=slots)
        llm.greedy_replies = None  # every reply evaluated: the same prompts are asked alone and in flight
        return llm, str(threads)
    if spec.startswith("hf"):
        import torch

        if threads:
            torch.set_num_threads(threads)
        return make_llm(spec), f"torch {torch.get_num_threads()}"
    return make_llm(spec), "the server's"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="qwen-coder", help=f"an embedded model ({', '.join(EMBEDDED)}) or any spec")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4], help="sequences in flight together")
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per reply (at most)")
    parser.add_argument("--repeats", type=int, default=2, help="alternating pairs of measurements per size")
    parser.add_argument(
        "--threads", type=int, default=None, help="llama.cpp's threads (default: from what is idle), or torch's for hf:"
    )
    args = parser.parse_args()
    if max(args.sizes) > len(TABLES) or min(args.sizes) < 1:
        raise SystemExit(f"--sizes must lie in 1..{len(TABLES)}")
    llm, threads = load(args.llm, args.threads, max(args.sizes))
    print(
        f"{args.llm} · {threads} thread(s) · side_by_side {llm.side_by_side} · up to {args.tokens} tokens a reply · "
        f"{args.repeats} repeat(s)"
    )
    print("N   one at a time tok/s   together tok/s   ratio   per-repeat ratios   replies alike")
    try:
        llm.complete(ask(TABLES[0]), max_tokens=4)  # warm: weights paged in before the first clock
        for size in args.sizes:
            prompts = [ask(table) for table in TABLES[:size]]
            walls: dict[bool, list[float]] = {False: [], True: []}
            made: dict[bool, int] = {}
            alike = True
            for _ in range(args.repeats):
                seen = {}
                for together in (False, True):
                    seen[together], wall = replies(llm, prompts, args.tokens, together)
                    walls[together].append(wall)
                    made[together] = sum(count for _, count in seen[together])
                alike &= seen[True] == seen[False]
            alone_rate = made[False] * args.repeats / sum(walls[False])
            together_rate = made[True] * args.repeats / sum(walls[True])
            pairs = [a / b for a, b in zip(walls[False], walls[True])]
            print(
                f"{size:<3d} {alone_rate:19.2f} {together_rate:16.2f} {together_rate / alone_rate:7.2f}"
                f"   {min(pairs):.2f}–{max(pairs):.2f}{'':9s}{'yes' if alike else 'NO'}"
            )
    finally:
        llm.close()


if __name__ == "__main__":
    main()
