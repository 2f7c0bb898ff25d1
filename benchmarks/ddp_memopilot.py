"""Data-parallel MemoPilot training: 2 CPU processes (gloo) × 2 steps; both ranks must hold identical LoRA weights.

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no \
        benchmarks/ddp_memopilot.py [--out /tmp/mp-ddp]

Tiny settings (T=2, G=4 → 2 rollouts per rank, 2 rounds, 16-token writes) and a scripted player whose move depends
on the memory text, so the rewards — hence the gradients — are not zero. The update runs through `accelerate`'s
prepared scorer (a `DistributedDataParallel` under the launcher, printed) and optimiser. Exits non-zero if the
weights differ or never moved.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TTLEARN_THREADS", "1")

import torch
import torch.distributed as dist
from accelerate import PartialState

from ttlearn.players.base import Decision, Player
from ttlearn.train.memopilot import MemoPilotTrainConfig, MemoPilotTrainer


class NoteHashPlayer(Player):
    """Plays the move indexed by the memory's byte sum mod 3: a deterministic player that reacts to any note."""

    def act(self, env, obs, memory, *, seed):
        return Decision(obs.legal_actions[sum(memory.encode()) % len(obs.legal_actions)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "mp-ddp"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    state = PartialState(cpu=True)
    start = time.perf_counter()
    config = MemoPilotTrainConfig(
        opponents=["cycle3", "biased"],
        games=2,
        rounds=2,
        group=4,
        steps=2,
        lr=5e-3,
        max_completion_length=16,
        eval_every=2,
        eval_seeds=[7, 8],
        out=args.out,
    )
    trainer = MemoPilotTrainer(config, player=NoteHashPlayer())
    initial = torch.cat([p.detach().flatten() for p in trainer.params]).clone()
    metrics = trainer.train()
    weights = torch.cat([p.detach().flatten() for p in trainer.params])
    gathered = [torch.zeros_like(weights) for _ in range(state.num_processes)]
    dist.all_gather(gathered, weights)
    if state.is_main_process:
        identical = all(torch.equal(gathered[0], w) for w in gathered[1:])
        moved = float((weights - initial).abs().max())
        print(
            f"ranks={state.num_processes} steps={len(metrics)} grad_norms={[round(m['grad_norm'], 4) for m in metrics]}"
            f" identical={identical} max|Δw|={moved:.3g} eval={metrics[-1]['eval']['reward'][0]} "
            f"wall={time.perf_counter() - start:.1f}s scorer={type(trainer.scorer).__name__}"
        )
        if state.num_processes < 2 or not identical or moved == 0:
            sys.exit(1)


if __name__ == "__main__":
    main()
