"""Every adapter the docs and protocols name is in the repository: its weights load from the committed files alone
(one weights file, or shards and their index), so a test that plays it runs again without retraining."""

from __future__ import annotations

from pathlib import Path

import pytest

from ttlearn.llm.hf.adapters import adapter_options, read_adapter_meta, read_weights

ROOT = Path(__file__).parents[2]
LOST = {"docs/memopilot-default-run/final", "docs/lamer-text-run/final"}
"""Adapters whose weights were never committed (their docs say so and how to train them again)."""
ADAPTERS = sorted(
    p.parent for p in (ROOT / "docs").rglob("ttlearn_adapter.json") if str(p.parent.relative_to(ROOT)) not in LOST
)


def test_the_adapters_listed_as_lost_hold_no_weights():
    for name in LOST:
        assert not any((ROOT / name).glob("adapter_model*.safetensors*")), name


def test_the_adapters_the_protocols_play_are_among_them():
    names = {str(p.relative_to(ROOT)) for p in ADAPTERS}
    assert {"docs/memopilot-favourite-run/final", "docs/memopilot-powered-run/writer"} <= names


@pytest.mark.parametrize("directory", ADAPTERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_committed_adapter_loads_its_lora_weights_from_the_repository(directory: Path) -> None:
    weights = read_weights(directory)
    rank = adapter_options(directory).r
    assert read_adapter_meta(directory)["base"]
    assert weights and all(rank in tensor.shape for tensor in weights.values())
