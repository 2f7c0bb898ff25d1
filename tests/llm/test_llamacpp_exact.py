"""In-process llama.cpp answers a prompt the same whatever it answered before (issue: 4 of 43 Spider control replies
differed between two runs, because a reused cache prefix had been computed in other batches)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.model, pytest.mark.network]

RULES = "You are playing a long game of rock-paper-scissors against a fixed opponent. " * 12


def messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": RULES}, {"role": "user", "content": question}]


def test_a_reply_does_not_depend_on_the_calls_before_it() -> None:
    from ttlearn.llm import make_llm

    llm = make_llm("qwen-coder")  # the model whose replies drifted; gemma270m happens not to show it
    prompt = messages("Round 7. The opponent played rock, rock, paper, rock. What do you play?")
    histories = {
        "a near twin": messages("Round 7. The opponent played rock, rock, paper, rock. What do you say?"),
        "something else": [{"role": "system", "content": "Something else."}, {"role": "user", "content": "Hi"}],
    }
    seen = {}
    try:
        for name, history in histories.items():
            llm.complete(history, max_tokens=8)
            scored = llm.complete(prompt, choices=["rock", "paper", "scissors"])
            llm.complete(history, max_tokens=8)
            written = llm.complete(prompt, max_tokens=24)
            seen[name] = (scored.choice_logprobs, written.text)
    finally:
        llm.close()
    # Bit for bit: before, unrestricted prefix reuse moved log P(rock) from −2.096 to −2.168 after the near twin.
    assert seen["a near twin"] == seen["something else"]


SQL_ASKS = [
    messages(f"Write one SQLite query: how many singers in singer(name, age, country) are older than {age}?")
    for age in (20, 40)
]


def test_a_reply_does_not_depend_on_the_thread_count() -> None:
    """Thread count is chosen from what is idle and is not recorded, so it must not move a bit of any reply."""
    from ttlearn.llm.llamacpp import LlamaCpp
    from ttlearn.llm.models import model_path

    seen = []
    for threads in (1, 2):
        llm = LlamaCpp(model_path("qwen-coder"), "qwen-coder", n_threads=threads)
        try:
            seen.append(
                [llm.complete(m, max_tokens=12).text for m in SQL_ASKS]
                + [llm.complete(SQL_ASKS[0], choices=["rock", "paper", "scissors"]).choice_logprobs]
            )
        finally:
            llm.close()
    assert seen[0] == seen[1]


def test_replies_in_flight_together_are_the_replies_given_alone() -> None:
    """Calls in flight together each take their own context on the shared weights (`LlamaCpp._slot_for`): every
    written reply and every choice score is bit for bit the one the same prompt gets alone."""
    from concurrent.futures import ThreadPoolExecutor

    from ttlearn.llm import make_llm

    llm = make_llm("qwen-coder")

    def ask(index: int) -> tuple:
        prompt = SQL_ASKS[index % len(SQL_ASKS)]
        if index >= len(SQL_ASKS):
            return llm.complete(prompt, choices=["rock", "paper", "scissors"]).choice_logprobs
        return llm.complete(prompt, max_tokens=12).text

    try:
        alone = [ask(i) for i in range(2 * len(SQL_ASKS))]
        assert len(llm._slots) == 1  # one at a time never opens a second context
        with ThreadPoolExecutor(4) as pool:
            together = list(pool.map(ask, range(2 * len(SQL_ASKS))))
        assert len(llm._slots) > 1  # they were in flight together, on contexts of their own
    finally:
        llm.close()
    assert together == alone
