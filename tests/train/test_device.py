"""Device placement is a parameter: the policy and the trainers create every tensor on the policy's device.

No GPU here, so the checks run on the CPU in a way that still fails when a tensor is made without naming its device:
inside `torch.device("meta")` the default device is `meta`, where tensors have no data, so any `torch.tensor`,
`zeros`, `arange`, … that relies on the default instead of `policy.device` breaks the computation (or changes
nothing, and then the results equal those computed outside). A tiny random Llama with SmolLM2's tokenizer keeps it
fast; the bf16 test loads the real SmolLM2.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("transformers")

from test_train_lamer import tiny_policy, tokenizer  # noqa: E402,F401 - the tiny policy and its tokenizer fixture

from ttlearn.cli import app  # noqa: E402
from ttlearn.llm.hf import HFPolicy, LoraOptions  # noqa: E402
from ttlearn.train.lamer import LamerTrainConfig, PolicyRecorder  # noqa: E402
from ttlearn.train.memopilot import MemoPilotTrainConfig  # noqa: E402
from ttlearn.train.update import Choice, UpdateSettings, policy_update  # noqa: E402

torch.set_num_threads(1)
SRC = Path(__file__).resolve().parents[2] / "src" / "ttlearn"
PROMPTS = [[{"role": "user", "content": "Say hi."}], [{"role": "user", "content": "Rock, paper or scissors?"}]]
MOVES = ["rock", "paper", "scissors"]


@pytest.fixture
def policy(tokenizer) -> HFPolicy:  # noqa: F811 - the fixture imported above
    return tiny_policy(tokenizer)


def policy_outputs(policy: HFPolicy) -> list:
    """Every tensor-making path of the policy: sampling (random, greedy, stop strings), scoring, choice scores."""
    random = policy.sample(PROMPTS, max_new_tokens=4, temperature=1.0, seed=3)
    greedy = policy.sample(PROMPTS, max_new_tokens=3, temperature=0.0, seed=0, stop=["e"])
    prompts, completions = [s.prompt_ids for s in random], [s.completion_ids for s in random]
    with torch.no_grad():
        logprobs, mask = policy.sequence_logprobs(prompts, [completions[0], []], 0.7)
        choices = policy.choice_scores(prompts[1], [policy.answer_ids(m) for m in MOVES])
    return [
        random,
        greedy,
        logprobs.tolist(),
        mask.tolist(),
        choices.tolist(),
        policy.complete(PROMPTS[1], choices=MOVES),
    ]


def test_the_policy_makes_no_tensor_on_the_default_device(policy: HFPolicy) -> None:
    expected = policy_outputs(policy)
    with torch.device("meta"):
        got = policy_outputs(policy)
    got[-1], expected[-1] = got[-1].choice_logprobs, expected[-1].choice_logprobs  # not the wall time
    assert got == expected


def test_the_trainers_updates_make_no_tensor_on_the_default_device(policy: HFPolicy, tmp_path) -> None:
    frozen = torch.optim.AdamW(policy.trainable_parameters(), lr=0.0)  # gradients, but the weights stay put
    lamer = UpdateSettings.of(LamerTrainConfig(out=tmp_path / "lamer"))
    memopilot = UpdateSettings.of(MemoPilotTrainConfig(out=tmp_path / "mp", micro_batch=1, beta=0.1))
    answers = tuple(tuple(policy.answer_ids(m)) for m in MOVES)
    (reflection,) = policy.sample([PROMPTS[0]], max_new_tokens=4, temperature=1.0, seed=1)
    lamer_rows = [Choice(tuple(policy.encode(PROMPTS[1])), answers, 1, -1.1), reflection]  # a decision, a reflection
    writes = policy.sample(PROMPTS, max_new_tokens=4, temperature=1.0, seed=2)

    def updates() -> list:
        decision = PolicyRecorder(policy).complete(PROMPTS[1], temperature=1.0, seed=4, choices=MOVES)
        return [
            (decision.text, decision.choice_logprobs),
            policy_update(policy, frozen, lamer_rows, np.array([0.5, -1.0]), lamer),
            policy_update(policy, frozen, writes, np.array([1.0, -1.0]), memopilot, step=False),
        ]

    expected = updates()
    with torch.device("meta"):
        got = updates()
    assert expected[1]["grad_norm"] > 0 and expected[2]["grad_norm"] > 0
    assert got == expected  # the same computation, on the same device


def test_only_documented_places_pin_the_cpu() -> None:
    """Moving to the CPU is allowed where it must happen, and nowhere else in the policy or the trainers."""
    allowed = {
        ("train/base.py", 'map_location="cpu"'): "RNG states live on the CPU; the optimiser moves its state back",
        ("train/parallel.py", ".cpu().numpy()"): "an all-reduced sum or mean becomes numpy (advantages, stats)",
    }
    pinning = re.compile(r"\.cpu\(\)|\.numpy\(\)|device\s*=\s*['\"]cpu|map_location\s*=\s*['\"]cpu|Generator\(\)")
    found = []
    for path in [*sorted((SRC / "llm" / "hf").glob("*.py")), *sorted((SRC / "train").glob("*.py"))]:
        name = path.relative_to(SRC).as_posix()
        for line in path.read_text().splitlines():
            for match in pinning.finditer(line):
                if not any(file == name and snippet in line for file, snippet in allowed):
                    found.append(f"{name}: {line.strip()} ({match.group()})")
    assert found == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
@pytest.mark.parametrize("trainer", ["lamer", "memopilot"])
def test_device_cuda_without_a_gpu_is_one_clear_error(trainer: str, tmp_path) -> None:
    result = CliRunner().invoke(app, ["train", trainer, "--device", "cuda", "--out", str(tmp_path / "run")])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "no CUDA device visible; use --device cpu or auto" in result.output
    assert not (tmp_path / "run").exists()  # refused before the run directory is written


@pytest.mark.model
def test_bfloat16_weights_train_float32_adapters() -> None:
    policy = HFPolicy.from_source("smollm2", lora=LoraOptions(), device="cpu", dtype="bfloat16")
    assert next(policy.model.parameters()).dtype == torch.bfloat16
    assert {p.dtype for p in policy.trainable_parameters()} == {torch.float32}  # AdamW on float32 adapters
    (sample,) = policy.sample([PROMPTS[1]], max_new_tokens=4, temperature=1.0, seed=0)
    logprobs, _ = policy.sequence_logprobs([sample.prompt_ids], [sample.completion_ids])
    assert logprobs.dtype == torch.float32
    (-logprobs.sum()).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in policy.trainable_parameters())
    with pytest.raises(ValueError, match="dtype must be one of"):
        HFPolicy.from_source("smollm2", dtype="float16")
