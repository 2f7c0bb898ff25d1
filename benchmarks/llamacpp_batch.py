"""Several sequences in one `llama_batch` against a context per sequence: speed, and whether it is exact.

llama.cpp can decode N independent sequences in one batch (a sequence id per row; here each with a KV stream of its
own, `kv_unified=false`), reading the weights once for N tokens. ttlearn instead gives each call in flight a context
of its own, whose replies are bit for bit the replies given alone. This script decodes the same N SQL prompts
greedily both ways and prints, per N: the decode seconds one at a time and in one batch (ratio measured in the same
run) and whether every step's logits of every sequence are bit for bit those of the sequence decoded alone.

    python benchmarks/llamacpp_batch.py [--llm qwen-coder] [--sizes 2 4 8] [--threads 1 2] [--steps 40]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from ttlearn.llm.llamacpp import native_stderr_silenced
from ttlearn.llm.models import model_path

N_BATCH = 64
TABLES = ["singer", "museum", "visitor", "pet", "teacher", "car", "orchestra", "player"]


def prompt(table: str) -> str:
    return (
        "<|im_start|>system\nYou write one SQLite query.<|im_end|>\n<|im_start|>user\n"
        f"Table {table}(id, name, age). List the names of every {table} older than 30, oldest first.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


class Decoder:
    """One llama.cpp context with `sequences` KV streams on the loaded model, driven through the low-level API."""

    def __init__(self, base: Any, sequences: int, threads: int) -> None:
        import llama_cpp
        from llama_cpp import _internals

        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = 2048 * sequences, N_BATCH, N_BATCH
        params.n_seq_max, params.kv_unified = sequences, False
        params.n_threads = params.n_threads_batch = threads
        with native_stderr_silenced():
            self.ctx = _internals.LlamaContext(model=base._model, params=params, verbose=False)
        self.batch = _internals.LlamaBatch(n_tokens=max(N_BATCH, sequences), embd=0, n_seq_max=sequences, verbose=False)
        self.n_vocab = base.n_vocab()

    def decode(self, rows: list[tuple[int, int, int, bool]]) -> None:
        """Evaluate rows of (token, position, sequence, wants logits) in one batch."""
        batch = self.batch.batch
        batch.n_tokens = len(rows)
        for j, (token, position, sequence, logits) in enumerate(rows):
            batch.token[j], batch.pos[j], batch.n_seq_id[j], batch.logits[j] = token, position, 1, logits
            batch.seq_id[j][0] = sequence
        self.ctx.decode(self.batch)

    def logits(self, row: int) -> np.ndarray:
        import llama_cpp

        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ctx.ctx, row), shape=(self.n_vocab,)).copy()

    def prefill(self, tokens: list[int], sequence: int) -> np.ndarray:
        """A prompt in the blocks of `N_BATCH` a fresh evaluation uses, alone in its batches; its last logits."""
        blocks = [tokens[start : start + N_BATCH] for start in range(0, len(tokens), N_BATCH)]
        for index, block in enumerate(blocks):
            self.decode([(t, index * N_BATCH + k, sequence, k == len(block) - 1) for k, t in enumerate(block)])
        return self.logits(len(blocks[-1]) - 1)


def greedy(decoder: Decoder, prompts: list[list[int]], steps: int) -> tuple[list[list[np.ndarray]], float]:
    """Every sequence prefilled alone, then `steps` greedy tokens for all of them in one batch per step: each step's
    logits per sequence, and the decode seconds."""
    last = [decoder.prefill(tokens, s) for s, tokens in enumerate(prompts)]
    seen = [[logits] for logits in last]
    positions = [len(tokens) for tokens in prompts]
    start = time.perf_counter()
    for _ in range(steps):
        decoder.decode([(int(np.argmax(last[s])), positions[s], s, True) for s in range(len(prompts))])
        last = [decoder.logits(s) for s in range(len(prompts))]
        for s in range(len(prompts)):
            seen[s].append(last[s])
            positions[s] += 1
    return seen, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llm", default="qwen-coder")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    from llama_cpp import Llama

    with native_stderr_silenced():
        base = Llama(model_path=str(model_path(args.llm)), n_ctx=512, n_batch=N_BATCH, verbose=False)
    print(f"{args.llm} · {args.steps} greedy tokens a sequence · prompts prefilled alone, decode timed")
    print("N  threads  one at a time  one batch  ratio  logits bit for bit")
    for threads in args.threads:
        for n in args.sizes:
            texts = [prompt(TABLES[i % len(TABLES)]) for i in range(n)]
            prompts = [base.tokenize(text.encode(), add_bos=True, special=True) for text in texts]
            alone, alone_s = [], 0.0
            for tokens in prompts:
                seen, seconds = greedy(Decoder(base, 1, threads), [tokens], args.steps)
                alone.append(seen[0])
                alone_s += seconds
            together, together_s = greedy(Decoder(base, n, threads), prompts, args.steps)
            exact = all(np.array_equal(a, b) for s in range(n) for a, b in zip(alone[s], together[s]))
            ratio = alone_s / together_s
            verdict = "yes" if exact else "no"
            print(f"{n:<2} {threads:^8} {alone_s:>10.2f} s {together_s:>8.2f} s {ratio:>5.2f}x  {verdict}")


if __name__ == "__main__":
    main()
