"""The LaMer trainer on a tiny random Llama with SmolLM2's tokenizer: fast enough for CPU, real enough for the maths.

(The real policy works the same way; a step of SmolLM2 on a loaded 2-core machine takes minutes, see docs/lamer.md.)
"""

from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

from numeric import SAME, float64_throughout
from tiny_model import tiny_llama

from ttlearn.llm.hf import HFPolicy, LoraOptions, Sample, model_dir
from ttlearn.memory.lamer import LamerMemory
from ttlearn.rollout.loop import Trial
from ttlearn.train.lamer import (
    LamerTrainConfig,
    LamerTrainer,
    Record,
    TrainStep,
    choice_logprobs,
    step_advantages,
    trained_part,
    trial_steps,
)
from ttlearn.train.update import Choice
from ttlearn.types import Episode, Step

torch.set_num_threads(1)
TINY_MINES = {"rows": 4, "cols": 5, "mines": 2, "turns": 2}
"""Two turns on a 4×5 board: a decision scores 20 cells, not the default board's 36, and scoring the choices (one
SmolLM2-vocabulary softmax per answer token) is most of a LaMer step's time here."""


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(model_dir("smollm2"))


def tiny_policy(tokenizer) -> HFPolicy:
    """One layer (a Minesweeper prompt in SmolLM2's tokens needs the 4096 positions) with a LoRA adapter that
    matters from the first step."""
    policy = HFPolicy(tiny_llama(tokenizer, layers=1, positions=4096), tokenizer, source="tiny", lora=LoraOptions(r=2))
    with torch.no_grad():  # peft starts B at 0
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    return policy


def lora_weights(policy: HFPolicy) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in policy.model.named_parameters() if "lora_" in n}


def test_choice_logprobs_is_the_softmax_of_summed_token_logprobs(tokenizer, summation_order) -> None:
    """Two paths to one function (the prompt's cache repeated per answer; every row whole), so float64 throughout
    (tests/numeric.py)."""
    policy = tiny_policy(tokenizer)
    float64_throughout(policy.model.double())
    prompt = policy.encode([{"role": "user", "content": "Reveal a cell."}])
    answers = [policy.answer_ids(c) for c in ("reveal 1 2", "up", "reveal 10 3")]
    with torch.no_grad():
        token_lp, _ = policy.sequence_logprobs([prompt] * 3, answers)
        expected = torch.log_softmax(token_lp.sum(dim=1) / 0.7, dim=0)
        got = choice_logprobs(policy, prompt, answers, 0.7)
    assert torch.allclose(got, expected, **SAME)


def test_reflection_steps_sit_between_attempts_and_take_the_next_return() -> None:
    def attempt(index: int, rewards: list[float]) -> Episode:
        return Episode(index, 1, "t", tuple(Step(f"obs{i}", "up", r) for i, r in enumerate(rewards)), sum(rewards))

    trial = Trial(1, [attempt(1, [-1.0, -1.0]), attempt(2, [10.0])])
    sample = type("S", (), {"prompt_ids": (1, 2)})()
    decision = Choice((1,), ((5,),), 0, 0.0)
    records = [
        Record(("act", 1, 0), decision),
        Record(("act", 1, 1), decision),
        Record(("reflect", 1, 0), sample),
        Record(("act", 2, 0), decision),
    ]
    # attempt 2 restarts from the board of attempt 1's first step: same state key "s0", other attempt
    steps = trial_steps(trial, records, {(1, 0): "s0", (1, 1): "s1", (2, 0): "s0"})
    assert [(s.attempt, s.reflection, s.reward, s.anchor) for s in steps[:2]] == [
        (1, False, -1, (1, "s0")),
        (1, False, -1, (1, "s1")),
    ]
    assert [(s.attempt, s.reflection, s.reward) for s in steps[2:]] == [(1, True, 0), (2, False, 10)]
    assert steps[3].anchor == (2, "s0")
    config = LamerTrainConfig(out="unused", env="sokoban")  # γ_step 0.95, γ_traj 0.9
    other = ("i", 1, [TrainStep(0.0, 1, False, (1, "s0"), ())])  # a second trial: one step from the same start board
    # Scores: R(trial 0) = −1 + 0.95·(−1) + 0.9·10 = 7.05, R(trial 1) = 0; mean 3.525 → A_episode ±3.525.
    # Returns of trial 0, backwards: 10; the reflection 10; attempt 1 gets 0.9·10 = 9 on top of its own return at
    # every step: −1 + 9 = 8, (−1 + 0.95·(−1)) + 9 = 7.05 = R(trial 0).
    # Anchor (1, "s0") groups 7.05 (trial 0) with 0 (trial 1): mean 3.525 → A_step ±3.525; (1, "s1"), the
    # reflection and (2, "s0") are singletons (0). Total: 7.05, 3.525, 3.525, 3.525 | −7.05.
    # (The chained return gave 6.6 at the first step: [6.825, 3.525, 3.525, 3.525, −6.825].)
    assert step_advantages([("i", 0, steps), other], config).tolist() == pytest.approx(
        [7.05, 3.525, 3.525, 3.525, -7.05]
    )


def test_only_the_reflection_tokens_the_next_attempt_sees_are_trained(tokenizer) -> None:
    policy = tiny_policy(tokenizer)
    head = tokenizer.encode("Let me think. <reflection>", add_special_tokens=False)
    body = tokenizer.encode(" Reveal the corner first then the edge", add_special_tokens=False)
    tail = tokenizer.encode("</reflection>", add_special_tokens=False)
    ids = tuple(head + body + tail)
    sample = Sample((1, 2), ids, tuple(float(-k) for k in range(len(ids))), "unused", True)
    seen = trained_part(policy, Record(("reflect", 1, 0), sample), LamerMemory(max_chars=400))
    assert seen is not None
    assert tokenizer.decode(seen.row.completion_ids).strip() == "Reveal the corner first then the edge</reflection>"
    assert seen.row.prompt_ids[:2] == (1, 2) and seen.row.prompt_ids[2:] + seen.row.completion_ids == ids
    start = len(seen.row.prompt_ids) - 2
    assert seen.row.logprobs == sample.logprobs[start:]
    # cut at 20 characters: "Reveal the corner" is all the next attempt reads, so the rest is not trained
    cut = trained_part(policy, Record(("reflect", 1, 0), sample), LamerMemory(max_chars=20))
    assert tokenizer.decode(cut.row.completion_ids).strip() == "Reveal the corner"
    empty = tuple(tokenizer.encode("<reflection></reflection>", add_special_tokens=False))
    empty_sample = dataclasses.replace(sample, completion_ids=empty, logprobs=(0.0,) * len(empty))
    assert trained_part(policy, Record(("reflect", 1, 0), empty_sample), LamerMemory()) is None  # nothing shown
    action = Record(("act", 1, 0), sample)
    assert trained_part(policy, action, LamerMemory(max_chars=20)) is action  # an action reply is trained whole


@pytest.mark.parametrize("actions", ["text", "choices"])
def test_one_step_changes_the_adapter_and_resumes(tmp_path, tokenizer, actions) -> None:
    config = LamerTrainConfig(
        env="minesweeper",
        env_options=TINY_MINES,
        actions=actions,
        reply_tokens=12,
        out=tmp_path / "run",
        tasks=2,
        tasks_per_step=1,
        group=2,
        attempts=2,
        steps=1,
        reflection_tokens=8,
        lr=1e-2,
    )
    policy = tiny_policy(tokenizer)
    before = lora_weights(policy)
    (metrics,) = LamerTrainer(config, policy=policy).train()
    assert metrics["step"] == 1 and metrics["rows_trained"] > 0
    if actions == "text":  # a random model's replies name no cell: invalid steps, as in LaMer, not forced moves
        assert metrics["invalid_steps"] > 0
    assert all(torch.isfinite(torch.tensor(v)) for v in (metrics["loss"], metrics["grad_norm"]))
    after = lora_weights(policy)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    assert (tmp_path / "run" / "step_0001" / "trainer_state.pt").is_file()
    assert (tmp_path / "run" / "final" / "ttlearn_adapter.json").is_file()
    played = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert {p["step"] for p in played} == {1} and 2 <= len(played) <= 4  # 2 trials of 1 or 2 attempts, recorded

    resumed: list[int] = []
    fresh = tiny_policy(tokenizer)
    LamerTrainer(
        config.model_copy(update={"steps": 2}), progress=lambda step, m: resumed.append(step), policy=fresh
    ).train()
    assert resumed == [2]  # step 1 was not replayed: its adapter was loaded instead
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert steps[: len(played)] == [1] * len(played) and set(steps[len(played) :]) == {2}
