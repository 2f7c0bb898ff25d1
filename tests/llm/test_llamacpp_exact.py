"""In-process llama.cpp answers a prompt the same whatever it answered before (issue: 4 of 43 Spider control replies
differed between two runs, because a reused cache prefix had been computed in other batches). These tests evaluate
every call (`greedy_replies = None`): a repeated greedy prompt would otherwise be answered from `GreedyReplies`,
which rests on exactly this property."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.model, pytest.mark.network]

RULES = "You are playing a long game of rock-paper-scissors against a fixed opponent. " * 12


def messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": RULES}, {"role": "user", "content": question}]


def test_a_reply_does_not_depend_on_the_calls_before_it() -> None:
    from ttlearn.llm import make_llm

    llm = make_llm("qwen-coder")  # the model whose replies drifted; gemma270m happens not to show it
    llm.greedy_replies = None
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
        llm.greedy_replies = None
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
    llm.greedy_replies = None

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


def test_a_greedy_prompt_answered_before_is_answered_again_without_evaluating_it() -> None:
    """What the exactness above allows: the control arm's prompt equals the memory arm's whenever the memory showed
    nothing, and the model answers it once. A sampled call is always evaluated (its reply depends on its seed)."""
    from ttlearn.llm import make_llm

    llm = make_llm("qwen-coder")
    try:
        first = llm.complete(SQL_ASKS[0], max_tokens=12, seed=1)
        scored = llm.complete(SQL_ASKS[0], choices=["rock", "paper", "scissors"])

        def evaluate(*args, **kwargs):
            raise AssertionError("evaluated again")

        evaluated, llm._complete = llm._complete, evaluate
        again = llm.complete(SQL_ASKS[0], max_tokens=12, seed=2)  # greedy: the seed decides nothing
        assert (again.text, again.prompt_tokens, again.completion_tokens) == (
            first.text,
            first.prompt_tokens,
            first.completion_tokens,
        )
        rescored = llm.complete(SQL_ASKS[0], choices=["rock", "paper", "scissors"])
        assert (rescored.text, rescored.choice_logprobs) == (scored.text, scored.choice_logprobs)
        with pytest.raises(AssertionError, match="evaluated again"):
            llm.complete(SQL_ASKS[0], max_tokens=12, temperature=0.7, seed=2)
        with pytest.raises(AssertionError, match="evaluated again"):
            llm.complete(SQL_ASKS[0], max_tokens=13)  # another setting is another question
        llm.choice_method = "grammar"
        with pytest.raises(AssertionError, match="evaluated again"):
            llm.complete(SQL_ASKS[0], choices=["rock", "paper", "scissors"])  # another way to choose
        llm._complete = evaluated
    finally:
        llm.close()


def test_greedy_replies_are_computed_once_for_callers_in_flight_together() -> None:
    """Callers of one prompt in flight together wait for the first one's reply; a failure is not kept; only the
    most recent `size` prompts are."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from ttlearn.llm.llamacpp import GreedyReplies
    from ttlearn.types import Completion

    replies = GreedyReplies(size=2)
    computed: list[str] = []
    release = threading.Event()

    def compute(text: str):
        def run() -> Completion:
            computed.append(text)
            release.wait(5)
            return Completion(text.upper())

        return run

    with ThreadPoolExecutor(3) as pool:
        asked = [pool.submit(replies.get, ("a",), compute("a")) for _ in range(3)]
        release.set()
        assert [f.result().text for f in asked] == ["A", "A", "A"]
    assert computed == ["a"]

    def fail() -> Completion:
        raise RuntimeError("server gone")

    with pytest.raises(RuntimeError):
        replies.get(("b",), fail)
    assert replies.get(("b",), compute("b")).text == "B"  # the failure was not kept
    replies.get(("c",), compute("c"))  # pushes out "a", the least recent
    replies.get(("a",), compute("a"))
    assert computed == ["a", "b", "c", "a"]
