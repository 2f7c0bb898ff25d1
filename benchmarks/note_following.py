"""Which embedded model follows an explicit memory note? The measurement behind the default player.

A probe run through ttlearn's own prompt (the real RPS rules, the note in the memory slot, the options listed): for
each opponent move m, a note of increasing explicitness is put in the memory slot, and we measure how often the player
picks the move that beats m. "no note" is the control: a model that follows notes moves from ~1/3 to ~1.

Each model answers with each choice method (plain scoring, surface-form scoring, grammar-constrained writing). The
options are listed in each of their three rotations, so every move is seen once in every position (the tiny models'
strong position bias cancels). A scoring method returns its choice scores, so the rate is the exact probability of a
sample at the temperature, softmax(score / T), not a count of draws; the grammar method is sampled `--draws` times.

    TTLEARN_THREADS=1 python benchmarks/note_following.py --models smollm2,gemma270m --methods plain,forms,grammar
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from ttlearn.envs import make_env
from ttlearn.llm import make_llm
from ttlearn.llm.base import CHOICE_METHODS
from ttlearn.players.llm import build_messages

BEATS = {"rock": "paper", "paper": "scissors", "scissors": "rock"}
NOTES = {
    "no note": "",
    "fact": "Opponent always plays {m}.",
    "fact + reason": "Opponent always plays {m}, so {b} wins.",
    "instruction": "Play {b}.",
}


def follow_rate(llm, note: str, temperature: float, draws: int) -> tuple[float, int]:
    """(mean probability of playing the move that beats m, number of LLM calls)."""
    env = make_env("rps", opponent="constant", rounds=20)
    obs = env.reset(0)
    moves = list(obs.legal_actions)
    rates, calls = [], 0
    for m, b in BEATS.items():
        for shift in range(len(moves)):
            options = moves[shift:] + moves[:shift]
            messages = build_messages(env.describe(), note.format(m=m, b=b), obs.text, options)
            for seed in range(draws):
                reply = llm.complete(messages, choices=options, temperature=temperature, seed=seed)
                calls += 1
                if reply.choice_logprobs is not None:  # the exact probability that a sample picks b
                    scores = np.array([reply.choice_logprobs[o] for o in options]) / temperature
                    weights = np.exp(scores - scores.max())
                    rates.append(weights[options.index(b)] / weights.sum())
                    break
                rates.append(float(reply.text == b))
    return float(np.mean(rates)), calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="smollm2,gemma270m,qwen-coder,qwen-coder-1.5b")
    parser.add_argument("--methods", default=",".join(CHOICE_METHODS), help="choice methods, comma-separated")
    parser.add_argument("--draws", type=int, default=4, help="samples per prompt for a method that returns no scores")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--notes", default=",".join(NOTES), help="a subset of the notes, comma-separated")
    args = parser.parse_args()
    notes = {name: NOTES[name] for name in args.notes.split(",")}
    print(f"| model | method | {' | '.join(notes)} | s/call |")
    print(f"|---|---|{'---|' * len(notes)}---|")
    for model in args.models.split(","):
        for method in args.methods.split(","):
            llm = make_llm(f"{model}:{method}")
            start = time.perf_counter()
            results = [follow_rate(llm, note, args.temperature, args.draws) for note in notes.values()]
            per = (time.perf_counter() - start) / sum(calls for _, calls in results)
            rates = " | ".join(f"{rate:.2f}" for rate, _ in results)
            print(f"| {model} | {method} | {rates} | {per:.2f} |", flush=True)
            llm.close()


if __name__ == "__main__":
    main()
