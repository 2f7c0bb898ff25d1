"""The trainable back end: a Hugging Face causal LM in torch, optionally with LoRA adapters (peft).

Specs: `hf` or `hf:smollm2` (an embedded model by name, e.g. `hf:qwen-coder`: its GGUF converted once to
safetensors under `$TTLEARN_CACHE/hf`), `hf:/path/to/checkpoint` (a local HF model directory),
`hf:/path/to/model.gguf`, and `hf:/path/to/adapter_dir` (an adapter saved by `HFPolicy.save_adapter`, which records
its base model).

Three jobs, one module each: `checkpoints` provisions a model (GGUF conversion, loading onto a device), `policy`
samples and rescores with exact log-probs (what the trainers need), `adapters` attaches LoRA matrices and keeps their
files. This package's names are the back end's public surface. torch, transformers and peft are imported inside
functions: `ttlearn list` imports every back end, and the core install has no torch.
"""

from __future__ import annotations

from pathlib import Path

from ttlearn.llm.hf.adapters import ADAPTER_META, LoraOptions, is_adapter_dir
from ttlearn.llm.hf.checkpoints import PROBE_FILE, load_causal_lm, model_dir, probe_logits
from ttlearn.llm.hf.policy import HFPolicy, Sample, pad_rows, positions_from_mask, token_logprobs

__all__ = [
    "ADAPTER_META",
    "PROBE_FILE",
    "HFPolicy",
    "LoraOptions",
    "Sample",
    "from_spec",
    "load_causal_lm",
    "model_dir",
    "pad_rows",
    "positions_from_mask",
    "probe_logits",
    "token_logprobs",
]


def from_spec(arg: str) -> HFPolicy:
    """The policy of an `hf:ARG` spec: an adapter directory on its recorded base, else a model source."""
    path = Path(arg).expanduser()
    if arg and is_adapter_dir(path):
        return HFPolicy.from_adapter(path)
    return HFPolicy.from_source(arg or "smollm2")
