"""Multi-attempt trials: restart between attempts, early stop, what later attempts see, the summary maths, resume."""

from __future__ import annotations

import json

import pytest
from fakes import FakeLLM
from runhelp import play_run, unit_records

from ttlearn.envs.base import make_env
from ttlearn.eval.paired import PairedRow
from ttlearn.eval.summary import Control, Invalid
from ttlearn.memory.base import make_memory
from ttlearn.players.basic import RandomPlayer
from ttlearn.players.llm import LLMPlayer
from ttlearn.players.turn import TurnPlayer
from ttlearn.rollout.loop import play_trial
from ttlearn.rollout.run import validate
from ttlearn.runs import Run, RunConfig, RunDir
from ttlearn.types import UNPARSEABLE, Completion

REFLECTION = "Push the left box first, then go around."
HOPELESS = {"min_moves": 12, "max_moves": 14, "turns": 2}  # 2 turns x 3 moves cannot solve a 12-move level


def scripted_reply(prompt: str) -> str:
    """Writes a tagged reflection when asked for one; otherwise names the first legal action listed."""
    if "<reflection>" in prompt:
        return f"<reflection> {REFLECTION} </reflection> trailing words"
    return prompt.split("Legal actions: ")[1].split(",")[0]


class ChoosingFake(FakeLLM):
    """The same fake on a choice-scoring back end (its reply is one of the listed choices)."""

    supports_choices = True


def act_seed(attempt: int, step: int) -> int:
    return 100 * attempt + step


def memories(out) -> list[dict]:
    """The task records of a run with each one's memory state (stored by hash) filled in."""
    return [{**r, "memory": Run.open(out).state_after(r["index"])["memory"]} for r in unit_records(out)]


def test_restart_replays_the_same_instance_in_every_attempt() -> None:
    env = make_env("sokoban")
    trial = play_trial(
        env, RandomPlayer(), make_memory("none"), seed=7, attempts=3, early_stop=False, act_seed=act_seed
    )
    assert [e.index for e in trial.attempts] == [1, 2, 3]
    starts = {e.steps[0].observation for e in trial.attempts}
    assert starts == {make_env("sokoban").reset(7).text}
    assert len({tuple(s.action for s in e.steps) for e in trial.attempts}) > 1  # different play, same start


def test_oracle_succeeds_on_attempt_one_and_stops(tmp_path) -> None:
    fake = FakeLLM(scripted_reply)
    summary = play_run(
        tmp_path / "run",
        RunConfig(env="sokoban", memory="lamer", player="scripted:oracle", units=3),
        llm_factory=lambda spec: fake,
    )
    assert summary.success_at_k == [1.0, 1.0, 1.0]
    assert summary.mean_attempts == 1.0 and fake.calls == []  # no second attempt, so no reflection
    assert summary.instances["within_budget_rate"] == 1.0


def test_without_memory_every_attempt_is_played_for_pass_at_k(tmp_path) -> None:
    summary = play_run(tmp_path / "run", RunConfig(env="sokoban", memory="none", player="scripted:oracle", units=2))
    assert summary.mean_attempts == 3.0 and summary.pass_at_k == [1.0, 1.0, 1.0]


def _lamer_run(tmp_path, mode: str) -> tuple[list[dict], FakeLLM]:
    fake = FakeLLM(scripted_reply)
    config = RunConfig(
        env="sokoban",
        env_options=HOPELESS,
        memory="lamer",
        memory_options={"mode": mode},
        player="smollm2",
        units=1,
        attempts=2,
    )  # served by the fake
    play_run(tmp_path / mode, config, llm_factory=lambda spec: fake)
    return memories(tmp_path / mode), fake


def test_reflection_mode_shows_the_reflection_to_attempt_two(tmp_path) -> None:
    (record,), fake = _lamer_run(tmp_path, "reflection")
    first, second = record["attempts"]
    assert not first["success"] and first["info"]["context"] == ""
    assert second["info"]["context"].endswith(f"- After attempt 1: {REFLECTION}")
    prompts = [c["messages"] for c in fake.calls]
    writes = [p for p in prompts if "<reflection>" in p[-1]["content"]]
    assert len(writes) == 1 and "Attempt 1 (score" in writes[0][-1]["content"]
    later_player_prompts = prompts[prompts.index(writes[0]) + 1 :]
    assert later_player_prompts and all(REFLECTION in p[0]["content"] for p in later_player_prompts)
    assert record["memory"]["reflections"] == [f"After attempt 1: {REFLECTION}"]


@pytest.mark.parametrize(("mode", "sees_log", "sees_reflection"), [("history", True, False), ("both", True, True)])
def test_history_modes(tmp_path, mode: str, sees_log: bool, sees_reflection: bool) -> None:
    (record,), fake = _lamer_run(tmp_path, mode)
    context = record["attempts"][1]["info"]["context"]
    assert ("Attempt 1 (score" in context) == sees_log
    assert (REFLECTION in context) == sees_reflection
    assert any("<reflection>" in c["messages"][-1]["content"] for c in fake.calls) == sees_reflection


def test_turn_player_takes_three_scored_moves_on_the_advanced_board() -> None:
    last_turn = {**HOPELESS, "turns": 1}  # the private copy runs out of turns after one move; composing goes on
    env = make_env("sokoban", **last_turn)
    fake = ChoosingFake(scripted_reply)
    player = TurnPlayer(LLMPlayer(fake), 3)
    obs = env.reset(3)
    decision = player.act(env, obs, "", seed=5)
    assert len(decision.action.split(", ")) == 3 and decision.info == {"decisions": 3}
    boards = [c["messages"][-1]["content"].split("Legend")[0] for c in fake.calls]
    assert boards[0] == obs.text.strip().split("Legend")[0]
    moved = make_env("sokoban", **last_turn)
    moved.reset(3)
    assert boards[1] == moved.step(decision.action.split(", ")[0]).observation.text.strip().split("Legend")[0]
    assert boards[1] != boards[0]  # the first move changed the board (seed 3 is not blocked)


@pytest.mark.parametrize(
    "options",
    [
        {"units": 3, "carry_memory": False},  # independent trials: each must start from a fresh memory
        {"units": 3, "carry_memory": True, "validation_tasks": 2},  # held-out writes must not carry on
    ],
)
def test_a_memory_service_namespace_cannot_be_reset_so_those_runs_are_refused(options) -> None:
    service = {"url": "http://127.0.0.1:9"}  # its key comes from TTLEARN_MEMORY_KEY, never from a config
    config = RunConfig(env="sokoban", memory="memrl", memory_options=service, player="scripted:oracle", **options)
    with pytest.raises(ValueError, match="cannot reset"):
        validate(config)
    # carried from task to task with no held-out pass, the shared namespace is what the run means to train
    validate(RunConfig(**{**config.model_dump(), "carry_memory": True, "validation_tasks": 0}))


def test_resume_after_a_torn_run_replays_nothing_finished(tmp_path) -> None:
    config = RunConfig(env="minesweeper", memory="none", player="scripted:random", units=3, attempts=2)
    out = tmp_path / "run"
    full = play_run(out, config)
    tasks = RunDir(out).units
    lines = tasks.read_text().splitlines(keepends=True)
    tasks.write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])  # killed mid-write
    torn = tasks.read_bytes()
    assert len(unit_records(out)) == 2 and tasks.read_bytes() == torn  # readers never cut
    played: list[int] = []
    resumed = play_run(out, config, progress=lambda done, total, record: played.append(record["task"]))
    assert played == [3]
    again = tasks.read_text().splitlines()
    assert len(again) == 3 and json.loads(again[2])["attempts"] == json.loads(lines[2])["attempts"]
    assert resumed.success_at_k == full.success_at_k
    with pytest.raises(FileExistsError, match="different run"):
        play_run(out, config.model_copy(update={"attempts": 3}))


def test_bad_config_is_refused_before_anything_runs(tmp_path) -> None:
    with pytest.raises(ValueError, match="moves_per_turn=4 exceeds"):
        play_run(tmp_path / "x", RunConfig(env="sokoban", player="scripted:random", moves_per_turn=4))
    with pytest.raises(ValueError, match="lamer mode"):
        make_memory("lamer", FakeLLM(scripted_reply), mode="diary")
    assert not (tmp_path / "x").exists()


def test_epochs_carry_the_memory_and_report_memrl_protocol_metrics(tmp_path):
    config = RunConfig(
        env="minesweeper", memory="history", player="scripted:random", units=2, attempts=1, epochs=3, seed=4
    )
    summary = play_run(tmp_path / "epochs", config)
    records = memories(tmp_path / "epochs")
    assert [(r["epoch"], r["task"]) for r in records] == [(e, t) for e in (1, 2, 3) for t in (1, 2)]
    assert [r["seed"] for r in records[:2]] == [r["seed"] for r in records[2:4]]  # the same task set every epoch
    assert len(records[-1]["memory"]["logs"]) == 2 and records[-1]["memory"] != records[0]["memory"]  # carried over
    per_epoch = [sum(r["first_success"] is not None for r in records if r["epoch"] == e) / 2 for e in (1, 2, 3)]
    solved = {r["task"] for r in records if r["first_success"] is not None}
    assert summary.protocol.epoch_success == per_epoch
    assert summary.protocol.last_epoch_success == per_epoch[-1]
    assert summary.protocol.cumulative_success == len(solved) / 2


def test_held_out_validation_after_each_epoch_starts_from_the_epoch_memory(tmp_path):
    """MemRL's transfer measure: epochs of 2 tasks, each followed by 2 held-out instances played from that epoch's
    memory, frozen (as MemRL's LLB runner evaluates): they write nothing."""
    config = RunConfig(
        env="minesweeper",
        memory="history",
        player="scripted:random",
        units=2,
        attempts=1,
        epochs=2,
        validation_tasks=2,
        validation_env_options={"mines": 4},
        seed=4,
    )
    summary = play_run(tmp_path / "v", config)
    records = memories(tmp_path / "v")
    assert [(r["type"], r["epoch"], r["task"]) for r in records] == [
        (kind, e, t) for e in (1, 2) for kind in ("task", "validation") for t in (1, 2)
    ]
    tasks = [r for r in records if r["type"] == "task"]
    held_out_boards = "(4 mines)"  # only held-out instances have 4 mines
    assert all(held_out_boards not in log for r in tasks for log in r["memory"]["logs"])  # never carried on
    assert records[2]["memory"] == records[3]["memory"] == records[1]["memory"]  # the memory stayed as it was
    held = [r for r in records if r["type"] == "validation"]
    assert {r["seed"] for r in held} != {r["seed"] for r in tasks}
    rates = [sum(r["first_success"] is not None for r in held if r["epoch"] == e) / 2 for e in (1, 2)]
    assert summary.protocol.validation_success == rates
    assert summary.protocol.best_validation_success == max(rates)
    assert summary.tasks == 4  # success@k counts the played tasks only


class GoldWithMemoryFake(FakeLLM):
    """Answers a `sql` mini question with its gold query when the prompt holds a memory, and with prose otherwise."""

    def __init__(self) -> None:
        super().__init__(lambda prompt: "")
        self.gold = {q.question: q.gold for q in make_env("sql", dataset="mini").questions}

    def complete(self, messages, **kwargs):
        super().complete(messages, **kwargs)
        text = "\n".join(m["content"] for m in messages)
        question = text.split("Question: ")[-1].splitlines()[0]
        remembers = "Your notes from earlier games:" in messages[0]["content"]
        return Completion(f"```sql\n{self.gold[question]}\n```" if remembers else "I am not sure.")


def carried_sql_config() -> RunConfig:
    """Three `sql` mini questions, the memory carried from one to the next, each also played without it."""
    return RunConfig(
        env="sql",
        env_options={"dataset": "mini", "prefill": False},  # prose stays prose (with the prefill it is a bad query)
        memory="history",
        player="qwen-coder",
        units=3,
        attempts=1,
        carry_memory=True,
        control=True,
    )


def test_carried_memory_with_its_paired_control(tmp_path) -> None:
    config = carried_sql_config()
    fake = GoldWithMemoryFake()
    summary = play_run(tmp_path / "c", config, llm_factory=lambda spec: fake)
    records = unit_records(tmp_path / "c")
    contexts = [r["attempts"][0]["info"]["context"] for r in records]
    assert contexts[0] == "" and contexts[1] and contexts[2]  # the memory carries from task to task
    assert [r["first_success"] for r in records] == [None, 1, 1]
    assert [r["control_first_success"] for r in records] == [None, None, None]  # the control never sees it
    assert len(fake.calls) == 6  # one memory and one control decision per task
    # memory 2/3 vs control 0/3, discordant (2, 0): p = 2 · C(2, 0) / 2² = 0.5
    assert summary.control == Control(
        tasks=3,
        rows=[PairedRow(k=1, a=2 / 3, b=0.0, only_a=2, only_b=0, p_value=0.5)],
        epoch=1,
        memory_invalid=Invalid(1 / 3, {UNPARSEABLE: 1}),  # "I am not sure." holds no query: 1 of 3, 3 of 3
        control_invalid=Invalid(1.0),
    )
    assert summary.memory_gain is None
    with pytest.raises(ValueError, match="what memory 'none' already does"):
        play_run(tmp_path / "n", config.model_copy(update={"memory": "none"}))
    assert not (tmp_path / "n").exists()


def test_the_control_pairs_each_instance_once_over_epochs(tmp_path) -> None:
    config = carried_sql_config().model_copy(update={"carry_memory": None, "epochs": 2})
    fake = GoldWithMemoryFake()
    summary = play_run(tmp_path / "e", config, llm_factory=lambda spec: fake)
    records = unit_records(tmp_path / "e")
    assert ["control_first_success" in r for r in records] == [False] * 3 + [True] * 3  # the last epoch only
    assert len(fake.calls) == 9  # six memory decisions, three control ones
    # Epoch 2 sees a memory from its first task on: 3/3 vs 0/3, discordant (3, 0): p = 2 · 1/2³ = 0.25.
    # Pooled over both epochs it would have counted 6 pairs (5 vs 0, p = 0.0625) for 3 instances.
    assert summary.control.tasks == 3 and summary.control.epoch == 2
    assert summary.control.rows[0].p_value == 0.25


def test_a_trial_run_replays_from_its_recorded_calls(tmp_path) -> None:
    """`ttlearn replay` on a trial run: no model, every call answered from the records, the same outcomes; a changed
    recording is caught."""
    from typer.testing import CliRunner

    from ttlearn.cli import app

    config = carried_sql_config()
    play_run(tmp_path / "c", config, llm_factory=lambda spec: GoldWithMemoryFake())
    replayed = CliRunner().invoke(app, ["replay", str(tmp_path / "c"), "--out", str(tmp_path / "r")])
    assert replayed.exit_code == 0 and "reproduced exactly" in replayed.output, replayed.output
    assert [r["first_success"] for r in unit_records(tmp_path / "r")] == [None, 1, 1]
    tasks = RunDir(tmp_path / "c").units
    records = unit_records(tmp_path / "c")
    records[2]["calls"][0]["completion"]["text"] = "I am not sure."  # the memory arm now fails the last task
    tasks.write_text("".join(json.dumps(r) + "\n" for r in records))
    changed = CliRunner().invoke(app, ["replay", str(tmp_path / "c"), "--out", str(tmp_path / "r2")])
    assert changed.exit_code == 1 and "differ" in changed.output
