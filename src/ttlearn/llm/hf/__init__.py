"""The trainable back end: a Hugging Face causal LM in torch, optionally with LoRA adapters (peft).

Specs: `hf` or `hf:smollm2` (an embedded model by name, e.g. `hf:qwen-coder`: its GGUF converted once to
safetensors under `$TTLEARN_CACHE/hf`), `hf:/path/to/checkpoint` (a local HF model directory),
`hf:/path/to/model.gguf`, and `hf:/path/to/adapter_dir` (an adapter saved by `HFPolicy.save_adapter`, which records
its base model). Any of them takes `?device=auto|cpu|cuda&dtype=auto|float32|bfloat16|float64`, resolved as the
trainers' `--device` / `--dtype` (`placement`): auto is a visible GPU in bfloat16 where it supports it, else the CPU
in float32.

Four jobs, one module each: `checkpoints` provisions a model (GGUF conversion, loading), `placement` says where it
goes, `policy` samples and rescores with exact log-probs (what the trainers need), `adapters` attaches LoRA matrices
and keeps their files. This package's names are the back end's public surface. torch, transformers and peft are
imported inside functions: `ttlearn list` imports every back end, and the core install has no torch.
"""

from __future__ import annotations

from pathlib import Path

from ttlearn.llm.base import spec_options
from ttlearn.llm.hf.adapters import ADAPTER_META, LoraOptions, is_adapter_dir
from ttlearn.llm.hf.checkpoints import PROBE_FILE, load_causal_lm, model_dir, probe_logits
from ttlearn.llm.hf.placement import Device, this_device
from ttlearn.llm.hf.policy import HFPolicy, Sample, pad_rows, positions_from_mask, token_logprobs

__all__ = [
    "ADAPTER_META",
    "OPTIONS",
    "PROBE_FILE",
    "Device",
    "HFPolicy",
    "LoraOptions",
    "Sample",
    "from_spec",
    "load_causal_lm",
    "model_dir",
    "pad_rows",
    "positions_from_mask",
    "probe_logits",
    "this_device",
    "token_logprobs",
]


OPTIONS = {"device": str, "dtype": str}
"""What an `hf:` spec takes after `?`: where the weights go and in which dtype (`placement.resolve_device`)."""
UNPLACED = Device("cpu", "float32")


def from_spec(arg: str) -> HFPolicy:
    """The policy of an `hf:ARG[?device=…&dtype=…]` spec: an adapter directory on its recorded base, else a model
    source, placed as asked. The spec it keeps names a placement other than the CPU in float32: replies cached by
    spec must not mix dtypes."""
    source, _, query = arg.partition("?")
    options = spec_options(query, OPTIONS, "hf")
    place = this_device(options.get("device", "auto"), options.get("dtype", "auto"), flag="hf:…?device=")
    path = Path(source).expanduser()
    if source and is_adapter_dir(path):
        policy = HFPolicy.from_adapter(path, device=place.torch_name, dtype=place.dtype)
    else:
        policy = HFPolicy.from_source(source or "smollm2", device=place.torch_name, dtype=place.dtype)
    if place != UNPLACED:
        policy.spec += f"?device={place.name}&dtype={place.dtype}"
    return policy
