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
