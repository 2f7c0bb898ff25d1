"""MemoPilot's memory: the writer's prompt in each form, and the note a reply makes."""

from __future__ import annotations

import pytest
from fakes import FakeLLM

from ttlearn.envs.base import make_env
from ttlearn.memory.memopilot import (
    FORMS,
    MemoPilotMemory,
    counters_in,
    note_source,
    writer_messages,
    writer_stop,
)
from ttlearn.rollout.loop import play_sequence_game
from ttlearn.rollout.parts import make_player


def first_game():
    env = make_env("rps", opponent="biased", rounds=3, seed=4)
    player = make_player("scripted:random", None, 0.0, env)[0]
    return play_sequence_game(env, player, lambda task: "", 4, 1)


def test_the_counter_form_opens_the_answer_and_keeps_the_game_log_last() -> None:
    episode = first_game()
    system, user, answer = writer_messages(episode.info["rules"], "", episode, 15, "counter")
    assert system == {"role": "system", "content": episode.info["rules"]}
    assert answer == {"role": "assistant", "content": "The opponent plays mostly"}
    # instructions first, so every prompt of a batch shares them; the game's log is the tail
    assert user["content"].startswith("You keep the notes") and user["content"].endswith(episode.info["transcript"])
    assert "Current notes: (none yet)" in user["content"]
    # the free-notes form is the one every recorded run used: no prefill, no stop
    assert [m["role"] for m in writer_messages("rules", "old", episode, 40)] == ["system", "user"]
    assert writer_stop("notes") == () and writer_stop("counter") == ("\n",)


def test_a_reply_becomes_the_note_its_form_says() -> None:
    assert note_source("counter", " rock, so play paper.\nThe opponent plays") == (
        "The opponent plays mostly rock, so play paper."
    )
    assert note_source("notes", "Opponent: rock.\nPlay paper.") == "Opponent: rock.\nPlay paper."
    assert set(FORMS) == {"notes", "counter", "favourite"}


def test_the_memory_writes_and_bounds_a_counter_note() -> None:
    writer = FakeLLM(["rock, so play paper.", "scissors, so play rock, and then keep playing rock every round"])
    memory = MemoPilotMemory(writer, max_chars=60, form="counter")
    memory.observe(first_game())
    assert memory.context("") == "The opponent plays mostly rock, so play paper."
    assert writer.calls[0]["messages"][-1] == {"role": "assistant", "content": "The opponent plays mostly"}
    memory.observe(first_game())
    assert "Current notes: The opponent plays mostly rock, so play paper." in writer.calls[1]["messages"][1]["content"]
    assert memory.context("") == "The opponent plays mostly scissors, so play rock, and then"  # cut at 60, at a word
    with pytest.raises(ValueError, match="form"):
        MemoPilotMemory(writer, form="essay")


def test_the_favourite_form_completes_the_note_with_the_counter_the_rules_state() -> None:
    rules = "Paper beats rock, rock beats scissors, scissors beats paper. Win +1."
    assert counters_in(rules) == {"rock": "paper", "scissors": "rock", "paper": "scissors"}
    assert note_source("favourite", " Rock,", rules) == "The opponent plays mostly rock, so play paper."
    assert note_source("favourite", " scissors and paper", rules) == "The opponent plays mostly scissors, so play rock."
    # a word the rules do not name, or rules that name no counters: the reply as it is, suggesting nothing new
    assert note_source("favourite", " banana", rules) == "The opponent plays mostly banana"
    assert note_source("favourite", " rock", "Pick a move.") == "The opponent plays mostly rock"
    assert writer_stop("favourite") == ("\n", ",", ".")


def test_the_memory_completes_a_favourite_note_from_its_games_rules() -> None:
    writer = FakeLLM(["paper"])
    memory = MemoPilotMemory(writer, form="favourite")
    memory.observe(first_game())
    assert memory.context("") == "The opponent plays mostly paper, so play scissors."
    assert "in one word" in writer.calls[0]["messages"][1]["content"]
