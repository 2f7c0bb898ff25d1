"""benchmarks/gpu_check.py, rehearsed on the CPU at tiny sizes: the same script a GPU machine runs, its parts and its
JSON, with the shipped tokenizers and layers shrunk (`--tiny`). The CUDA tests it runs are tests/llm/test_cuda.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("accelerate")

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ROOT / "benchmarks" / "gpu_shapes"


def test_the_cpu_rehearsal_runs_every_part(tmp_path) -> None:
    out = tmp_path / "gpu-check.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--tiny", "--skip-tests"]
        + ["--writers", "smollm2-135m,qwen2.5-1.5b", "--out", str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "never learning" in done.stdout
    figures = json.loads(out.read_text())
    assert "never learning" in figures["note"] and figures["device"] == "cpu"
    for name, part in figures["memopilot_step"].items():
        assert part["ok"], (name, part.get("traceback"))
        step = part["result"]
        assert set(step["seconds"]) == set(step["raw_seconds"]) == {"write", "play", "update"}
        assert step["seconds_per_note"]["wall"] > 0 and step["peak_gpu_mib"] is None  # no GPU memory on a CPU
    for trainer in ("memopilot", "lamer"):
        assert figures["train"][trainer]["ok"], figures["train"][trainer].get("traceback")
        assert figures["train"][trainer]["result"]["steps_logged"] == [1, 2]  # one step, then resumed for another


@pytest.mark.parametrize(
    "shape,parameters", [("smollm2-135m", 134.5e6), ("qwen2.5-1.5b", 1.54e9), ("qwen2.5-7b", 7.62e9)]
)
def test_the_shipped_shapes_are_the_named_models(shape: str, parameters: float) -> None:
    """Each config builds a model of its namesake's published parameter count (on the meta device: no memory)."""
    config = json.loads((SHAPES / f"{shape}.json").read_text())
    config.pop("tokenizer")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(config.pop("model_type"), **config)
        )
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(parameters, rel=0.01)
