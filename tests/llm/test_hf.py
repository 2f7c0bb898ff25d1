"""The trainable HF back end on the embedded SmolLM2 (135M, one thread).

The first run converts the GGUF to safetensors under $TTLEARN_CACHE (about a minute); later runs load in ~0.5 s.
Where two paths must compute the same function, the test runs the model in float64 under two summation orders
(tests/numeric.py); float32 is kept where the same path runs twice and must agree bit for bit.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from numeric import SAME, float64_throughout

from ttlearn.llm import LLMS, make_llm
from ttlearn.llm.hf import PROBE_FILE, HFPolicy, LoraOptions, model_dir, positions_from_mask, probe_logits

torch = pytest.importorskip("torch")  # the training extras; ttlearn.llm.hf itself imports without them
pytest.importorskip("peft")
pytest.importorskip("transformers")

pytestmark = pytest.mark.model
torch.set_num_threads(1)

SHORT = [{"role": "user", "content": "Say hi."}]
LONG = [
    {"role": "system", "content": "You play rock-paper-scissors. Answer with one move."},
    {"role": "user", "content": "Your opponent played rock three times in a row. What do you play next?"},
]


@pytest.fixture(scope="module")
def plain() -> HFPolicy:
    return HFPolicy.from_source("smollm2")


@pytest.fixture(scope="module")
def plain64() -> HFPolicy:
    policy = HFPolicy.from_source("smollm2", dtype="float64")
    float64_throughout(policy.model)
    return policy


def random_lora(dtype: str) -> HFPolicy:
    """A fresh LoRA policy whose adapters are random, so they actually change the outputs (peft starts B at 0)."""
    policy = HFPolicy.from_source("smollm2", lora=LoraOptions(), dtype=dtype)
    if dtype == "float64":
        float64_throughout(policy.model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator, dtype=torch.float64) * 0.02)
    return policy


@pytest.fixture
def tuned() -> HFPolicy:
    return random_lora("float32")


@pytest.fixture(scope="module")
def shared_tuned64() -> HFPolicy:
    return random_lora("float64")


@pytest.fixture
def tuned64(shared_tuned64: HFPolicy) -> Iterator[HFPolicy]:
    """One float64 LoRA policy for the module's six numeric tests (none changes a weight), its gradients cleared
    after each so that none sees another's."""
    yield shared_tuned64
    shared_tuned64.model.zero_grad(set_to_none=True)


def test_cache_reproduces_the_gguf_logits_and_forgets_the_quantizer(plain: HFPolicy) -> None:
    from safetensors.torch import load_file

    recorded = load_file(str(model_dir("smollm2") / PROBE_FILE))["logits"]  # computed by the GGUF-loaded model
    assert torch.allclose(probe_logits(plain.model, plain.tokenizer), recorded, atol=1e-4)
    assert plain.model.hf_quantizer is None and not plain.model.is_quantized
    assert getattr(plain.model.config, "quantization_config", None) is None
    assert plain.model.dtype == torch.float32


def test_positions_skip_left_padding() -> None:
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])
    assert positions_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 3]]


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_sampled_logprobs_equal_recomputed_ones(tuned64: HFPolicy, temperature: float, summation_order) -> None:
    samples = tuned64.sample([LONG, SHORT], max_new_tokens=10, temperature=temperature, seed=3)
    prompts = [s.prompt_ids for s in samples]
    completions = [s.completion_ids for s in samples]
    assert len(prompts[0]) != len(prompts[1]) and all(len(c) > 0 for c in completions)
    # recompute in another batch layout: reversed order and padded to a different width
    with torch.no_grad():
        logprobs, mask = tuned64.sequence_logprobs(prompts[::-1], completions[::-1], temperature)
        cold, _ = tuned64.sequence_logprobs(prompts[::-1], completions[::-1], temperature / 2)
    for row, sample in zip(range(1, -1, -1), samples):
        n = len(sample.completion_ids)
        assert mask[row].sum() == n
        assert torch.allclose(logprobs[row, :n], torch.tensor(sample.logprobs, dtype=torch.float64), **SAME)
    assert not torch.allclose(cold[mask], logprobs[mask], atol=1e-3)  # the temperature matters


def test_sequence_logprobs_pad_and_validate(plain: HFPolicy) -> None:
    prompt = plain.encode(SHORT)
    with torch.no_grad():
        logprobs, mask = plain.sequence_logprobs([prompt, prompt], [[42, 43], []])
    assert mask.tolist() == [[True, True], [False, False]] and logprobs[1].tolist() == [0.0, 0.0]
    assert (logprobs[0] < 0).all()
    with pytest.raises(ValueError, match="2 prompts but 1"):
        plain.sequence_logprobs([prompt, prompt], [[42]])
    with pytest.raises(ValueError, match="at least one token"):
        plain.sequence_logprobs([[]], [[42]])


def test_greedy_is_deterministic_and_independent_of_batching(plain64: HFPolicy, summation_order) -> None:
    """Greedy tokens are an argmax: in float32 a near tie could flip with the summation order of another CPU."""
    first = plain64.complete(LONG, max_tokens=8)
    assert first.text and first.completion_tokens > 0
    again = plain64.complete(LONG, max_tokens=8, seed=99)
    assert (again.text, again.prompt_tokens, again.completion_tokens) == (
        first.text,
        first.prompt_tokens,
        first.completion_tokens,
    )
    batched = plain64.sample([SHORT, LONG], max_new_tokens=8, temperature=0, seed=1)
    alone = [plain64.sample([m], max_new_tokens=8, temperature=0, seed=2)[0] for m in (SHORT, LONG)]
    assert [s.completion_ids for s in batched] == [s.completion_ids for s in alone]
    assert batched[1].text.strip() == first.text


RULES = (
    "You play rock-paper-scissors against the same opponent for six rounds. Paper beats rock, rock beats scissors, "
    "scissors beats paper. Win +1, draw 0, loss -1. Answer with one word."
)
SAME_HEAD = [
    [{"role": "system", "content": RULES}, {"role": "user", "content": question}]
    for question in ("The opponent played rock three times.", "The opponent played paper, then scissors twice.")
]


def test_rows_sharing_a_prompt_or_its_head_score_and_learn_as_alone(tuned64: HFPolicy, summation_order) -> None:
    """`_prefill` evaluates a repeated prompt once and the distinct prompts' common head once; the log-probs and
    the gradient they give are those of each row evaluated alone."""
    from ttlearn.llm.hf.policy import SHARED_HEAD, common_prefix

    first, second = (tuned64.encode(m) for m in SAME_HEAD)
    assert common_prefix([first, second]) >= SHARED_HEAD  # the head is shared, the questions are not
    prompts, completions = [first, first, second], [[42, 43, 44], [45], [46, 47]]
    together, mask = tuned64.sequence_logprobs(prompts, completions)
    together[mask].sum().backward()
    shared = [p.grad.clone() for p in tuned64.trainable_parameters()]
    tuned64.model.zero_grad(set_to_none=True)
    for row, (prompt, completion) in enumerate(zip(prompts, completions)):
        alone, _ = tuned64.sequence_logprobs([prompt], [completion])
        assert torch.allclose(together[row, : len(completion)], alone[0], **SAME)
        alone.sum().backward()
    for got, expected in zip(shared, (p.grad for p in tuned64.trainable_parameters())):
        assert torch.allclose(got, expected, **SAME)
    tuned64.model.zero_grad(set_to_none=True)
    batched = tuned64.sample([SAME_HEAD[0], SAME_HEAD[1], SAME_HEAD[0]], max_new_tokens=6, temperature=0, seed=0)
    for messages, sample in zip([SAME_HEAD[0], SAME_HEAD[1], SAME_HEAD[0]], batched):
        (alone,) = tuned64.sample([messages], max_new_tokens=6, temperature=0, seed=0)
        assert sample.completion_ids == alone.completion_ids


def test_stop_strings_and_length_limit(plain: HFPolicy) -> None:
    (cut,) = plain.sample([LONG], max_new_tokens=3, temperature=0, seed=0)
    assert len(cut.completion_ids) == 3 and not cut.finished
    (full,) = plain.sample([LONG], max_new_tokens=8, temperature=0, seed=0)
    stop = full.text[1:3]
    (stopped,) = plain.sample([LONG], max_new_tokens=8, temperature=0, seed=0, stop=[stop])
    assert stopped.finished and stop not in stopped.text and full.text.startswith(stopped.text)


def test_choices_are_scored_by_loglikelihood(plain64: HFPolicy, summation_order) -> None:
    moves = ["rock", "paper", "scissors"]
    answer = plain64.complete(LONG, choices=moves)
    scores = answer.choice_logprobs
    assert set(scores) == set(moves) and answer.text == max(scores, key=scores.get)
    with torch.no_grad():
        logprobs, _ = plain64.sequence_logprobs([plain64.encode(LONG)], [plain64.answer_ids("paper")])
    assert scores["paper"] == pytest.approx(float(logprobs.sum()), **{"rel": SAME["rtol"], "abs": SAME["atol"]})
    assert plain64.answer_ids("paper")[-1] == plain64.tokenizer.eos_token_id


def test_sampling_among_choices_draws_whole_answers_by_their_scores(plain: HFPolicy) -> None:
    """`sample_choices`: every row one whole answer; greedy = the best-scored one; sampled rows follow the seed;
    each sample's log-probs are its answer's tokens, summing to the answer's score at T = 1."""
    moves = [" rock", " paper", " scissors"]
    prompts = [LONG] * 6 + [SHORT] * 2
    greedy = plain.sample_choices(prompts, moves, temperature=0, seed=0)
    best = {
        key: max(scores, key=scores.get)
        for key, scores in (("long", plain.score_choices(plain.encode(LONG), moves)),
                            ("short", plain.score_choices(plain.encode(SHORT), moves)))
    }  # fmt: skip
    assert [s.text for s in greedy] == [best["long"]] * 6 + [best["short"]] * 2
    drawn = plain.sample_choices(prompts, moves, temperature=1.0, seed=3)
    assert drawn == plain.sample_choices(prompts, moves, temperature=1.0, seed=3)
    scores = plain.score_choices(plain.encode(LONG), moves)
    for sample in drawn:
        assert sample.finished and sample.text in moves
        assert list(sample.completion_ids) == plain.answer_ids(sample.text)
    assert sum(drawn[0].logprobs) == pytest.approx(scores[drawn[0].text], abs=1e-4)
    with pytest.raises(ValueError, match="at least one choice"):
        plain.sample_choices(prompts, [], temperature=1.0, seed=0)


def test_lora_trains_only_the_adapters(tuned: HFPolicy) -> None:
    trainable = {n: p for n, p in tuned.model.named_parameters() if p.requires_grad}
    assert all("lora_A" in n or "lora_B" in n for n in trainable)
    # 30 layers × [q: r·(576 + 576) + v: r·(576 + 192)], r = 8
    assert sum(p.numel() for p in tuned.trainable_parameters()) == 30 * (8 * 1152 + 8 * 768) == 460_800
    assert len(tuned.trainable_parameters()) == len(trainable) == 120


def test_adapter_round_trip_gives_identical_logprobs(tuned: HFPolicy, tmp_path) -> None:
    tuned.save_adapter(tmp_path)
    # 460,800 float32 weights: three shards, each a file a repository keeps (under 1 MB)
    shards = sorted(p.name for p in tmp_path.glob("adapter_model-*.safetensors"))
    assert shards == [f"adapter_model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert not (tmp_path / "adapter_model.safetensors").exists()
    assert max(p.stat().st_size for p in tmp_path.iterdir()) < 1_000_000
    restored = make_llm(f"hf:{tmp_path}")
    assert isinstance(restored, HFPolicy) and restored.lora == tuned.lora and restored.spec == f"hf:{tmp_path}"
    prompt, completion = tuned.encode(LONG), tuned.answer_ids("paper, since rock loses to it")
    with torch.no_grad():
        expected, _ = tuned.sequence_logprobs([prompt], [completion])
        got, _ = restored.sequence_logprobs([prompt], [completion])
        with restored.adapters_disabled():
            base, _ = restored.sequence_logprobs([prompt], [completion])
    assert torch.allclose(got, expected, atol=1e-6)
    assert not torch.allclose(base, expected, atol=1e-3)  # the adapter is really in use


def test_an_adapter_missing_a_shard_or_pointing_outside_is_refused(tuned: HFPolicy, tmp_path) -> None:
    tuned.save_adapter(tmp_path)
    index = tmp_path / "adapter_model.safetensors.index.json"
    (tmp_path / "adapter_model-00002-of-00003.safetensors").unlink()
    with pytest.raises(ValueError, match="lacks the shard adapter_model-00002-of-00003.*copy the whole directory"):
        make_llm(f"hf:{tmp_path}")
    saved = json.loads(index.read_text())
    saved["weight_map"] = dict.fromkeys(saved["weight_map"], "../elsewhere.safetensors")
    index.write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="names '../elsewhere.safetensors', not a shard"):
        make_llm(f"hf:{tmp_path}")


def test_one_optimiser_step_moves_only_the_adapters(tuned: HFPolicy) -> None:
    before = {n: p.detach().clone() for n, p in tuned.model.named_parameters()}
    prompt, completion = tuned.encode(LONG), tuned.answer_ids("paper")
    with torch.no_grad(), tuned.adapters_disabled():
        reference, _ = tuned.sequence_logprobs([prompt], [completion])
    optimiser = torch.optim.AdamW(tuned.trainable_parameters(), lr=1e-3)
    logprobs, mask = tuned.sequence_logprobs([prompt], [completion])
    loss = -(logprobs * mask).sum()
    loss.backward()
    optimiser.step()
    changed = {n for n, p in tuned.model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed)
    assert any("lora_B" in n for n in changed)
    with torch.no_grad():
        after, _ = tuned.sequence_logprobs([prompt], [completion])
        with tuned.adapters_disabled():
            frozen, _ = tuned.sequence_logprobs([prompt], [completion])
    assert -(after.sum()) < loss.detach()  # the step lowered the loss
    assert torch.equal(frozen, reference)


def test_registry_and_bad_input(plain: HFPolicy, tmp_path) -> None:
    assert "hf" in LLMS.names()
    with pytest.raises(ValueError, match="config.json"):
        model_dir(str(tmp_path))
    with pytest.raises(ValueError, match="r >= 1"):
        LoraOptions(r=0)
    with pytest.raises(ValueError, match="no LoRA adapter"):
        plain.save_adapter(tmp_path)
    with pytest.raises(ValueError, match="not a ttlearn adapter"):
        plain.load_adapter(tmp_path)
    with pytest.raises(ValueError, match="max_new_tokens"):
        plain.sample([SHORT], max_new_tokens=0)


# ---- calls in flight --------------------------------------------------------------------------------------------
QUESTIONS = [[{"role": "user", "content": f"Write a SQLite query over the table {t}."}] for t in ("a", "b", "c", "d")]
MOVES = ["rock", "paper", "scissors"]


def answers(policy: HFPolicy, together: bool) -> list[tuple[str, dict[str, float]]]:
    """Each question's greedy reply and its move scores, asked one at a time or all in flight on threads."""

    def one(question: list[dict[str, str]]) -> tuple[str, dict[str, float]]:
        reply = policy.complete(question, max_tokens=12, temperature=0.0)
        return reply.text, policy.score_choices(policy.encode(question), MOVES)

    if not together:
        return [one(q) for q in QUESTIONS]
    with ThreadPoolExecutor(len(QUESTIONS)) as pool:
        return list(pool.map(one, QUESTIONS))


@pytest.mark.parametrize("torch_threads", [1, 2])
def test_calls_in_flight_reply_exactly_as_alone(plain: HFPolicy, torch_threads: int) -> None:
    torch.set_num_threads(torch_threads)
    try:
        alone = answers(plain, together=False)
        assert answers(plain, together=True) == alone  # texts and scores, bit for bit
    finally:
        torch.set_num_threads(1)
    assert len({text for text, _ in alone}) > 1  # the questions get different replies: a mix-up would show


def test_side_by_side_is_one_call_per_idle_core(plain: HFPolicy, monkeypatch) -> None:
    monkeypatch.setenv("TTLEARN_THREADS", "2")  # as `default_threads` finds an idle 2-core machine
    assert HFPolicy(plain.model, plain.tokenizer, source="smollm2").side_by_side == 2
    monkeypatch.setenv("TTLEARN_THREADS", "1")
    assert HFPolicy(plain.model, plain.tokenizer, source="smollm2").side_by_side == 1


def test_a_call_ending_does_not_turn_dropout_on_under_one_still_in_flight(plain: HFPolicy) -> None:
    """The trainer left the model in train mode. `first` enters, `second` enters after it, `first` ends while
    `second` is still decoding: every forward pass of both must still run in eval mode, and the trainer's mode
    comes back when the last call ends."""
    second_inside, first_done = threading.Event(), threading.Event()
    modes: dict[str, list[bool]] = {"first": [], "second": []}

    def record(module, args) -> None:
        name = threading.current_thread().name
        modes[name].append(module.training)
        if name == "first" and len(modes["first"]) == 1:
            assert second_inside.wait(30)
        if name == "second" and len(modes["second"]) == 1:
            second_inside.set()
            assert first_done.wait(30)

    def first() -> None:
        plain.complete(SHORT, max_tokens=1)
        first_done.set()

    plain.model.train()
    hook = plain.model.register_forward_pre_hook(record)
    try:
        threads = [threading.Thread(target=first, name="first")]
        threads.append(threading.Thread(target=plain.complete, args=(LONG,), kwargs={"max_tokens": 4}, name="second"))
        threads[0].start()
        while not modes["first"]:
            time.sleep(0.01)
        threads[1].start()
        for thread in threads:
            thread.join(60)
        assert len(modes["second"]) > 1 and not any(modes["first"] + modes["second"])
        assert plain.model.training
    finally:
        hook.remove()
        plain.model.eval()
