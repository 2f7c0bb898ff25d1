"""The prefix store (`PrefixStore`): prompt blocks evaluated once for every slot, the replies those of a fresh
evaluation bit for bit (issue 49: db_bench's system prompt and instruction turn, shared by every task and both arms,
were evaluated again whenever the other arm's prompt had held the slot)."""

from __future__ import annotations

import numpy as np
import pytest

from ttlearn.llm.llamacpp import PrefixStore


def tokens(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.intc)


def test_the_store_finds_the_most_whole_blocks_shared_and_keeps_the_recent_within_its_budget() -> None:
    store = PrefixStore(budget=7)
    store.put(tokens(1, 2, 3, 4), b"abcd")
    store.put(tokens(1, 2, 9, 9), b"ef")
    assert store.longest(tokens(1, 2, 3, 5, 6), block=2) == (2, b"ef")  # one whole block with both: the smaller
    assert store.longest(tokens(1, 2, 3, 4, 6), block=2) == (4, b"abcd")
    assert store.longest(tokens(7, 2, 3, 4), block=2) == (0, None)
    store.put(tokens(1, 2, 3, 4, 5, 6), b"ghij")  # extends the first: it replaces it (6 bytes held, within budget)
    assert store.longest(tokens(1, 2, 3, 4), block=2) == (4, b"ghij")
    assert store.longest(tokens(1, 2, 9, 9), block=2) == (4, b"ef")  # now the most recently used
    store.put(tokens(5, 5), b"kl")  # 8 bytes: the least recently used goes
    assert store.longest(tokens(1, 2, 3, 4), block=2) == (2, b"ef")
    assert store.longest(tokens(5, 5), block=2) == (2, b"kl")


@pytest.mark.model
@pytest.mark.network
def test_a_prompt_restored_from_the_store_gets_the_reply_of_a_fresh_evaluation(monkeypatch) -> None:
    """db_bench's own prompts on two `dev` tasks: task 1's prompt comes after another prompt has taken the slot (as
    the other arm's does), so the store restores task 0's system prompt and instruction turn into it, cut where the
    two part; its choice scores and its written reply are bit for bit those of a model without a store evaluating it
    from scratch."""
    from ttlearn.data.db_bench import in_split, load_tasks
    from ttlearn.envs import make_env
    from ttlearn.llm.llamacpp import LlamaCpp, Slot
    from ttlearn.llm.models import model_path

    dev = [task for task in load_tasks() if in_split(task, "dev")][:2]
    prompts = []
    for task in dev:
        env = make_env("db_bench", task=task.id)
        env.reset(0)
        prompts.append(env.conversation(""))
        env.close()
    prompts.insert(1, [{"role": "user", "content": "Which SQL statement removes rows?"}])
    stored = LlamaCpp(model_path("qwen-coder"), "qwen-coder")  # smollm2's kernels hid a misaligned restore
    fresh = LlamaCpp(model_path("qwen-coder"), "qwen-coder", prefix_bytes=0)
    restored = []
    restore = Slot._restore

    def counted(slot: Slot, state, tokens: list[int], upto: int) -> None:
        restored.append(upto)
        restore(slot, state, tokens, upto)

    monkeypatch.setattr(Slot, "_restore", counted)
    try:
        for llm in (stored, fresh):
            llm.greedy_replies = None
        for prompt in prompts[:2]:
            stored.complete(prompt, max_tokens=4)
        asked = {"max_tokens": 12}
        choices = {"choices": ["Action: Operation", "Action: Answer"]}
        seen = [(llm.complete(prompts[2], **asked).text, llm.complete(prompts[2], **choices).choice_logprobs)
                for llm in (stored, fresh)]  # fmt: skip
    finally:
        stored.close()
        fresh.close()
    assert restored and restored[0] >= 512  # the shared system prompt and instruction turn came from the store
    assert seen[0] == seen[1]


@pytest.mark.model
@pytest.mark.network
def test_a_model_with_sliding_window_attention_has_no_store() -> None:
    """Gemma 3's window keeps a cache of its own, and a state restored into it gave another reply than a fresh
    evaluation (measured on the test above's prompts): such a model reuses only each slot's own cache."""
    from ttlearn.llm.llamacpp import LlamaCpp
    from ttlearn.llm.models import model_path

    llm = LlamaCpp(model_path("gemma270m"), "gemma270m", n_threads=1)
    try:
        assert llm.prefix_store is None
    finally:
        llm.close()
