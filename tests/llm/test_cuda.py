"""The hf back end and the trainers' updates on CUDA compute what they compute on the CPU. Skipped without CUDA.

One tiny random Llama with a byte-level tokenizer, both built in code (tests/tiny_model.py: no download, no files),
is built twice from the same seeds, once per device. The comparisons run in float64 on both devices and use
`numeric.SAME`: CUDA's kernels sum in another order than the CPU's, and in float64 the same function agrees to
~1e-12 in any order while a real defect (a tensor left on the wrong device, a mask or position built differently)
moves results by more than 1e-6; a float32 tolerance would be a guess about the kernels (tests/numeric.py). TF32 is
off, so float32 matmuls on CUDA are IEEE. Trainer checkpoints run in float32, the trainers' own dtype on a GPU
without bfloat16.

torch's CPU and CUDA generators are different streams, so one seed draws different tokens on the two devices: seeded
sampling is checked for what must hold across devices (greedy tokens equal; each drawn token's recorded log-prob is
the CPU model's log-prob of it) and for repeating itself on CUDA.
"""

from __future__ import annotations

import pytest
from numeric import SAME
from tiny_model import byte_tokenizer, tiny_llama

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

from ttlearn.llm.hf import HFPolicy, LoraOptions  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

PROMPTS = [[{"role": "user", "content": "Say hi."}], [{"role": "user", "content": "Rock, paper or scissors?"}]]
MOVES = ["rock", "paper", "scissors"]


@pytest.fixture(autouse=True)
def ieee_float32():
    """TF32 rounds float32 matmuls to 10 mantissa bits on Ampere and newer; the comparisons here assume IEEE."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = before


@pytest.fixture(scope="module")
def tokenizer():
    return byte_tokenizer()


def tiny_policy(tokenizer, device: str, dtype: torch.dtype = torch.float64) -> HFPolicy:
    """The same random weights and LoRA matrices on any device: built on the CPU from fixed seeds, then moved."""
    model = tiny_llama(tokenizer).to(device=device, dtype=dtype)
    policy = HFPolicy(model, tokenizer, source="tiny", lora=LoraOptions(r=2))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # peft starts B at 0 and draws A on its own; both fixed here so the adapter matters
        for name, param in policy.model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=generator, dtype=torch.float64) * 0.05)
    return policy


@pytest.fixture(scope="module")
def pair(tokenizer) -> tuple[HFPolicy, HFPolicy]:
    return tiny_policy(tokenizer, "cpu"), tiny_policy(tokenizer, "cuda")


def close(a, b) -> bool:
    return torch.allclose(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64), **SAME)


def test_greedy_tokens_are_the_same_on_both_devices(pair) -> None:
    cpu, cuda = pair
    assert cuda.device.type == "cuda"
    here = cpu.sample(PROMPTS, max_new_tokens=12, temperature=0.0)
    there = cuda.sample(PROMPTS, max_new_tokens=12, temperature=0.0)
    assert [s.completion_ids for s in there] == [s.completion_ids for s in here]
    assert all(close(t.logprobs, h.logprobs) for t, h in zip(there, here))


def test_a_seed_repeats_on_cuda_and_its_log_probs_are_the_cpu_models(pair) -> None:
    cpu, cuda = pair
    drawn = cuda.sample(PROMPTS, max_new_tokens=12, temperature=0.8, seed=5)
    assert drawn == cuda.sample(PROMPTS, max_new_tokens=12, temperature=0.8, seed=5)
    with torch.no_grad():
        rescored, mask = cpu.sequence_logprobs([s.prompt_ids for s in drawn], [s.completion_ids for s in drawn], 0.8)
    for row, sample in enumerate(drawn):
        assert close(rescored[row][mask[row]], sample.logprobs)


def test_scores_and_choice_scores_agree(pair) -> None:
    cpu, cuda = pair
    prompts = [cpu.encode(p) for p in PROMPTS]
    completions = [cpu.tokenizer.encode(" paper", add_special_tokens=False), cpu.answer_ids("scissors")]
    answers = [cpu.answer_ids(m) for m in MOVES]
    with torch.no_grad():
        for policy in pair:
            logprobs, mask = policy.sequence_logprobs(prompts, completions, 0.7)
            assert logprobs.device.type == policy.device.type
        here = cpu.sequence_logprobs(prompts, completions, 0.7)
        there = cuda.sequence_logprobs(prompts, completions, 0.7)
        assert close(there[0].cpu(), here[0]) and torch.equal(there[1].cpu(), here[1])
        assert close(cuda.choice_scores(prompts[1], answers).cpu(), cpu.choice_scores(prompts[1], answers))
    assert close(
        list(cuda.score_choices(prompts[0], MOVES).values()), list(cpu.score_choices(prompts[0], MOVES).values())
    )


def lora_gradients(policy: HFPolicy) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().cpu() for n, p in policy.model.named_parameters() if p.requires_grad}


def test_memopilot_and_lamer_updates_give_the_same_gradients(tokenizer, tmp_path) -> None:
    """The trainers' update (`train.update.policy_update`) on each trainer's rows and settings, from the same weights
    on each device: MemoPilot's sampled notes, LaMer's decision among choices and its reflection. The loss stats, the
    gradient norm and every LoRA gradient agree; a step leaves the optimiser's state on the device."""
    import numpy as np

    from ttlearn.train.lamer import LamerTrainConfig
    from ttlearn.train.memopilot import MemoPilotTrainConfig
    from ttlearn.train.update import Choice, UpdateSettings, policy_update

    sampler = tiny_policy(tokenizer, "cpu")
    notes = sampler.sample(PROMPTS, max_new_tokens=6, temperature=1.0, seed=2)
    answers = tuple(tuple(sampler.answer_ids(m)) for m in MOVES)
    decision = Choice(tuple(sampler.encode(PROMPTS[1])), answers, 1, -1.1)
    cases = {
        "memopilot": (notes, [1.0, -1.0], MemoPilotTrainConfig(out=tmp_path, micro_batch=1)),
        "lamer": ([decision, notes[0]], [0.5, -1.0], LamerTrainConfig(out=tmp_path)),
    }
    found: dict[str, dict] = {}
    for device in ("cpu", "cuda"):
        policy = tiny_policy(tokenizer, device)
        optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=0.0)  # a step keeps the weights
        for name, (rows, advantages, config) in cases.items():
            settings = UpdateSettings.of(config)
            stats = policy_update(policy, optimizer, rows, np.array(advantages), settings, step=False)
            found[f"{name} {device}"] = {"stats": stats, "grads": lora_gradients(policy)}
            optimizer.zero_grad(set_to_none=True)
            policy_update(policy, optimizer, rows, np.array(advantages), settings)
            assert all(s["exp_avg"].device == policy.device for s in optimizer.state.values())
    for name in cases:
        here, there = found[f"{name} cpu"], found[f"{name} cuda"]
        assert here["stats"]["grad_norm"] > 0
        assert here["stats"].keys() == there["stats"].keys()
        assert close([there["stats"][k] for k in here["stats"]], [here["stats"][k] for k in here["stats"]])
        assert all(close(there["grads"][n], here["grads"][n]) for n in here["grads"])


@pytest.mark.parametrize("first,then", [("cuda", "cuda"), ("cuda", "cpu"), ("cpu", "cuda")])
def test_a_checkpoint_resumes_on_either_device(tokenizer, tmp_path, first: str, then: str) -> None:
    """One LaMer step on `first`, then a resumed run on `then`: it loads the adapter exactly, its optimiser state lies
    on its device, and it trains on."""
    from ttlearn.train.lamer import LamerTrainConfig, LamerTrainer

    config = LamerTrainConfig(
        env="minesweeper",
        env_options={"turns": 2},
        actions="choices",
        out=tmp_path / "run",
        tasks=2,
        tasks_per_step=1,
        group=2,
        attempts=2,
        steps=1,
        reflection_tokens=8,
        lr=1e-2,
        device=first,
        dtype="float32",
    )
    trained = LamerTrainer(config, policy=tiny_policy(tokenizer, first, torch.float32))
    trained.train()
    assert all(s["exp_avg"].device.type == first for s in trained.optimizer.state.values())
    weights = {n: p.detach().cpu() for n, p in trained.policy.model.named_parameters() if p.requires_grad}
    resumed = LamerTrainer(
        config.model_copy(update={"steps": 2, "device": then}), policy=tiny_policy(tokenizer, then, torch.float32)
    )
    assert resumed.step == 1
    loaded = {n: p.detach().cpu() for n, p in resumed.policy.model.named_parameters() if p.requires_grad}
    assert loaded.keys() == weights.keys() and all(torch.equal(loaded[n], weights[n]) for n in weights)
    assert all(s["exp_avg"].device.type == then for s in resumed.optimizer.state.values())
    (metrics,) = resumed.train()
    assert metrics["step"] == 2 and torch.isfinite(torch.tensor(metrics["grad_norm"]))
