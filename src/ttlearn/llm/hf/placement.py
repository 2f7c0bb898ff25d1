"""Where the hf back end's weights go: a device and a dtype, resolved once from what was asked and what this machine
has. An `hf:` spec's `?device=…&dtype=…` and the trainers' `--device` / `--dtype` are resolved here alike, so a player
and a trainer asked the same thing land in the same place.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from ttlearn.llm.base import LLMError
from ttlearn.llm.hf.checkpoints import DTYPES, NEEDS_EXTRAS

DEVICES = ("auto", "cpu", "cuda")


@dataclass(frozen=True)
class Device:
    """Where this process computes: the kind, the weights' dtype and, on a GPU, its index (LOCAL_RANK)."""

    name: Literal["cpu", "cuda"]
    dtype: Literal["float32", "bfloat16", "float64"]
    index: int = 0

    @property
    def torch_name(self) -> str:
        """The torch device string: "cpu" or "cuda:INDEX"."""
        return f"cuda:{self.index}" if self.name == "cuda" else "cpu"


def resolve_device(
    requested: str,
    *,
    gpus: int,
    bf16_supported: bool,
    local_rank: int = 0,
    dtype: str = "auto",
    flag: str = "--device ",
) -> Device:
    """cuda when asked or when `auto` finds a GPU, else cpu. dtype `auto`: bfloat16 on a GPU that supports it,
    float32 otherwise (bf16 on a CPU is slower than float32 in torch's kernels); any other dtype is taken as asked.
    Under a launcher every process takes GPU `local_rank`, so there must be one GPU per process. `flag` is how the
    caller's user spells the device option (`--device `, an `hf:` spec's `device=`), for the error that names it."""
    if requested not in DEVICES:
        raise ValueError(f"device must be auto, cpu or cuda, got {requested!r}")
    if dtype != "auto" and dtype not in DTYPES:
        raise ValueError(f"dtype must be auto, float32 or bfloat16 (float64 for numeric checks), got {dtype!r}")
    if requested == "cuda" and gpus == 0:
        raise ValueError(f"no CUDA device visible; use {flag}cpu or auto")
    if requested == "cpu" or gpus == 0:
        return Device("cpu", "float32" if dtype == "auto" else dtype)  # type: ignore[arg-type] - checked above
    if local_rank >= gpus:
        raise ValueError(
            f"process LOCAL_RANK={local_rank} has no GPU of its own ({gpus} visible); launch at most {gpus} processes"
        )
    if dtype == "auto":
        dtype = "bfloat16" if bf16_supported else "float32"
    return Device("cuda", dtype, local_rank)  # type: ignore[arg-type] - checked above


def this_device(requested: str, dtype: str = "auto", flag: str = "--device ") -> Device:
    """`resolve_device` on this machine, for this process (LOCAL_RANK is set by accelerate launch and torchrun)."""
    try:
        import torch
    except ImportError as exc:
        raise LLMError(NEEDS_EXTRAS) from exc

    gpus = torch.cuda.device_count()
    return resolve_device(
        requested,
        gpus=gpus,
        bf16_supported=gpus > 0 and torch.cuda.is_bf16_supported(including_emulation=False),  # emulated is slow
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        dtype=dtype,
        flag=flag,
    )
