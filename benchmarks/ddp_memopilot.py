"""Data-parallel MemoPilot training: N processes × 2 steps; every rank must end with identical LoRA weights.

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no \
        benchmarks/ddp_memopilot.py [--device cpu] [--player note-hash] [--out /tmp/mp-ddp]
    python benchmarks/ddp_memopilot.py --device cuda          # one rank: the same step, no wrapper

Tiny settings (T=2, G=4 → 4 / N rollouts per rank, 2 rounds, 16-token writes). `--player note-hash` (the default)
is a scripted player whose move depends on the memory text, so the rewards — hence the gradients — are not zero
without any model; any LLM spec plays instead (`--player "hf:/models/p?device=cuda"`, `openai:URL#MODEL`). The
update runs through `accelerate`'s prepared scorer (a `DistributedDataParallel` with two or more processes,
printed) and optimiser. Exits non-zero if the ranks' weights differ or never moved.
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
from accelerate.utils import gather

from ttlearn.players.base import Decision, Player
from ttlearn.train.memopilot import MemoPilotTrainConfig, MemoPilotTrainer

SCRIPTED = "note-hash"


class NoteHashPlayer(Player):
    """Plays the move indexed by the memory's byte sum mod 3: a deterministic player that reacts to any note."""

    def act(self, env, obs, memory, *, seed):
        return Decision(obs.legal_actions[sum(memory.encode()) % len(obs.legal_actions)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "mp-ddp"))
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="cpu")
    parser.add_argument("--player", default=SCRIPTED, help=f"an LLM spec, or {SCRIPTED} (scripted, no model)")
    args = parser.parse_args()
    torch.set_num_threads(1)
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
        device=args.device,
        **({} if args.player == SCRIPTED else {"player": args.player}),
    )
    trainer = MemoPilotTrainer(config, player=NoteHashPlayer() if args.player == SCRIPTED else None)
    initial = torch.cat([p.detach().flatten() for p in trainer.params]).clone()
    metrics = trainer.train()
    weights = torch.cat([p.detach().flatten() for p in trainer.params])
    ranks = gather(weights[None]).reshape(trainer.world, -1)  # every rank's weights, on every rank
    if trainer.rank == 0:
        identical = all(torch.equal(ranks[0], w) for w in ranks[1:])
        moved = float((weights - initial).abs().max())
        print(
            f"ranks={trainer.world} device={trainer.device.torch_name} steps={len(metrics)}"
            f" grad_norms={[round(m['grad_norm'], 4) for m in metrics]} identical={identical} max|Δw|={moved:.3g}"
            f" eval={metrics[-1]['eval']['reward'][0]} wall={time.perf_counter() - start:.1f}s"
            f" scorer={type(trainer.scorer).__name__}"
        )
        if not identical or moved == 0:
            sys.exit(1)


if __name__ == "__main__":
    main()
