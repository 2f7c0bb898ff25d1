"""MemoPilot's memory: the writer's prompt in each form, and the note a reply makes."""

from __future__ import annotations

import pytest
from fakes import FakeLLM

from ttlearn.envs.base import make_env
from ttlearn.memory.memopilot import (
    FORMS,
    MemoPilotMemory,
    named_reading,
    note_source,
    reading_choices,
    writer_messages,
    writer_stop,
)
from ttlearn.players.llm import suggested_action
from ttlearn.rollout.loop import play_sequence_game
from ttlearn.rollout.parts import make_player

RPS_ADVICE = {"rock": "play paper", "paper": "play scissors", "scissors": "play rock"}


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
    assert set(FORMS) == {"notes", "counter", "favourite", "style", "style-choice"}


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


def test_the_favourite_form_completes_the_note_with_the_advice_the_environment_states() -> None:
    assert first_game().info["advice"] == RPS_ADVICE  # RPSEnv.advice: the move that beats the favourite
    assert note_source("favourite", " Rock,", RPS_ADVICE) == "The opponent plays mostly rock, so play paper."
    assert note_source("favourite", " scissors and paper", RPS_ADVICE) == (
        "The opponent plays mostly scissors, so play rock."
    )
    assert note_source("favourite", " rock-paper", RPS_ADVICE) == "The opponent plays mostly rock, so play paper."
    # a word that is no reading, or an environment that states no advice: the reply as it is, suggesting nothing new
    assert note_source("favourite", " banana", RPS_ADVICE) == "The opponent plays mostly banana"
    assert note_source("favourite", " rocky", RPS_ADVICE) == "The opponent plays mostly rocky"
    assert note_source("favourite", " 'rock'", RPS_ADVICE) == "The opponent plays mostly 'rock'"
    assert note_source("favourite", " rock", {}) == "The opponent plays mostly rock"
    assert writer_stop("favourite") == ("\n", ",", ".")


def test_a_reading_is_the_longest_one_the_reply_opens_with() -> None:
    assert named_reading("tight-passive, mostly", ["tight", "tight-passive"]) == "tight-passive"
    assert named_reading("Tight, then loose", ["tight", "tight-passive"]) == "tight"
    assert named_reading("tightly", ["tight"]) is None
    assert named_reading("it is tight", ["tight"]) is None  # the reply must open with it


def test_holdem_states_an_adjustment_for_each_style_and_the_style_form_names_one() -> None:
    env = make_env("holdem", opponent="tight-passive", hands=2, seed=0)
    episode = play_sequence_game(env, make_player("scripted:random", None, 0.0, env)[0], lambda task: "", 3, 1)
    advice = episode.info["advice"]
    assert list(advice) == ["tight-passive", "tight-aggressive", "loose-passive", "loose-aggressive"]
    with pytest.raises(ValueError, match="tight-passive"):
        env.advice("nit")
    user = writer_messages(episode.info["rules"], "", episode, 15, "style")[1]["content"]
    assert "one of: tight-passive, tight-aggressive, loose-passive, loose-aggressive." in user
    note = note_source("style", " Tight-passive.", advice)
    assert note == "The opponent plays tight-passive, so steal: bet or raise when it checks, fold when it bets."
    # a player shown the note's last-named legal action (`--note-at default`) is pointed at the exploit of each spot
    assert suggested_action(note, ("check", "bet"), 0) == "bet"
    assert suggested_action(note, ("fold", "call", "raise"), 0) == "fold"
    loose = note_source("style", " loose-aggressive", advice)
    assert suggested_action(loose, ("check", "bet"), 0) == "check"
    assert suggested_action(loose, ("fold", "call", "raise"), 0) == "call"
    tight = note_source("style", " tight-aggressive", advice)
    assert suggested_action(tight, ("fold", "call", "raise"), 0) == "fold"
    assert all(len(note_source("style", f" {r}", advice)) <= 120 for r in advice)  # the recipe's memory_chars


def test_an_environment_without_readings_carries_no_advice() -> None:
    env = make_env("sokoban", seed=0)
    with pytest.raises(NotImplementedError, match="advice"):
        env.advice("lazy")
    episode = play_sequence_game(env, make_player("scripted:random", None, 0.0, env)[0], lambda task: "", 3, 1)
    assert "advice" not in episode.info


def test_the_memory_completes_a_favourite_note_from_its_games_rules() -> None:
    writer = FakeLLM(["paper"])
    memory = MemoPilotMemory(writer, form="favourite")
    memory.observe(first_game())
    assert memory.context("") == "The opponent plays mostly paper, so play scissors."
    assert "in one word" in writer.calls[0]["messages"][1]["content"]


def holdem_game():
    env = make_env("holdem", opponent="tight-passive", hands=2, seed=0)
    return play_sequence_game(env, make_player("scripted:random", None, 0.0, env)[0], lambda task: "", 3, 1)


def test_the_choice_form_offers_the_readings_as_answers_after_the_prefill() -> None:
    advice = holdem_game().info["advice"]
    assert reading_choices("style", advice) is None  # a form that writes freely
    assert reading_choices("style-choice", advice) == [f" {r}" for r in advice]
    assert writer_messages("rules", "", holdem_game(), 15, "style-choice") == writer_messages(
        "rules", "", holdem_game(), 15, "style"
    )  # the same question; only the answers it may take differ
    with pytest.raises(ValueError, match="has none"):
        reading_choices("style-choice", {})
    with pytest.raises(ValueError, match="answers choices"):
        MemoPilotMemory(FakeLLM(["tight"]), form="style-choice").observe(holdem_game())


@pytest.mark.model
def test_the_choice_form_always_writes_a_reading_and_its_advice() -> None:
    """The real writer (SmolLM2 through `hf:`), which by itself rarely writes a style (docs/memopilot-holdem-run)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from ttlearn.llm import make_llm

    episode = holdem_game()
    memory = MemoPilotMemory(make_llm("hf:smollm2"), form="style-choice", max_tokens=8, max_chars=120)
    memory.observe(episode)
    notes = {note_source("style", f" {r}", episode.info["advice"]) for r in episode.info["advice"]}
    assert memory.context("") in notes
