"""One process of `test_lamer_data_parallel`: LaMer's trainer on the float64 tiny policy, started by a launcher.

    python -m torch.distributed.run --nproc_per_node 2 tests/train/ddp_lamer.py OUT

Every process trains `config(OUT / "run")` and saves its LoRA weights to OUT/rank_<RANK>.pt."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import transformers
from test_train_lamer import TINY_MINES
from test_update import float64_policy

from ttlearn.llm.hf import model_dir
from ttlearn.train.lamer import LamerTrainConfig, LamerTrainer


def config(out: Path) -> LamerTrainConfig:
    """Two instances × 2 trials × 2 attempts a step, reflections between them (free-text ones, so the update sees
    decisions and texts), two steps: the second starts from the first's weights, so the runs must agree on both."""
    return LamerTrainConfig(
        env="minesweeper", env_options=TINY_MINES, actions="choices", out=out, tasks=2, tasks_per_step=2,
        group=2, attempts=2, steps=2, reflection_tokens=8, lr=1e-2, micro_batch=2,
    )  # fmt: skip


def main() -> None:
    out = Path(sys.argv[1])
    torch.set_num_threads(1)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir("smollm2"))
    trainer = LamerTrainer(config(out / "run"), policy=float64_policy(tokenizer))
    trainer.train()
    weights = {n: p.detach() for n, p in trainer.policy.model.named_parameters() if "lora_" in n}
    torch.save({"weights": weights, "scorer": type(trainer.scorer).__name__}, out / f"rank_{os.environ['RANK']}.pt")


if __name__ == "__main__":
    main()
