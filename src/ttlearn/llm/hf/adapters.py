"""LoRA adapters of the hf back end: their options, attaching one to a model, and the files a trained one lives in.

An adapter directory is peft's format plus `ADAPTER_META`, a json with the base model's source and the LoRA options,
so `hf:DIR` can rebuild the whole policy from the directory alone (`HFPolicy.from_adapter`). Weights larger than
`SHARD_BYTES` are split into shards named by an index (the Hugging Face convention for sharded checkpoints), so that a
trained adapter (1.8 MB for SmolLM2 at r = 8) can be committed where files stay under 1 MB. peft and safetensors are
imported inside the functions (the core install has no torch).
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ADAPTER_META = "ttlearn_adapter.json"
WEIGHTS = "adapter_model.safetensors"
SHARD_INDEX = "adapter_model.safetensors.index.json"
SHARD_BYTES = 900_000
_SHARD_NAME = re.compile(r"adapter_model-\d{5}-of-\d{5}\.safetensors")


@dataclass(frozen=True)
class LoraOptions:
    """LoRA settings. Dropout defaults to 0 so that a training forward pass computes the same log-probs as sampling."""

    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")

    def __post_init__(self) -> None:
        if self.r < 1 or self.alpha <= 0:
            raise ValueError(f"LoRA needs r >= 1 and alpha > 0, got r={self.r}, alpha={self.alpha}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {self.dropout}")
        if not self.target_modules:
            raise ValueError("LoRA needs at least one target module, e.g. ('q_proj', 'v_proj')")
        object.__setattr__(self, "target_modules", tuple(self.target_modules))


def with_lora(model: Any, options: LoraOptions) -> Any:
    """`model` wrapped by peft with fresh LoRA matrices (B = 0, so its outputs are unchanged); every base weight is
    frozen."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=options.r,
        lora_alpha=options.alpha,
        lora_dropout=options.dropout,
        target_modules=list(options.target_modules),
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():  # peft 0.21 reads a property transformers 5 deprecates; not ours to fix
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, config)


def is_adapter_dir(path: Path) -> bool:
    return (path / ADAPTER_META).is_file()


def read_adapter_meta(directory: Path) -> dict[str, Any]:
    """{"base": the base model's source, "lora": the options as a dict} of an adapter directory."""
    meta = directory / ADAPTER_META
    if not meta.is_file():
        raise ValueError(f"{directory} is not a ttlearn adapter directory (no {ADAPTER_META})")
    return json.loads(meta.read_text())


def adapter_options(directory: Path) -> LoraOptions:
    lora = read_adapter_meta(directory)["lora"]
    return LoraOptions(**{**lora, "target_modules": tuple(lora["target_modules"])})


def save_adapter(
    model: Any, directory: Path, *, base: str, options: LoraOptions, shard_bytes: int = SHARD_BYTES
) -> None:
    """The adapter weights of a peft `model` (peft's format, sharded past `shard_bytes`) plus the metadata that names
    its base."""
    model.save_pretrained(directory)
    shard_weights(directory, shard_bytes)
    (directory / ADAPTER_META).write_text(json.dumps({"base": base, "lora": asdict(options)}, indent=2))


def shard_weights(directory: Path, shard_bytes: int = SHARD_BYTES) -> None:
    """Split `directory`'s weights file into files of at most `shard_bytes` of tensors each (in the file's key order)
    and an index naming each tensor's file; a file that fits, or a directory already sharded, is left as it is."""
    from safetensors.torch import load_file, save_file

    whole = directory / WEIGHTS
    if not whole.is_file() or whole.stat().st_size <= shard_bytes:
        return
    groups: list[dict[str, Any]] = [{}]
    filled = total = 0
    for name, tensor in load_file(whole).items():
        size = tensor.numel() * tensor.element_size()
        if size > shard_bytes:
            raise ValueError(f"tensor {name} alone has {size} bytes, more than a shard's {shard_bytes}")
        if filled + size > shard_bytes:
            groups.append({})
            filled = 0
        groups[-1][name] = tensor
        filled += size
        total += size
    weight_map = {}
    for number, group in enumerate(groups, start=1):
        file = f"adapter_model-{number:05d}-of-{len(groups):05d}.safetensors"
        save_file(group, directory / file, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(group, file))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (directory / SHARD_INDEX).write_text(json.dumps(index, indent=2))
    whole.unlink()


def read_weights(directory: Path, device: str = "cpu") -> dict[str, Any]:
    """Every adapter tensor of `directory`, from its one weights file or from the shards its index names (shard names
    are checked, so an index cannot point outside the directory, and every named tensor must be found)."""
    from safetensors.torch import load_file

    if (directory / WEIGHTS).is_file():
        return load_file(directory / WEIGHTS, device=device)
    if not (directory / SHARD_INDEX).is_file():
        raise ValueError(f"{directory} has no adapter weights: neither {WEIGHTS} nor {SHARD_INDEX}")
    weight_map = json.loads((directory / SHARD_INDEX).read_text()).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{directory / SHARD_INDEX} has no weight_map")
    weights: dict[str, Any] = {}
    for file in sorted(set(weight_map.values())):
        if not isinstance(file, str) or not _SHARD_NAME.fullmatch(file):
            raise ValueError(f"{directory / SHARD_INDEX} names {file!r}, not a shard like adapter_model-00001-of-00002")
        if not (directory / file).is_file():
            raise ValueError(f"{directory} lacks the shard {file} that its index names; copy the whole directory")
        weights.update(load_file(directory / file, device=device))
    if set(weights) != set(weight_map):
        raise ValueError(f"the shards of {directory} do not hold exactly the tensors its index names")
    return weights


def load_adapter_weights(model: Any, directory: Path, device: str) -> None:
    """Replace a peft `model`'s adapter weights by those saved in `directory`; a mismatch of shapes or names raises."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, read_weights(directory, device))
    if result.unexpected_keys:
        raise ValueError(f"adapter in {directory} does not fit this model: {result.unexpected_keys[:3]}")
