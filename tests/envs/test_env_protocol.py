"""The Env protocol for real simulators: declared non-determinism, large and partial action lists, prompts over the
model's context, and the rules the runners rely on (options recorded, every env they build closed), with the
scripted players on environments they cannot play."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ttlearn.envs.base import ENVS, Env, make_env
from ttlearn.envs.check import EXACT_CHECKS, ContractError, check_env
from ttlearn.llm.base import LLM, ContextOverflow, Message
from ttlearn.llm.cache import RecordingLLM, ReplayBook
from ttlearn.players.basic import RandomPlayer
from ttlearn.players.llm import MAX_OPTIONS, LLMPlayer, shortlist
from ttlearn.rollout.loop import play_episode
from ttlearn.rollout.run import validate
from ttlearn.runs import RunConfig
from ttlearn.types import Completion, Observation, StepResult

ITEMS = ("apple", "lamp", "key", "book", "mug")


class Room(Env):
    """A room whose contents a simulator lists in a different order every time (as an unseeded generator in a
    JVM-backed one did); taking the key wins. The order changes the legal actions' order, never a reward."""

    name = "room"
    deterministic = False
    opened = 0
    observed = 0

    def __init__(self, seed: int = 0, size: int = 5) -> None:
        self.size, self.moves = size, 0
        Room.opened += 1

    def close(self) -> None:
        Room.opened -= 1

    def describe(self) -> str:
        return "Take the key."

    def reset(self, seed: int) -> Observation:
        return self.restart()

    def restart(self) -> Observation:
        self.moves, self.took = 0, ""
        return self._observe()

    def _observe(self) -> Observation:
        Room.observed += 1  # every observation lists the room in another order (a random order matched 1 in 120)
        shift = Room.observed % self.size
        items = ITEMS[shift : self.size] + ITEMS[:shift]
        return Observation(f"You see: {', '.join(items)}.", tuple(f"take {item}" for item in items))

    def legal_actions(self) -> tuple[str, ...]:
        return self._observe().legal_actions

    def step(self, action: str) -> StepResult:
        self.moves += 1
        self.took = action
        return StepResult(self._observe(), float(action == "take key"), action == "take key" or self.moves >= 3)

    def score(self) -> float:
        return float(self.took == "take key")

    def success(self) -> bool:
        return self.took == "take key"

    def oracle_action(self, seed: int) -> str:
        return "take key"


class UndeclaredRoom(Room):
    name = "undeclared-room"
    deterministic = True


@pytest.fixture
def rooms(monkeypatch):
    for cls in (Room, UndeclaredRoom):
        monkeypatch.setitem(ENVS._entries, cls.name, cls)
    Room.opened = 0


def test_a_declared_nondeterministic_env_passes_check_env_and_says_what_it_skipped(rooms):
    env = make_env("room", seed=0)
    assert check_env(env)["skipped"] == list(EXACT_CHECKS)
    assert check_env(env, use_oracle=True)["success"] is True  # the oracle must still solve it


def test_resume_and_replay_warn_that_a_nondeterministic_run_is_not_exact(rooms, capsys):
    from ttlearn.cli.play import warn_inexact

    warn_inexact("undeclared-room", "resumed")
    assert capsys.readouterr().out == ""
    warn_inexact("room", "replayed")
    assert "declares deterministic = False, so a replayed run is not exact" in " ".join(capsys.readouterr().out.split())


def test_the_same_env_undeclared_fails_check_env(rooms):
    with pytest.raises(ContractError, match="reset\\(seed\\) must be deterministic"):
        check_env(make_env("undeclared-room", seed=0))


def test_make_env_records_the_options_so_config_is_not_hand_written(rooms):
    assert make_env("room", seed=4, size=3).config() == {"seed": 4, "size": 3}


def test_check_env_and_validation_close_every_env_they_build(rooms):
    env = make_env("room", seed=0)
    check_env(env)
    assert Room.opened == 1  # its twin is closed; the env under test is the caller's
    env.close()
    validate(RunConfig(env="room", player="scripted:random", units=1, attempts=1, carry_memory=True))
    assert Room.opened == 0


# ---- large and partial action lists -------------------------------------------------------------------------------
def test_shortlist_keeps_the_actions_most_like_the_observation():
    actions = ["go north", "take apple", "open red door", "take red apple", "look"]
    # share of each action's words seen in "a red apple lies by the door": 0, 1/2, 2/3, 2/3, 0
    assert shortlist(actions, "A red apple lies by the door.", 3) == ["open red door", "take red apple", "take apple"]
    assert shortlist(actions, "anything", 5) == actions


class Mansion(Env):
    """A simulator that lists 3,000 actions a step, and accepts more than it lists."""

    name = "mansion"
    partial_actions = True

    def __init__(self, seed: int = 0) -> None:
        self.moves = 0

    def describe(self) -> str:
        return "Find the treasure. Type commands."

    def reset(self, seed: int) -> Observation:
        return self.restart()

    def restart(self) -> Observation:
        self.moves = 0
        return Observation("A hall with a golden chest.", self.legal_actions())

    def legal_actions(self) -> tuple[str, ...]:
        return tuple(f"examine object {i}" for i in range(2999)) + ("open golden chest",)

    def step(self, action: str) -> StepResult:
        self.moves += 1
        found = action == "open golden chest"
        reply = "You find the treasure." if found else f"You try to {action}. Nothing happens."
        return StepResult(Observation(reply, self.legal_actions()), float(found), found or self.moves >= 2)

    def score(self) -> float:
        return 0.0


class Chooser(LLM):
    """Answers free text from a script, or the first choice, recording what it was shown."""

    def __init__(self, replies: Sequence[str] = ()) -> None:
        self.replies, self.shown = list(replies), []
        self.supports_choices = not replies

    def complete(
        self, messages: Sequence[Message], *, max_tokens=128, temperature=0.0, seed=0, stop=(), choices=None
    ) -> Completion:
        self.shown.append((messages[-1]["content"], list(choices or [])))
        return Completion(choices[0] if choices else self.replies.pop(0))


def test_a_partial_list_of_3000_actions_is_shortlisted_and_unlisted_commands_are_taken():
    env, llm = Mansion(), Chooser(["dance with the ghost"])
    decision = LLMPlayer(llm).act(env, env.reset(0), "", seed=1)
    prompt, _ = llm.shown[0]
    assert decision.valid and decision.action == "dance with the ghost"  # not listed, passed on to the env
    assert "Some actions you can take:" in prompt and prompt.count("examine object") < MAX_OPTIONS
    assert "open golden chest" in prompt  # the one action whose words are all in the observation

    scorer = Chooser()
    LLMPlayer(scorer, max_options=7).act(env, env.reset(0), "", seed=1)
    assert len(scorer.shown[0][1]) == 7 and "open golden chest" in scorer.shown[0][1]


class Overflowing(LLM):
    supports_choices = True

    def complete(self, messages, **kwargs) -> Completion:
        raise ContextOverflow("prompt of 16709 tokens exceeds the context of 4096", 16709)


def test_a_prompt_over_the_context_is_a_counted_invalid_step_with_its_reason():
    env = Mansion()
    episode = play_episode(env, LLMPlayer(Overflowing()), lambda query: "", index=1, seed=0, act_seed=lambda s: s)
    assert len(episode.steps) == 2 and not any(step.valid for step in episode.steps)
    assert "16709 tokens exceeds the context of 4096" in episode.steps[0].raw


def test_an_overflow_is_recorded_and_replayed():
    calls: list[dict] = []
    recorded = RecordingLLM(Overflowing(), "player", calls.append, "gemma270m")
    with pytest.raises(ContextOverflow):
        recorded.complete([{"role": "user", "content": "hi"}], choices=["a"])
    assert calls[0]["error"].startswith("prompt of 16709 tokens") and calls[0]["completion"]["prompt_tokens"] == 16709
    replayed = RecordingLLM(None, "player", lambda call: None, "gemma270m", ReplayBook(calls))
    with pytest.raises(ContextOverflow, match="16709 tokens"):
        replayed.complete([{"role": "user", "content": "hi"}], choices=["a"])


# ---- scripted players on environments they cannot play -------------------------------------------------------------
class Essay(Env):
    """Free-text answers; an unusable one passes the turn with a penalty."""

    name = "essay"

    def __init__(self, seed: int = 0) -> None:
        self.done = False

    def describe(self) -> str:
        return "Write one sentence."

    def reset(self, seed: int) -> Observation:
        return self.restart()

    def restart(self) -> Observation:
        self.done = False
        return Observation("Write.", ())

    def legal_actions(self) -> tuple[str, ...]:
        return ()

    def step(self, action: str) -> StepResult:
        return StepResult(Observation("Thanks.", ()), 1.0, True)

    def invalid_step(self, reply: str) -> StepResult:
        return StepResult(Observation("No sentence.", ()), -0.1, True)

    def score(self) -> float:
        return 0.0


def test_scripted_random_passes_the_turn_on_free_text_and_the_oracle_refuses_an_env_without_one(monkeypatch):
    monkeypatch.setitem(ENVS._entries, "essay", Essay)
    episode = play_episode(Essay(), RandomPlayer(), lambda q: "", index=1, seed=0, act_seed=lambda s: s)
    assert [(s.valid, s.reward) for s in episode.steps] == [(False, -0.1)]
    with pytest.raises(ValueError, match="environment 'essay' has no oracle; use scripted:random or an LLM player"):
        validate(RunConfig(env="essay", player="scripted:oracle", units=1, attempts=1, carry_memory=True))
    with pytest.raises(ValueError, match="scripted:learner predicts an RPS opponent"):
        validate(RunConfig(env="essay", player="scripted:learner", units=1, attempts=1, carry_memory=True))


@pytest.mark.model
def test_the_embedded_model_plays_a_3000_action_room_without_an_llm_error():
    from ttlearn.llm.base import make_llm

    llm = make_llm("gemma270m")
    try:
        env = Mansion()
        episode = play_episode(env, LLMPlayer(llm), lambda q: "", index=1, seed=0, act_seed=lambda s: s)
        assert all(step.valid for step in episode.steps) and episode.steps
    finally:
        llm.close()
    small = make_llm("gemma270m?n_ctx=64")
    try:
        episode = play_episode(Mansion(), LLMPlayer(small), lambda q: "", index=1, seed=0, act_seed=lambda s: s)
        assert not any(step.valid for step in episode.steps) and "exceeds the context of 64" in episode.steps[0].raw
    finally:
        small.close()
