"""Both trainers data parallel: two CPU processes over gloo under torchrun. LaMer's (`tests/train/ddp_lamer.py`)
train the same weights on both ranks, and the same weights, loss and records as one process, in float64
(tests/numeric.py); MemoPilot's (`benchmarks/ddp_memopilot.py`, whose ranks sample with seeds of their own) end
with identical weights that moved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("accelerate")
transformers = pytest.importorskip("transformers")

from ddp_lamer import config  # noqa: E402
from numeric import SAME  # noqa: E402
from test_update import float64_policy  # noqa: E402

from ttlearn.llm.hf import model_dir  # noqa: E402
from ttlearn.train.lamer import LamerTrainer  # noqa: E402

WORKER = Path(__file__).with_name("ddp_lamer.py")
MEMOPILOT = Path(__file__).parents[2] / "benchmarks" / "ddp_memopilot.py"
LAUNCH = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def games(path: Path) -> list[tuple]:
    """What each recorded episode played: its task, moves and rewards (its info holds float64 log-probs, which the
    runs share only to rounding)."""
    return [
        (e["episode"]["task"], [(s["action"], s["reward"]) for s in e["episode"]["steps"]], e["step"])
        for e in lines(path)
    ]


@pytest.mark.model
def test_lamer_data_parallel_trains_one_process_s_step_on_every_rank(tmp_path) -> None:
    torch.set_num_threads(1)
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(WORKER.parent.parent)}
    done = subprocess.run([*LAUNCH, str(WORKER), str(tmp_path)], env=environment, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank_{r}.pt", weights_only=True) for r in (0, 1)]
    assert ranks[0]["scorer"] == "DistributedDataParallel"  # accelerate's prepared scorer: the gradients averaged
    assert all(torch.equal(ranks[0]["weights"][n], ranks[1]["weights"][n]) for n in ranks[0]["weights"])

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir("smollm2"))
    alone = LamerTrainer(config(tmp_path / "alone"), policy=float64_policy(tokenizer))
    before = {n: p.detach().clone() for n, p in alone.policy.model.named_parameters() if "lora_" in n}
    alone.train()
    after = {n: p.detach() for n, p in alone.policy.model.named_parameters() if "lora_" in n}
    assert any(not torch.equal(before[n], after[n]) for n in before)  # the steps moved the weights
    for name, weights in ranks[0]["weights"].items():
        assert torch.allclose(weights, after[name], rtol=SAME["rtol"], atol=SAME["atol"]), name

    parallel, single = lines(tmp_path / "run" / "metrics.jsonl"), lines(tmp_path / "alone" / "metrics.jsonl")
    assert [m["rows"] for m in parallel] == [m["rows"] for m in single] and all(m["rows_trained"] for m in single)
    for p, s in zip(parallel, single, strict=True):  # the loss of the whole step, not rank 0's share of it
        assert p["loss"] == pytest.approx(s["loss"], rel=SAME["rtol"], abs=SAME["atol"])
        assert p["success_any"] == s["success_any"] and p["reflections"] == s["reflections"]
    assert games(tmp_path / "run" / "episodes.jsonl") == games(tmp_path / "alone" / "episodes.jsonl")  # every rank's


@pytest.mark.model
def test_memopilot_data_parallel_ends_with_identical_weights_on_every_rank(tmp_path) -> None:
    command = [*LAUNCH, str(MEMOPILOT), "--out", str(tmp_path / "run")]
    done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "ranks=2 " in done.stdout and "identical=True" in done.stdout
    assert "scorer=DistributedDataParallel" in done.stdout
