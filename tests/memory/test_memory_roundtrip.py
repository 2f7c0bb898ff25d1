"""Every registered memory survives snapshot → JSON → load: a fresh instance then answers exactly like the original.

`FakeLLM` answers deterministically (a function of the prompt), so a memory and its reloaded copy get the same
answers to the same questions.
"""

from __future__ import annotations

import hashlib
import inspect
import json

import pytest
from fakes import FakeLLM

from ttlearn.memory import MEMORIES, make_memory
from ttlearn.types import Episode, Step


def keyed_reply(prompt: str) -> str:
    """A reply every memory can use (insight operations, a tagged cheatsheet), different for every prompt."""
    tag = hashlib.sha256(prompt.encode()).hexdigest()[:6]
    return f"ADD Play paper against repeated rock {tag}.\nAGREE 1\n<cheatsheet>Play paper ({tag}).</cheatsheet>"


def episode(index: int, moves: str = "rock rock paper", score: float = 1.0) -> Episode:
    steps = tuple(Step(f"round {r + 1}", m, 1.0 if m == "paper" else 0.0) for r, m in enumerate(moves.split()))
    transcript = "; ".join(f"R{r + 1} you={s.action}" for r, s in enumerate(steps))
    return Episode(
        index,
        1000 + index,
        f"Rock-paper-scissors; opponent's last moves: {moves}",
        steps,
        score,
        score > 0,
        {"rules": "Play rock-paper-scissors.", "transcript": transcript},
    )


EPISODES = [episode(1, "rock rock rock", -1.0), episode(2, "rock paper scissors", 0.0), episode(3, "paper paper", 2.0)]
QUERY = "Rock-paper-scissors; round 1; opponent's last moves: rock rock"


def build(name: str, tmp_path) -> object:
    """Build `name` with test-friendly options: the hashing embedder, a store under tmp_path, the fake writer."""
    params = inspect.signature(MEMORIES.get(name).__init__).parameters
    options = {}
    if "embedder" in params:
        options["embedder"] = "hash"
    if "store" in params:
        options["store"] = str(tmp_path / f"{name}-store")
    llm = FakeLLM(keyed_reply) if MEMORIES.get(name).needs_llm else None
    try:
        return make_memory(name, llm, **options)
    except (ImportError, OSError) as err:  # a method that needs a real model or runtime absent here
        pytest.skip(f"memory {name!r} cannot be built without a real model/runtime: {err}")


@pytest.mark.parametrize("name", MEMORIES.names())
def test_state_round_trips_to_identical_next_context(name, tmp_path):
    original = build(name, tmp_path / "a")
    for ep in EPISODES:
        original.observe(ep)
    state = json.loads(json.dumps(original.state()))
    fresh = build(name, tmp_path / "b")
    fresh.load(state)
    assert fresh.state() == state
    assert fresh.context(QUERY) == original.context(QUERY)
    # and they keep agreeing as learning continues
    nxt = episode(4, "scissors rock", 1.0)
    original.observe(nxt)
    fresh.observe(nxt)
    assert fresh.context(QUERY) == original.context(QUERY)


@pytest.mark.parametrize("name", ["expel", "cheatsheet", "cheatsheet-rs"])
def test_learning_memories_have_something_to_say_after_three_games(name, tmp_path):
    memory = build(name, tmp_path)
    assert memory.context(QUERY) == ""
    for ep in EPISODES:
        memory.observe(ep)
    assert "Play paper" in memory.context(QUERY)
