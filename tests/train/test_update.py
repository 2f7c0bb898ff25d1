"""The one policy update of both trainers (`ttlearn.train.update`), on LaMer's rows: decisions among scored choices
and reflections of several lengths. A tiny random Llama in float64 (tests/numeric.py): micro-batching changes the
order of sums, never the gradient, so any split must give the whole batch's gradient to float64 rounding."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
pytest.importorskip("transformers")

from numeric import SAME, float64_throughout  # noqa: E402
from test_train_lamer import tiny_policy, tokenizer  # noqa: E402,F401 - the tiny policy and its tokenizer fixture

from ttlearn.llm.hf import HFPolicy  # noqa: E402
from ttlearn.train.lamer import LamerTrainConfig  # noqa: E402
from ttlearn.train.update import Choice, UpdateSettings, choice_logprobs, policy_update  # noqa: E402

PROMPTS = [[{"role": "user", "content": "Sweep the mines."}], [{"role": "user", "content": "Why did it fail?"}]]
CELLS = ["reveal 1 1", "reveal 2 3", "flag 4 4"]
ADVANTAGES = np.array([0.7, -1.2, 0.0, 0.4, 1.1])


def float64_policy(tokenizer) -> HFPolicy:  # noqa: F811 - the fixture's name
    """`tiny_policy` computing in float64 throughout."""
    policy = tiny_policy(tokenizer)
    float64_throughout(policy.model.double())
    return policy


@pytest.fixture
def policy(tokenizer) -> HFPolicy:  # noqa: F811 - the fixture imported above
    return float64_policy(tokenizer)


def lamer_rows(policy: HFPolicy) -> list:
    """Two decisions and three texts (a reply, two reflections) of different lengths, sampled from the policy, so
    their recorded log-probs are the policy's own."""
    texts = [
        policy.sample([prompt], max_new_tokens=n, temperature=1.0, seed=n)[0]
        for prompt, n in ((PROMPTS[0], 6), (PROMPTS[1], 3), (PROMPTS[1], 5))
    ]
    answers = tuple(tuple(policy.answer_ids(c)) for c in CELLS)
    prompt = tuple(policy.encode(PROMPTS[0]))
    with torch.no_grad():
        chosen = choice_logprobs(policy, prompt, answers, 1.0)
    decisions = [Choice(prompt, answers, k, float(chosen[k])) for k in (0, 2)]
    return [decisions[0], texts[0], decisions[1], texts[1], texts[2]]


def gradients(policy: HFPolicy, rows: list, advantages: np.ndarray, micro_batch: int, **kwargs) -> list:
    frozen = torch.optim.SGD(policy.trainable_parameters(), lr=0.0)
    config = LamerTrainConfig(out="unused", micro_batch=micro_batch, max_grad_norm=1e9)  # the gradient as computed
    settings = UpdateSettings.of(config)
    policy_update(policy, frozen, rows, advantages, settings, step=False, **kwargs)
    grads = [p.grad.detach().clone() for p in policy.trainable_parameters()]
    frozen.zero_grad(set_to_none=True)
    return grads


def by_hand(policy: HFPolicy, rows: list, advantages: np.ndarray) -> list:
    """TRL's "grpo" loss with ρ = exp(logp − old): (1/B) Σ_rows mean over the row's tokens of −ρ·A (no clip is
    active: the old log-probs are the policy's), each row scored alone."""
    loss = 0.0
    for row, advantage in zip(rows, advantages):
        if isinstance(row, Choice):
            logp = choice_logprobs(policy, row.prompt_ids, row.answers, 1.0)[row.chosen].reshape(1)
            old = torch.tensor([row.logprob], dtype=torch.float64)
        else:
            logp = policy.sequence_logprobs([row.prompt_ids], [row.completion_ids], 1.0)[0][0]
            old = torch.tensor(row.logprobs, dtype=torch.float64)
        loss = loss - (torch.exp(logp - old) * advantage).mean() / len(rows)
    loss.backward()
    grads = [p.grad.detach().clone() for p in policy.trainable_parameters()]
    for p in policy.trainable_parameters():
        p.grad = None
    return grads


def same(a: list, b: list) -> bool:
    return all(torch.allclose(x, y, rtol=SAME["rtol"], atol=SAME["atol"]) for x, y in zip(a, b, strict=True))


def test_micro_batches_give_the_whole_batch_gradient_of_lamer_rows(policy, summation_order) -> None:
    rows = lamer_rows(policy)
    whole = gradients(policy, rows, ADVANTAGES, micro_batch=len(rows))
    assert any(float(g.abs().max()) > 1e-6 for g in whole)
    assert same(whole, by_hand(policy, rows, ADVANTAGES))  # the loss LaMer trains, written out
    for micro_batch in (1, 2, 3):
        assert same(gradients(policy, rows, ADVANTAGES, micro_batch), whole), micro_batch


def test_rows_left_out_count_in_the_batch_they_came_from(policy) -> None:
    """LaMer trains only the rows with an advantage (a zero one adds neither loss nor gradient), and each process only
    its own: weighted against the whole batch's rows (`batch_rows`), the part gives the whole batch's gradient."""
    rows = lamer_rows(policy)
    kept = [k for k, a in enumerate(ADVANTAGES) if a != 0.0]
    whole = gradients(policy, rows, ADVANTAGES, micro_batch=2)
    part = gradients(policy, [rows[k] for k in kept], ADVANTAGES[kept], micro_batch=2, batch_rows=len(rows))
    assert len(kept) < len(rows) and same(part, whole)
