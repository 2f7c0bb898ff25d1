"""Episodes in flight give the results of a sequential run: against llama.cpp's server over HTTP (`--concurrency`
through the CLI, a session and a trial run), and on one shared in-process llama.cpp back end (a context per call
in flight). The server is llama-cpp-python's, started on loopback with the embedded SmolLM2."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from runhelp import unit_records
from typer.testing import CliRunner

from ttlearn.cli import app
from ttlearn.llm import LLMError
from ttlearn.llm.local_server import llama_server
from ttlearn.llm.models import model_path
from ttlearn.runs import Run, parse_config, without_times

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("uvicorn", reason="needs llama-cpp-python[server] (the test extras)")
    log = tmp_path_factory.mktemp("server") / "server.log"
    # batch-invariant: the server reuses its KV cache prefix by prefix, and interleaved requests must not change a logit
    with llama_server(model_path("smollm2"), "smollm2", log, batch_invariant=True) as base:
        yield f"openai:{base}#smollm2"


def ttlearn(*args: str) -> None:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output


def answered_with_choices(calls: list[dict]) -> bool:
    """Every call came back as one of its choices: structured output held for requests that were in flight together."""
    return all(call["completion"]["text"] in call["params"]["choices"] for call in calls)


def test_concurrent_games_score_every_action_as_one_at_a_time(server, tmp_path):
    args = ["run", "rps", "--opponent", "cycle3", "--memory", "none", "--games", "4", "--rounds", "3", "--llm", server]
    runs = {}
    for concurrency in (1, 2):
        out = tmp_path / f"c{concurrency}"
        ttlearn(*args, "--concurrency", str(concurrency), "--out", str(out))
        runs[concurrency] = Run.open(out)
    one, two = runs[1], runs[2]
    assert two.done == 4
    steps = {n: [[s["action"] for s in r["attempts"][0]["steps"]] for r in run.records] for n, run in runs.items()}
    assert steps[2] == steps[1]
    assert [r["score"] for r in two.records] == [r["score"] for r in one.records]
    calls = two.calls()
    assert len(calls) == 12 and answered_with_choices(calls)


def test_concurrent_trial_tasks_play_as_one_at_a_time(server, tmp_path):
    args = ["run", "minesweeper", "--memory", "none", "--tasks", "3", "--attempts", "1", "--llm", server]
    args += ["-e", "rows=4", "-e", "cols=4", "-e", "mines=2", "-e", "turns=2"]
    records = {}
    for concurrency in (1, 2):
        out = tmp_path / f"c{concurrency}"
        ttlearn(*args, "--concurrency", str(concurrency), "--out", str(out))
        records[concurrency] = unit_records(out)

    def played(record: dict) -> tuple:
        attempts = [([step["action"] for step in a["steps"]], a["score"]) for a in record["attempts"]]
        return record["task"], record["seed"], attempts

    assert [r["task"] for r in records[2]] == [1, 2, 3]
    assert [played(r) for r in records[2]] == [played(r) for r in records[1]]
    assert answered_with_choices([c for r in records[2] for c in r["calls"] if c["type"] == "call"])


PROMPTS = [
    [{"role": "user", "content": f"Round {n}. The opponent played {move} last. Your move?"}]
    for n, move in enumerate(["rock", "paper", "scissors", "rock", "paper", "scissors", "paper", "rock"], 1)
]
MOVES = ["rock", "paper", "scissors"]


def test_threads_sharing_one_in_process_model_get_the_sequential_answers(smollm2, monkeypatch):
    """Four threads on one in-process model: sharing one context they would evaluate into the same KV cache at once
    (llama.cpp aborts the process on a GGML_ASSERT); each on a context of its own, every call scores its choices
    exactly as the sequential calls did, whatever the order in which the threads ran."""

    monkeypatch.setattr(smollm2, "greedy_replies", None)  # every call evaluated, not answered again

    def ask(messages: list[dict]) -> dict[str, float]:
        return smollm2.complete(messages, max_tokens=4, choices=MOVES).choice_logprobs

    sequential = [ask(messages) for messages in PROMPTS]
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(ask, PROMPTS))
    assert threaded == sequential


def test_a_server_that_cannot_start_is_a_clear_error(tmp_path):
    pytest.importorskip("uvicorn", reason="needs llama-cpp-python[server] (the test extras)")
    missing = tmp_path / "missing.gguf"
    with pytest.raises(LLMError, match="did not start"):
        with llama_server(missing, "missing", tmp_path / "server.log"):
            pass


def play_counting_contexts(out, config, evaluate_all: bool = False, **options) -> int:
    """Play `config` into `out` on a fresh pool; returns how many llama.cpp contexts its player's model opened
    (`evaluate_all`: no greedy reply answered again, so every call needs a context)."""
    from ttlearn.rollout.parts import LLMPool
    from ttlearn.rollout.run import play, prepare

    pool = LLMPool()
    try:
        if evaluate_all:
            pool.get(config.player).greedy_replies = None
        play(prepare(out, config), pool=pool, **options)
        return len(pool.get(config.player)._slots)
    finally:
        pool.close()


def test_control_arms_played_ahead_of_their_units_record_what_they_record_after_them(tmp_path, monkeypatch):
    """A control arm depends on its unit's index alone, so the driver plays the last epoch's controls from the start,
    beside the memory arm's first epoch, on parts of their own (the in-process model opens a second context for
    them). The records, calls included, are those of playing each control after its memory arm, wall times aside."""
    import ttlearn.rollout.run as driver

    monkeypatch.setenv("TTLEARN_THREADS", "2")  # two threads: two contexts side by side, whatever the machine's load
    started: list[tuple[str, int]] = []
    for name, what in (("play_unit", "unit"), ("play_control", "control")):
        original = getattr(driver, name)

        def logged(parts, config, index, *rest, _original=original, _what=what):
            started.append((_what, index))
            return _original(parts, config, index, *rest)

        monkeypatch.setattr(driver, name, logged)
    config = parse_config(
        {
            "env": "sql",
            "env_options": {"dataset": "mini"},
            "memory": "history",
            "player": "qwen-coder",
            "units": 2,
            "epochs": 2,
            "attempts": 1,
            "control": True,
        }
    )
    contexts = {False: play_counting_contexts(tmp_path / "False", config, True, control_ahead=False)}
    started.clear()
    contexts[True] = play_counting_contexts(tmp_path / "True", config, True, control_ahead=True)
    records = {ahead: unit_records(tmp_path / f"{ahead}") for ahead in (False, True)}
    assert contexts == {False: 1, True: 2}  # ahead: both arms were in flight together
    # the last epoch's controls (units 3 and 4) were under way before the first epoch's second unit began
    assert started.index(("control", 3)) < started.index(("unit", 2))
    assert [len(r["calls"]) for r in records[True]] == [1, 1, 2, 2]  # a control reply beside each last-epoch task
    assert without_times(records[True]) == without_times(records[False])


def test_independent_games_are_played_side_by_side_by_themselves_with_the_records_of_one_at_a_time(
    tmp_path, monkeypatch
):
    """Memory none: with no --concurrency the driver keeps as many games in flight as the embedded model has
    threads (a context each), and writes the records a one-at-a-time run writes."""
    monkeypatch.setenv("TTLEARN_THREADS", "2")
    config = parse_config(
        {
            "env": "rps",
            "env_options": {"opponent": "cycle3", "rounds": 2},
            "memory": "none",
            "player": "smollm2",
            "units": 2,
            "attempts": 1,
            "carry_memory": True,
        }
    )
    contexts = {n: play_counting_contexts(tmp_path / f"c{n}", config, concurrency=n) for n in (1, None)}
    records = {n: without_times(Run.open(tmp_path / f"c{n}").records) for n in (1, None)}
    assert contexts == {1: 1, None: 2}
    assert records[None] == records[1]
