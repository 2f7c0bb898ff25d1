"""The action parser and the LLM player's retry / fallback rules."""

from __future__ import annotations

import random
import string

import pytest
from fakes import FakeLLM

from ttlearn.envs import make_env
from ttlearn.envs.base import match_legal_action as parse_action
from ttlearn.players.llm import LLMPlayer, build_messages
from ttlearn.rollout.loop import apply_decision
from ttlearn.rollout.parts import make_player
from ttlearn.types import MOVE_SEQUENCE, RULED_OUT, Completion

RPS = ("rock", "paper", "scissors")


def test_exact_and_embedded_answers():
    assert parse_action("Paper.", RPS) == "paper"
    assert parse_action("  SCISSORS!!", RPS) == "scissors"
    assert parse_action("I will play rock this time", RPS) == "rock"
    assert parse_action("rock beats scissors, so rock", RPS) == "rock"  # earliest mention wins
    assert parse_action("rocks and papers", RPS) is None  # word boundaries: no partial matches
    assert parse_action("", RPS) is None
    assert parse_action("anything", ()) is None


def test_multi_word_actions_prefer_the_longest_match():
    legal = ("call", "raise", "reveal 1 2", "reveal 1 2 3")
    assert parse_action("I'll raise.", legal) == "raise"
    assert parse_action("reveal 1 2 3", legal) == "reveal 1 2 3"
    assert parse_action("Reveal (1, 2)!", legal) == "reveal 1 2"
    assert parse_action("raised earlier", legal) is None


def fuzz_reply(rng: random.Random) -> str:
    pieces = [
        "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 40))),
        rng.choice(["rock", "Paper", "SCISSORS", "rocky", "pap er", "✂️", "石头", "\x00", "\n\n", '{"action": 1}']),
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(rng.randint(0, 20))),
    ]
    rng.shuffle(pieces)
    return "".join(pieces[: rng.randint(0, 3)])


def test_ten_thousand_fuzzed_replies_never_raise_and_invalids_are_counted():
    rng = random.Random(7)
    replies = [fuzz_reply(rng) for _ in range(10_000)]
    expected_valid = sum(parse_action(r, RPS) is not None for r in replies)
    env = make_env("rps", opponent="constant", rounds=10_000)
    obs = env.reset(0)
    player = LLMPlayer(FakeLLM(replies), retries=0)
    decisions = [player.act(env, obs, "", seed=i) for i in range(10_000)]
    assert all(d.action in RPS for d in decisions if d.valid)
    assert all(d.action == "" for d in decisions if not d.valid)  # the loop decides what an invalid reply does
    assert sum(d.valid for d in decisions) == expected_valid
    assert 0 < expected_valid < 10_000  # the fuzz really produces both kinds


def test_retries_then_fallback_is_marked_invalid():
    env = make_env("rps", opponent="constant")
    obs = env.reset(0)
    player = LLMPlayer(FakeLLM(["hmm", "no idea", "paper"]), retries=2)
    decision = player.act(env, obs, "", seed=1)
    assert decision.valid and decision.action == "paper" and decision.info["attempts"] == 3
    stubborn = LLMPlayer(FakeLLM(lambda prompt: "hmm"), retries=1)
    decision = stubborn.act(env, obs, "", seed=1)
    assert not decision.valid and decision.raw == "hmm | hmm"


def test_prompt_carries_rules_memory_and_options():
    messages = build_messages("RULES", "opponent loves rock", "round 3", ["paper", "rock", "scissors"])
    assert "RULES" in messages[0]["content"] and "opponent loves rock" in messages[0]["content"]
    assert "paper, rock, scissors" in messages[1]["content"]
    assert "notes" not in build_messages("RULES", "  ", "round 3", RPS)[0]["content"]


class ScoringFake(FakeLLM):
    """A back end that could score choices: the free-text policy must not use them."""

    supports_choices = True

    def complete(self, messages, *, choices=None, **kwargs):
        assert choices is None, "the free-text policy never scores choices"
        return super().complete(messages, **kwargs)


def test_free_text_policy_reasons_then_acts_in_one_reply():
    env = make_env("minesweeper")
    obs = env.reset(0)
    cell = obs.legal_actions[-1]
    llm = ScoringFake([f"Corners are often safe. <action>{cell}</action>"])
    player, moves = make_player("x", lambda spec: llm, 0.7, env, retries=0, free_text_tokens=48)
    decision = player.act(env, obs, "", seed=1)
    assert decision.valid and decision.action == cell and moves == env.actions_per_turn
    (call,) = llm.calls
    assert call["max_tokens"] == 48 and "<action>...</action>" in call["messages"][-1]["content"]


def test_free_text_policy_unreadable_reply_is_an_invalid_step_with_the_penalty():
    env = make_env("sokoban")
    obs = env.reset(3)
    llm = ScoringFake(["I am not sure what to do here.", "up"])
    player = LLMPlayer(llm, retries=0, free_text_tokens=32)
    decision = player.act(env, obs, "", seed=1)
    assert not decision.valid and len(llm.calls) == 1  # one reply per step: no second try
    action, result = apply_decision(env, obs, decision, seed=1)
    assert action == "" and result.reward == env.invalid_reward and result.info["invalid"]


def test_sokoban_free_text_turn_is_one_reply_of_up_to_three_moves():
    env = make_env("sokoban")
    llm = ScoringFake(lambda prompt: "<action>up, left</action>")
    player, moves = make_player("x", lambda spec: llm, 0.7, env, free_text_tokens=32)
    assert isinstance(player, LLMPlayer) and moves == 3  # no composed turn of scored single moves
    assert player.act(env, env.reset(3), "", seed=1).action == "up, left"


def test_retries_are_a_setting():
    env = make_env("rps", opponent="constant")
    player, _ = make_player("x", lambda spec: FakeLLM(["hmm", "paper"]), 0.0, env, retries=0)
    assert not player.act(env, env.reset(0), "", seed=1).valid
    with pytest.raises(ValueError, match="retries"):
        LLMPlayer(FakeLLM(["x"]), retries=-1)


def test_a_prefill_opens_the_reply_and_stays_in_it():
    # The mini sql set: the player opens the ```sql block for the model, and the reply as recorded starts with it,
    # whether the back end continued the prefill or (a server that ignores prefills) wrote the fence itself.
    env = make_env("sql", dataset="mini")
    obs = env.reset(0)
    continued = FakeLLM(["SELECT name FROM students\n```"])
    decision = LLMPlayer(continued).act(env, obs, "", seed=1)
    assert continued.calls[0]["messages"][-1] == {"role": "assistant", "content": "```sql\n"}
    assert (decision.action, decision.raw) == ("SELECT name FROM students", "```sql\nSELECT name FROM students\n```")
    repeated = LLMPlayer(FakeLLM(["```sql\nSELECT 1\n```"])).act(env, obs, "", seed=1)
    assert (repeated.action, repeated.raw) == ("SELECT 1", "```sql\nSELECT 1\n```")
    legacy = make_env("sql", dataset="mini", prefill=False)
    plain = FakeLLM(["SELECT 2"])
    LLMPlayer(plain).act(legacy, legacy.reset(0), "", seed=1)
    assert plain.calls[0]["messages"][-1]["role"] == "user"


RPS_NOTE = "Your opponent plays rock most of the time. Play paper every round."


def prompt_for(note_at: str, memory: str, env_name: str = "rps", **options) -> list[dict]:
    """The exact messages the LLM player sends for the first decision of instance 0 of a real environment."""
    env = make_env(env_name, **options)
    obs = env.reset(0)
    llm = FakeLLM(lambda prompt: "")
    LLMPlayer(llm, retries=0, note_at=note_at).act(env, obs, memory, seed=3)
    return llm.calls[0]["messages"]


def rps_options(seed: int = 3) -> str:
    options = list(RPS)
    random.Random(seed).shuffle(options)
    return ", ".join(options)


def test_note_at_system_is_todays_prompt():
    env = make_env("rps", opponent="biased", rounds=4)
    obs = env.reset(0)
    assert prompt_for("system", RPS_NOTE, opponent="biased", rounds=4) == [
        {"role": "system", "content": f"{env.describe()}\n\nYour notes from earlier games:\n{RPS_NOTE}"},
        {
            "role": "user",
            "content": f"{obs.text}\n\nLegal actions: {rps_options()}.\n"
            "Answer with exactly one legal action and nothing else.",
        },
    ]
    assert LLMPlayer(FakeLLM([])).note_at == "system"  # the default: recorded runs replay unchanged


def test_note_at_exchange_shows_the_note_as_an_earlier_answer():
    env = make_env("rps", opponent="biased", rounds=4)
    obs = env.reset(0)
    assert prompt_for("exchange", RPS_NOTE, opponent="biased", rounds=4) == [
        {"role": "system", "content": env.describe()},
        {"role": "user", "content": "What do your notes from earlier games say?"},
        {"role": "assistant", "content": RPS_NOTE},
        {
            "role": "user",
            "content": f"{obs.text}\n\nLegal actions: {rps_options()}.\n"
            "Answer with exactly one legal action and nothing else.",
        },
    ]


def test_note_at_advice_is_the_line_before_the_legal_actions():
    env = make_env("rps", opponent="biased", rounds=4)
    obs = env.reset(0)
    messages = prompt_for("advice", RPS_NOTE, opponent="biased", rounds=4)
    assert messages[0] == {"role": "system", "content": env.describe()}
    assert messages[1]["content"] == (
        f"{obs.text}\n\nAdvice from your notes: {RPS_NOTE}\nLegal actions: {rps_options()}.\n"
        "Answer with exactly one legal action and nothing else."
    )


def test_note_at_default_lists_the_named_action_first_and_suggests_it():
    env = make_env("rps", opponent="biased", rounds=4)
    obs = env.reset(0)
    messages = prompt_for("default", RPS_NOTE, opponent="biased", rounds=4)
    others = ", ".join(o for o in rps_options().split(", ") if o != "paper")
    assert messages[0] == {"role": "system", "content": env.describe()}
    assert messages[1]["content"] == (  # "paper", not "rock": the action the note names last
        f"{obs.text}\n\nSuggested action (from your notes): paper\nLegal actions: paper, {others}.\n"
        "Answer with exactly one legal action and nothing else."
    )
    assert "Suggested" not in prompt_for("default", "", opponent="biased", rounds=4)[1]["content"]


def test_note_at_default_walks_a_move_sequence_one_line_per_decision():
    """Sokoban's turn of three scored moves: each move is one decision, so the suggestions follow the note's lines."""

    class Chooser(FakeLLM):
        supports_choices = True

        def complete(self, messages, *, choices=None, **kwargs):
            self.calls.append({"messages": list(messages)})
            suggested = [line for line in messages[-1]["content"].splitlines() if line.startswith("Suggested")]
            return Completion(suggested[0].rsplit(": ", 1)[1] if suggested else choices[0])

    env = make_env("sokoban")
    obs = env.reset(0)
    note = "A verified solution of this level, one move per line:\nup\nup\nright\nleft"
    llm = Chooser([])
    player, moves = make_player("x", lambda spec: llm, 0.0, env, note_at="default")
    player.begin_episode(env)
    assert moves == 3 and player.act(env, obs, note, seed=1).action == "up, up, right"
    player.begin_episode(env)  # a new episode starts the sequence again
    assert player.act(env, obs, note, seed=2).action == "up, up, right"


def test_suggested_action_rules():
    from ttlearn.players.llm import named_last, suggested_action

    assert named_last("the opponent plays rock, so play paper", RPS) == "paper"
    assert named_last("reveal 1 2 then reveal 1 2 3", ("reveal 1 2", "reveal 1 2 3")) == "reveal 1 2 3"
    assert named_last("nothing here", RPS) is None
    sequence = "header line\nrock\nscissors"
    assert [suggested_action(sequence, RPS, k) for k in range(3)] == ["rock", "scissors", None]
    assert suggested_action("Play paper.", RPS, 7) == "paper"  # one line: the same action every decision
    assert suggested_action("Play paper.", ("rock", "scissors"), 0) is None  # not legal now
    assert [suggested_action(f"{MOVE_SEQUENCE}\npaper", RPS, k) for k in range(2)] == ["paper", None]  # marked


def test_note_at_default_leaves_the_ruled_out_actions_off_the_list():
    from ttlearn.players.llm import ruled_out, suggested_action

    legal = ("reveal 1 1", "reveal 1 2", "reveal 3 2", "reveal 6 6")
    note = "reveal 1 2\nAvoid: reveal 3 2, reveal 1 1"
    assert ruled_out(note, legal) == {"reveal 3 2", "reveal 1 1"}
    assert [suggested_action(note, legal, k) for k in range(2)] == ["reveal 1 2", "reveal 1 2"]  # one move line
    assert suggested_action("Avoid: reveal 3 2", legal, 0) is None

    class Recorder(FakeLLM):
        supports_choices = True

        def complete(self, messages, *, choices=None, **kwargs):
            self.calls.append({"messages": list(messages), "choices": list(choices)})
            return Completion(choices[-1])

    env = make_env("minesweeper")
    obs = env.reset(0)
    hidden = [a for a in obs.legal_actions if a not in ("reveal 1 1",)]
    avoid = hidden[:2]
    llm = Recorder([])
    player = LLMPlayer(llm, note_at="default")
    player.begin_episode(env)
    player.act(env, obs, f"{RULED_OUT} {', '.join(avoid)}", seed=3)
    listed, user = llm.calls[0]["choices"], llm.calls[0]["messages"][-1]["content"]
    assert set(listed) == set(obs.legal_actions) - set(avoid) and "Some actions you can take:" in user
    player.act(env, obs, f"{RULED_OUT} {', '.join(obs.legal_actions)}", seed=3)  # all ruled out: all listed
    assert set(llm.calls[1]["choices"]) == set(obs.legal_actions)
    LLMPlayer(llm, note_at="system").act(env, obs, f"{RULED_OUT} {avoid[0]}", seed=3)  # only `default` leaves out
    assert set(llm.calls[2]["choices"]) == set(obs.legal_actions)


def test_note_at_default_with_free_text_actions_suggests_the_note_as_the_answer():
    messages = prompt_for("default", "SELECT count(*) FROM singer", "sql", split="train", database="singer")
    user = [m["content"] for m in messages if m["role"] == "user"][-1]
    assert "\n\nSuggested answer (from your notes):\nSELECT count(*) FROM singer\nAnswer in the format" in user
    assert messages[-1] == {"role": "assistant", "content": "```sql\n"}  # the prefill, as without a note


def test_unknown_note_at_is_refused():
    with pytest.raises(ValueError, match="note_at must be one of system, exchange, advice, default"):
        LLMPlayer(FakeLLM([]), note_at="sidebar")
