"""What data-parallel training needs beyond `accelerate`'s prepared model and optimiser: which process this is, how a
step's work splits over the processes, sums and means over them, and barriers. Each is a no-op in one process, so a
trainer calls them unconditionally. torch is imported inside functions (the registry lists trainers without it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import torch
    from accelerate import Accelerator


def world() -> tuple[int, int]:
    """(rank, number of processes)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rank_share(count: int, rank: int, world: int, what: str) -> list[int]:
    """The items 0..count−1 rank `rank` plays: i ≡ rank (mod world). Equal shares give every rank the same work and
    every advantage group the same weight on each rank."""
    if count % world:
        raise ValueError(f"{what} ({count}) must be a multiple of the number of processes ({world})")
    return list(range(rank, count, world))


def reduced(accelerator: Accelerator | None, values: np.ndarray, device: torch.device, reduction: str) -> np.ndarray:
    """`values` summed or averaged ("sum", "mean") element-wise over the processes (`Accelerator.reduce`, in float64
    on `device`: NCCL reduces only GPU tensors); the values themselves in one process."""
    import torch

    if accelerator is None or accelerator.num_processes == 1:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    return accelerator.reduce(tensor, reduction=reduction).cpu().numpy()


def barrier() -> None:
    import torch.distributed as dist

    if world()[1] > 1:
        dist.barrier()
