"""LoRA adapters of the hf back end: their options, attaching one to a model, and the files a trained one lives in.

An adapter directory is peft's format plus `ADAPTER_META`, a json with the base model's source and the LoRA options,
so `hf:DIR` can rebuild the whole policy from the directory alone (`HFPolicy.from_adapter`). peft is imported inside
the functions (the core install has no torch).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ADAPTER_META = "ttlearn_adapter.json"


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


def save_adapter(model: Any, directory: Path, *, base: str, options: LoraOptions) -> None:
    """The adapter weights of a peft `model` (peft's format) plus the metadata that names its base."""
    model.save_pretrained(directory)
    (directory / ADAPTER_META).write_text(json.dumps({"base": base, "lora": asdict(options)}, indent=2))


def load_adapter_weights(model: Any, directory: Path, device: str) -> None:
    """Replace a peft `model`'s adapter weights by those saved in `directory`; a mismatch of shapes or names raises."""
    from peft import set_peft_model_state_dict
    from peft.utils import load_peft_weights

    result = set_peft_model_state_dict(model, load_peft_weights(str(directory), device=device))
    if result.unexpected_keys:
        raise ValueError(f"adapter in {directory} does not fit this model: {result.unexpected_keys[:3]}")
