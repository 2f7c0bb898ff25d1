"""Model provisioning for the hf back end: from a spec's source to (model, tokenizer) in torch.

A source is an embedded model's name (its GGUF converted once to safetensors under `$TTLEARN_CACHE/hf`), a `.gguf`
file (converted the same way) or a local HF checkpoint directory. The conversion is checked against the GGUF's own
logits on a probe prompt, so a cached copy is known to be the same model. Nothing here knows about sampling,
log-probs or adapters (`policy`, `adapters`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ttlearn.llm.base import LLMError, cache_root
from ttlearn.llm.models import EMBEDDED, model_path

if TYPE_CHECKING:
    import torch

PROBE_FILE = "probe.safetensors"
PROBE_TEXT = "<|im_start|>user\nWhich move beats rock?<|im_end|>\n<|im_start|>assistant\n"
CONVERSION_VERSION = 1  # bump when the cached layout changes so stale caches are rebuilt
NEEDS_EXTRAS = 'the hf back end needs the training extras: pip install "ttlearn[train]"'


def clear_quantizer_marks(model: Any) -> None:
    """Forget that the weights came from a GGUF file. transformers keeps a GGUF "quantizer" on the model even though
    the tensors are already dequantized to float; peft, Trainer and save_pretrained refuse quantized models."""
    model.hf_quantizer = None
    with contextlib.suppress(AttributeError):  # a read-only property (transformers 5) derived from hf_quantizer
        model.is_quantized = False
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config


def probe_logits(model: Any, tokenizer: Any) -> torch.Tensor:
    """Logits [T, V] of a short fixed chat prompt: the fingerprint that proves a converted cache equals its GGUF."""
    import torch

    ids = torch.tensor([tokenizer.encode(PROBE_TEXT, add_special_tokens=False)])
    with torch.no_grad():
        return model(input_ids=ids).logits[0].float()


def converted_gguf(gguf: Path) -> Path:
    """A safetensors + tokenizer copy of a GGUF model: a ~20 s dequantization once, ~0.1 s loads afterwards.

    The cache key covers the file's path, size and mtime. Concurrent first loads wait on a file lock, and a
    conversion becomes visible only by an atomic rename, so a half-written cache is never read."""
    import fcntl

    stat = gguf.stat()
    key = hashlib.sha1(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{CONVERSION_VERSION}".encode())
    target = cache_root() / "hf" / f"{gguf.stem}-{key.hexdigest()[:12]}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            _convert_gguf(gguf, target)
    return target


def _convert_gguf(gguf: Path, target: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    clear_quantizer_marks(model)
    model.float()
    scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=f"{target.name}.partial-"))
    model.save_pretrained(scratch)
    tokenizer.save_pretrained(scratch)
    expected = probe_logits(model, tokenizer)
    save_file({"logits": expected.contiguous()}, str(scratch / PROBE_FILE))
    reloaded = AutoModelForCausalLM.from_pretrained(scratch).float()
    if not torch.allclose(probe_logits(reloaded, tokenizer), expected, atol=1e-4):
        raise LLMError(f"converting {gguf} changed its logits; the partial copy is left in {scratch}")
    os.replace(scratch, target)


def model_dir(source: str) -> Path:
    """The HF checkpoint directory behind a source: an embedded model's name, a `.gguf` file, or a checkpoint."""
    if source in EMBEDDED:
        return converted_gguf(model_path(source))
    path = Path(source).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return converted_gguf(path)
    if not (path / "config.json").is_file():
        raise ValueError(
            f"hf model source {source!r} is neither an embedded model ({', '.join(EMBEDDED)}), a .gguf file, "
            "nor a directory with config.json"
        )
    return path


DTYPES = ("float32", "bfloat16", "float64")
"""float64 is for numeric checks: two paths that compute the same function agree in it to ~1e-12, whatever order
the CPU's kernels sum in, where float32 leaves ~1e-4 that depends on the machine."""


def load_causal_lm(source: str, *, device: str = "cpu", dtype: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) in eval mode, the weights loaded in `dtype` and moved to `device` ("cpu", "cuda:1").
    Thread count is left to the caller (`torch.set_num_threads`)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise LLMError(NEEDS_EXTRAS) from exc
    path = model_dir(source)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device).eval()
    clear_quantizer_marks(model)
    return model, AutoTokenizer.from_pretrained(path)
