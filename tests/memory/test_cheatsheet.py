"""Dynamic Cheatsheet: extraction, the rewrite guards, the cumulative curator and once-per-episode synthesis."""

from __future__ import annotations

import pytest
from fakes import FakeLLM
from test_memory_roundtrip import episode

from ttlearn.memory import make_memory
from ttlearn.memory.cheatsheet import extract_cheatsheet, judge_rewrite


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Thinking...\n<cheatsheet>\nPlay paper.\n</cheatsheet>\nDone.", "Play paper."),
        ("<CHEATSHEET>Play paper, then", "Play paper, then"),  # cut off by max_tokens: runs to the end
        ("  Play paper.  ", "Play paper."),  # no tags: the whole reply
        ("<cheatsheet>   </cheatsheet>", ""),
    ],
)
def test_extract_cheatsheet(reply, expected):
    assert extract_cheatsheet(reply) == expected


def test_judge_rewrite():
    assert judge_rewrite(" \n\t", 10) == "empty"
    assert judge_rewrite("x" * 10, 10) == "ok"
    assert judge_rewrite("x" * 11, 10) == "too_long"


def test_cumulative_rewrites_after_every_episode_and_guards_bad_rewrites():
    llm = FakeLLM(
        [
            "<cheatsheet>Opponent plays rock.</cheatsheet>",
            "<cheatsheet>\n \n</cheatsheet>",  # empty → rejected
            "x" * 41,  # too long → rejected
            "<cheatsheet>Opponent cycles; play paper.</cheatsheet>",
        ]
    )
    memory = make_memory("cheatsheet", llm, max_chars=40)
    seen = []
    for i in range(1, 5):
        memory.observe(episode(i))
        seen.append(memory.context("q"))
    assert seen == ["Opponent plays rock."] * 3 + ["Opponent cycles; play paper."]
    assert memory.state() == {"cheatsheet": "Opponent cycles; play paper.", "rejected_empty": 1, "rejected_too_long": 1}
    # the curator sees the old cheatsheet and the latest game, seeded by the episode
    first, second = (c["messages"][1]["content"] for c in llm.calls[:2])
    assert first.startswith("Current cheatsheet:\n(empty)") and "Game 1 (score +1)" in first
    assert second.startswith("Current cheatsheet:\nOpponent plays rock.") and "Game 2" in second
    assert [c["seed"] for c in llm.calls] == [1001, 1002, 1003, 1004]
    assert all(c["temperature"] == 0.0 for c in llm.calls)


def test_retrieval_synthesis_runs_once_per_episode_on_the_first_context_call():
    llm = FakeLLM(lambda prompt: f"<cheatsheet>note {prompt.count('Situation:')}</cheatsheet>")
    memory = make_memory("cheatsheet-rs", llm, embedder="hash", k=2)
    assert memory.context("start") == "" and llm.calls == []  # nothing stored yet: no call
    memory.observe(episode(1))
    assert llm.calls == []  # observing stores the pair; synthesis waits for the next episode's query
    for _ in range(3):  # three steps of episode 2
        assert memory.context("round 1") == "note 1"
    assert len(llm.calls) == 1 and llm.calls[0]["seed"] == 1001
    memory.observe(episode(2))
    memory.observe(episode(3))
    assert memory.context("round 1") == "note 2"  # top-k = 2 of the 3 stored pairs
    assert memory.context("round 2") == "note 2"
    assert len(llm.calls) == 2 and llm.calls[1]["seed"] == 1003
    prompt = llm.calls[1]["messages"][1]["content"]
    assert prompt.startswith("Current cheatsheet:\nnote 1")
    assert "The next game starts in this situation:\nround 1" in prompt


def test_retrieval_synthesis_shows_the_most_similar_pairs_first():
    llm = FakeLLM(lambda prompt: "<cheatsheet>ok</cheatsheet>")
    memory = make_memory("cheatsheet-rs", llm, embedder="hash", k=2)
    for i, moves in enumerate(["scissors scissors", "rock rock", "paper paper"], 1):
        memory.observe(episode(i, moves))
    memory.context(memory.pairs[0]["input"])
    prompt = llm.calls[0]["messages"][1]["content"]
    situations = [line for line in prompt.splitlines() if line.startswith("Situation:")]
    assert situations[0] == f"Situation: {memory.pairs[0]['input']}" and len(situations) == 2


def test_rejected_synthesis_keeps_the_old_cheatsheet_and_is_not_retried_within_the_episode():
    llm = FakeLLM(["<cheatsheet>first</cheatsheet>", "", "y" * 100])
    memory = make_memory("cheatsheet-rs", llm, embedder="hash", max_chars=50)
    memory.observe(episode(1))
    assert memory.context("q") == "first"
    memory.observe(episode(2))
    assert memory.context("q") == memory.context("q") == "first"
    memory.observe(episode(3))
    assert memory.context("q") == "first"
    state = memory.state()
    assert (state["rejected_empty"], state["rejected_too_long"], len(llm.calls)) == (1, 1, 3)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="max_chars"):
        make_memory("cheatsheet", FakeLLM([]), max_chars=0)
    with pytest.raises(ValueError, match="k >= 1"):
        make_memory("cheatsheet-rs", FakeLLM([]), k=0)
