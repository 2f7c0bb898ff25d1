"""Which embedded model follows an explicit memory note? The measurement behind the default player.

A probe run through ttlearn's own player (real RPS prompt, shuffled options, log-likelihood scoring):
for each opponent move m, a note of increasing explicitness is put in the memory slot, and we count how often the
player picks the move that beats m. "no note" is the control: a model that follows notes moves from ~1/3 to ~1.
Each model answers with each choice method (plain scoring, surface-form scoring, grammar-constrained writing).

    TTLEARN_THREADS=1 python benchmarks/note_following.py --models smollm2,gemma270m --methods plain,forms --samples 20
"""

from __future__ import annotations

import argparse
import time

from ttlearn.agent import LLMPlayer
from ttlearn.envs import make_env
from ttlearn.llm import make_llm
from ttlearn.llm.base import CHOICE_METHODS

BEATS = {"rock": "paper", "paper": "scissors", "scissors": "rock"}
NOTES = {
    "no note": "",
    "fact": "Opponent always plays {m}.",
    "fact + reason": "Opponent always plays {m}, so {b} wins.",
    "instruction": "Play {b}.",
}


def follow_rate(llm, note: str, samples: int, temperature: float) -> float:
    env = make_env("rps", opponent="constant", rounds=20)
    obs = env.reset(0)
    player = LLMPlayer(llm, temperature=temperature)
    hits = total = 0
    for m, b in BEATS.items():
        memory = note.format(m=m, b=b)
        for i in range(samples):
            hits += player.act(env, obs, memory, seed=1000 * i + len(m)).action == b
            total += 1
    return hits / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="smollm2,gemma270m,qwen-coder,qwen-coder-1.5b")
    parser.add_argument("--methods", default=",".join(CHOICE_METHODS), help="choice methods, comma-separated")
    parser.add_argument("--samples", type=int, default=20, help="samples per opponent move (3 moves)")
    parser.add_argument("--temperature", type=float, default=0.7)
    args = parser.parse_args()
    print(f"| model | method | {' | '.join(NOTES)} | s/decision |")
    print(f"|---|---|{'---|' * len(NOTES)}---|")
    for model in args.models.split(","):
        for method in args.methods.split(","):
            llm = make_llm(f"{model}:{method}")
            start = time.perf_counter()
            rates = [follow_rate(llm, note, args.samples, args.temperature) for note in NOTES.values()]
            per = (time.perf_counter() - start) / (len(NOTES) * 3 * args.samples)
            print(f"| {model} | {method} | {' | '.join(f'{r:.2f}' for r in rates)} | {per:.2f} |", flush=True)
            llm.close()


if __name__ == "__main__":
    main()
