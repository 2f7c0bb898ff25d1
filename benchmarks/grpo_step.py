"""Tokens/s of one MemoPilot training step vs a raw forward + backward of the same model on the same batch.

    python benchmarks/grpo_step.py [--group 4 --games 4 --rounds 10 --max-completion-length 64 --repeats 3]

The batch is recorded once: G rollouts of T games with a random scripted player (fast; the writer's prompts then
have their real length), so the G·(T−1) writes are the writer's real prompts and samples. Then, alternating:
  raw:  the model on the same micro-batches (left-padded prompt + completion), mean log-softmax of the kept
        positions, backward — no log-prob gathering, no clipping, no optimiser;
  step: `policy_update` (log-probs at the sampling temperature, PPO loss, backward, clip, AdamW step).
Reported: median tokens/s of each (prompt + completion tokens) and the ratio step / raw. Target ≥ 0.8.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
import torch

from ttlearn.llm.hf import positions_from_mask
from ttlearn.train.memopilot import (
    MemoPilotTrainConfig,
    MemoPilotTrainer,
    policy_update,
)


def raw_forward_backward(trainer: MemoPilotTrainer, writes: list) -> None:
    policy, size = trainer.policy, trainer.config.micro_batch
    for i in range(0, len(writes), size):
        rows = [list(w.sample.prompt_ids) + list(w.sample.completion_ids) for w in writes[i : i + size]]
        keep = max(len(w.sample.completion_ids) for w in writes[i : i + size]) + 1
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), policy.pad_id)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            ids[r, width - len(row) :], mask[r, width - len(row) :] = torch.tensor(row), 1
        logits = policy.model(
            input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask), logits_to_keep=keep
        ).logits
        torch.log_softmax(logits.float(), -1).mean().backward()
    policy.model.zero_grad(set_to_none=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--games", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--max-completion-length", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = MemoPilotTrainConfig(
        opponents=["cycle3"],
        games=args.games,
        rounds=args.rounds,
        group=args.group,
        max_completion_length=args.max_completion_length,
        micro_batch=args.micro_batch,
        player="scripted:random",
        eval_every=0,
        out=tempfile.mkdtemp(prefix="grpo-bench-"),
    )
    trainer = MemoPilotTrainer(config)
    writes, _, _ = trainer.rollout(0, "cycle3", 1, list(range(args.group)), 1.0, sample_seed=1)
    advantages = np.random.default_rng(0).standard_normal(len(writes))
    tokens = sum(len(w.sample.prompt_ids) + len(w.sample.completion_ids) for w in writes)
    completion = sum(len(w.sample.completion_ids) for w in writes)
    print(f"batch: {len(writes)} writes, {tokens} tokens ({completion} completion), micro-batch {args.micro_batch}")
    raw_tps, step_tps = [], []
    raw_forward_backward(trainer, writes[: args.micro_batch])  # warm-up
    for _ in range(args.repeats):
        start = time.perf_counter()
        raw_forward_backward(trainer, writes)
        raw_tps.append(tokens / (time.perf_counter() - start))
        start = time.perf_counter()
        policy_update(trainer.policy, trainer.optimizer, writes, advantages, config)
        step_tps.append(tokens / (time.perf_counter() - start))
    raw, step = statistics.median(raw_tps), statistics.median(step_tps)
    print(f"raw forward+backward: {raw:8.1f} tok/s  (runs: {', '.join(f'{x:.1f}' for x in raw_tps)})")
    print(f"GRPO training step:   {step:8.1f} tok/s  (runs: {', '.join(f'{x:.1f}' for x in step_tps)})")
    print(f"ratio step/raw: {step / raw:.3f}  (target >= 0.8)")


if __name__ == "__main__":
    main()
