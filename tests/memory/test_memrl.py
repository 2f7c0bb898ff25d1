"""MemRL: the retrieval and update maths against hand-computed numbers, and the memory end to end on a fake LLM."""

from __future__ import annotations

import inspect
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import FakeLLM

from ttlearn.eval.metrics import run_protocol
from ttlearn.memory import make_memory
from ttlearn.memory.backends import LocalMemories, MemoryBackend
from ttlearn.memory.base import MEMORIES
from ttlearn.memory.embed import HashEmbedder
from ttlearn.memory.items import EmbedderMismatchError, NewItem
from ttlearn.memory.memrl import PRESETS, TUNING, MemRLMemory, MemRLOptions
from ttlearn.memory.retrieval import phase_a, phase_b, q_update
from ttlearn.memory.store import MemoryStore
from ttlearn.types import Episode, Step


def strategy_or_reflection(prompt: str) -> str:
    """The writer's answer: a strategy script after a success, a reflection after a failure."""
    if "You solved" in prompt:
        return "1. Play paper.\n2. Repeat."
    return "Wrong assumptions: rock.\nDo better: paper.\nAvoid: scissors."


def episode(index: int, task: str, success: bool) -> Episode:
    steps = (Step("round 1", "rock", -1.0), Step("round 2", "paper", 1.0))
    return Episode(index, seed=index, task=task, steps=steps, score=1.0 if success else -1.0, success=success)


def test_phase_a_keeps_top_k1_above_delta_best_first() -> None:
    assert phase_a([0.2, 0.9, 0.5, 0.9, 0.45], delta=0.45, k1=3).tolist() == [1, 3, 2]
    assert phase_a([0.1, 0.3], delta=0.4, k1=5).tolist() == []


def test_phase_b_ranks_by_hand_computed_scores() -> None:
    # z_Q over ALL phase-A candidates, before the q_min filter (the released code's order): Q = [0, 1, −1, 0.5],
    # mean 0.125, population std √0.546875 = 0.739510 → z_Q = [−0.169031, 1.183216, −1.521278, 0.507093];
    # z_sim = [1.5, 0.5, 1.0, 2.0]; candidate 2 (Q −1 < −0.5) is then dropped.
    cands = [(0.8, 0.0), (0.6, 1.0), (0.7, -1.0), (0.9, 0.5)]
    out = phase_b(cands, q_min=-0.5, w_sim=0.5, w_q=0.5, sim_mean=0.5, sim_std=0.2, k2=2, epsilon=0.0, rng=None)
    assert out.chosen == [3, 1] and not out.explored
    assert out.scores[2] is None
    assert out.scores[0] == pytest.approx(0.5 * (1.5 - 0.169031), abs=1e-6)
    assert out.scores[1] == pytest.approx(0.5 * (0.5 + 1.183216), abs=1e-6)
    assert out.scores[3] == pytest.approx(0.5 * (2.0 + 0.507093), abs=1e-6)


def test_z_q_is_taken_before_the_q_min_filter() -> None:
    # Two candidates: Q = 0.2 (kept) and −5 (dropped). Over all candidates: mean −2.4, std 2.6 → z_Q(0.2) = 1.0;
    # over the kept one alone std would be 0 and z_Q 0. Score = 0.5·(0.5 − 0.5)/0.1 + 0.5·1.0 = 0.5.
    out = phase_b(
        [(0.5, 0.2), (0.9, -5.0)], q_min=-1, w_sim=0.5, w_q=0.5, sim_mean=0.5, sim_std=0.1, k2=1, epsilon=0.0, rng=None
    )
    assert out.chosen == [0] and out.scores == [pytest.approx(0.5), None]


def test_phase_b_clips_z_q_at_three() -> None:
    # Q = ten zeros and one 10: z = (10 - 10/11) / 2.8748 = 3.16 → 3
    cands = [(0.5, 0.0)] * 10 + [(0.5, 10.0)]
    out = phase_b(cands, q_min=-1, w_sim=0.0, w_q=1.0, sim_mean=0.5, sim_std=1.0, k2=1, epsilon=0.0, rng=None)
    assert out.chosen == [10] and out.scores[10] == pytest.approx(3.0)


def test_phase_b_epsilon_zero_is_deterministic_and_draws_nothing() -> None:
    rng = np.random.default_rng(5)
    before = rng.bit_generator.state
    cands = [(0.5 + i / 100, (i * 7 % 5) / 5) for i in range(8)]
    results = {tuple(phase_b(cands, -1, 0.5, 0.5, 0.5, 0.1, 3, 0.0, rng).chosen) for _ in range(20)}
    assert len(results) == 1 and rng.bit_generator.state == before


def test_phase_b_explores_with_probability_epsilon() -> None:
    cands = [(0.5, 0.0), (0.6, 0.0), (0.7, -2.0), (0.8, 0.0)]
    out = phase_b(cands, -1.0, 0.5, 0.5, 0.5, 0.1, 2, 1.0, np.random.default_rng(0))
    assert out.explored and len(out.chosen) == 2 and 2 not in out.chosen
    again = phase_b(cands, -1.0, 0.5, 0.5, 0.5, 0.1, 2, 1.0, np.random.default_rng(0))
    assert again.chosen == out.chosen


def test_phase_b_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="sim_std"):
        phase_b([(0.5, 0.0)], 0, 0.5, 0.5, 0.5, 0.0, 1, 0.0, None)
    with pytest.raises(ValueError, match="epsilon"):
        phase_b([(0.5, 0.0)], 0, 0.5, 0.5, 0.5, 0.1, 1, 1.5, None)


def test_q_update_matches_hand_computed_values() -> None:
    assert q_update(0.5, 1.0, alpha=0.3) == pytest.approx(0.65)  # 0.7·0.5 + 0.3·1
    assert q_update(-0.2, -1.0, alpha=0.5) == pytest.approx(-0.6)  # 0.5·(−0.2) + 0.5·(−1)
    assert q_update(0.7, -1.0, alpha=0.0) == 0.7


def test_gamma_other_than_zero_is_refused(tmp_path: Path) -> None:
    # Before: γ = 0.9 bootstrapped from the max Q of the very items being updated: retrieved Q (0.5, 0.8), r = 1,
    # α = 0.3 moved 0.5 to 0.7·0.5 + 0.3·(1 + 0.9·0.8) = 0.866 instead of 0.65. Now γ ≠ 0 is one clear error.
    with pytest.raises(ValueError, match="gamma = 0 only"):
        memory(tmp_path, gamma=0.9)


def test_run_protocol_metrics() -> None:
    epochs = [{"a": False, "b": True, "c": False}, {"a": True, "b": False, "c": False}]
    out = run_protocol(epochs, validation=[{"x": True, "y": False}, {"x": True, "y": True}])
    assert out.per_epoch == pytest.approx([1 / 3, 1 / 3])
    assert (out.last_epoch_success, out.best_validation_success, out.cumulative_success) == pytest.approx(
        (1 / 3, 1.0, 2 / 3)
    )
    assert run_protocol(epochs).best_validation_success is None
    with pytest.raises(ValueError):
        run_protocol([])


def memory(tmp_path: Path, name: str = "memrl", **options) -> MemRLMemory:
    opts = {"store": str(tmp_path / "m.sqlite"), "embedder": "hash", "epsilon": 0.0, "delta": 0.3, "run_id": "r1"}
    return make_memory(name, FakeLLM(strategy_or_reflection), **{**opts, **options})


def test_both_places_implement_the_backend_protocol_as_declared() -> None:
    """The memory calls only the protocol's methods, so both places must take exactly what it declares."""
    remote = pytest.importorskip("ttlearn.memory.remote", reason="the service client needs the serve extra")
    methods = sorted(MemoryBackend.__abstractmethods__)
    assert len(methods) == 6
    for place in (LocalMemories, remote.RemoteMemories):
        assert MemoryBackend in place.__mro__ and not place.__abstractmethods__
        for method in methods:
            assert inspect.signature(getattr(place, method)) == inspect.signature(getattr(MemoryBackend, method)), (
                f"{place.__name__}.{method}"
            )


def test_memory_writes_reflections_and_strategies_and_learns_q(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    task = "rock paper scissors; opponent beats my last move"
    assert mem.context(task) == ""
    mem.observe(episode(0, task, success=False))
    (first,) = mem.store.inspect("default")
    assert "Reflection:\nWrong assumptions" in first.experience and "round 1 -> rock" in first.experience
    assert (first.q_value, first.episode, first.run_id) == (0.0, 0, "r1")
    assert mem.llm.calls[-1]["temperature"] == 0.0 and mem.llm.calls[-1]["seed"] == 0

    shown = mem.context(task)
    assert shown.startswith("Task: " + task)  # one item is shown as it is, several numbered
    mem.observe(episode(1, task, success=True))
    newest, oldest = mem.store.inspect("default")
    assert (oldest.q_value, oldest.visits, oldest.last_reward) == (pytest.approx(0.3), 1, 1.0)  # 0.7·0 + 0.3·1
    assert "Strategy:\n1. Play paper." in newest.experience and newest.intent_id == oldest.intent_id  # joined
    (log,) = mem.store.retrievals("default", episode=1)
    assert log.chosen == [oldest.id] and log.candidates[0]["sim"] == pytest.approx(1.0)


def test_trajectory_items_need_no_llm_call(tmp_path: Path) -> None:
    mem = memory(tmp_path, write="trajectory")
    mem.observe(episode(0, "opponent plays rock", success=True))
    (item,) = mem.store.inspect("default")
    assert item.experience.startswith("Task: opponent plays rock\nOutcome: success (score 1)\nTrajectory:\n")
    assert "round 1 -> rock" in item.experience and "Strategy" not in item.experience
    assert mem.llm.calls == []
    with pytest.raises(ValueError, match="write must be one of notes, trajectory, answer, got 'summary'"):
        memory(tmp_path, write="summary")


def test_keeping_successes_only_still_learns_q_from_failures(tmp_path: Path) -> None:
    mem = memory(tmp_path, write="trajectory", keep="successes")
    mem.observe(episode(0, "opponent plays rock", success=False))
    assert mem.store.inspect("default") == []  # a failure is not stored
    mem.observe(episode(1, "opponent plays rock", success=True))
    mem.context("opponent plays rock")
    mem.observe(episode(2, "opponent plays rock", success=False))
    (item,) = mem.store.inspect("default")
    assert item.episode == 1 and item.q_value == pytest.approx(-0.3)  # 0.7·0 + 0.3·(−1)
    with pytest.raises(ValueError, match="keep must be one of all, successes"):
        memory(tmp_path, keep="failures")


def test_q_ranking_prefers_the_useful_memory(tmp_path: Path) -> None:
    mem = memory(tmp_path, k1=5, k2=1)
    mem.ns.add_many(
        [
            NewItem("opponent always plays rock", "useless advice", -0.4),
            NewItem("opponent always plays rock", "play paper", 0.9),
        ]
    )
    assert "play paper" in mem.context("opponent always plays rock")
    rag = memory(tmp_path, name="rag", k1=5, k2=1, namespace="default")
    assert "useless advice" in rag.context("opponent always plays rock")  # similarity only: first key, first item


def test_alpha_zero_never_changes_q(tmp_path: Path) -> None:
    mem = memory(tmp_path, name="memp", q_init=0.5)
    for i in range(4):
        mem.context("opponent plays rock")
        mem.observe(episode(i, "opponent plays rock", success=i % 2 == 0))
    items = mem.store.inspect("default")
    assert [m.q_value for m in items] == [0.5] * 4 and sum(m.visits for m in items) == 6
    with pytest.raises(ValueError, match="fixes alpha"):
        memory(tmp_path, name="memp", alpha=0.3)


def test_state_round_trips_pending_retrievals(tmp_path: Path) -> None:
    mem = memory(tmp_path, epsilon=0.5, seed=3)
    mem.observe(episode(0, "opponent plays rock", success=True))
    mem.context("opponent plays rock")
    state = mem.state()
    clone = memory(tmp_path, epsilon=0.5, seed=99)
    clone.load(state)
    assert clone.state() == state
    assert clone.rng.random() == mem.rng.random()
    clone.observe(episode(1, "opponent plays rock", success=False))
    assert [m.q_value for m in clone.store.inspect("default")] == [0.0, pytest.approx(-0.3)]


def test_bad_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="k2"):
        memory(tmp_path, k1=2, k2=3)
    with pytest.raises(ValueError, match="no option"):
        memory(tmp_path, nope=1)
    with pytest.raises(ValueError, match="writes with an LLM"):
        make_memory("memrl", None)
    assert math.isinf(memory(tmp_path, name="rag").cfg.q_min)


def test_the_options_are_one_typed_object_with_the_names_users_write(tmp_path: Path) -> None:
    """`-m key=value` options arrive as one `MemRLOptions`; a value of the wrong type is one line naming the option,
    and the accepted names (in `MEMORIES.check`'s error) are the ones users and recorded configs write."""
    assert set(TUNING) <= set(MemRLOptions.model_fields)  # every tunable option can be given
    mem = memory(tmp_path, k1=7, write="trajectory", seed=3)
    assert (mem.cfg.k1, mem.write, mem.seed) == (7, "trajectory", 3)
    direct = MemRLMemory(
        None, MemRLOptions(store=str(tmp_path / "d.sqlite"), embedder="hash", k1=7, seed=3, delta=0.3, epsilon=0.0)
    )
    assert (direct.cfg, direct.write, direct.seed) == (mem.cfg, "notes", 3)
    with pytest.raises(
        ValueError,
        match=r"^memory method 'memrl' option k1: Input should be a valid integer, .* "
        r"\(got 'many'\)$",
    ) as refused:
        memory(tmp_path, k1="many")
    assert "\n" not in str(refused.value)
    with pytest.raises(
        ValueError,
        match="has no option nope; it accepts: preset, store, url, key, namespace, "
        "embedder, k1, k2, delta, .*, max_trajectory_chars, run_id, seed$",
    ):
        MEMORIES.check("memp", {"nope": 1}, reserved=("llm",))
    MEMORIES.check("memrl", {"preset": "sql", "keep": "successes", "write": "trajectory"}, reserved=("llm",))
    with pytest.raises(ValueError, match="option alpha: Input should be a valid number"):
        MEMORIES.check("memrl", {"alpha": "high"}, reserved=("llm",))  # refused before any model loads


def test_fork_copies_the_memories_and_writes_to_it_stay_there(tmp_path: Path) -> None:
    origin = memory(tmp_path / "origin")
    origin.observe(episode(0, "opponent plays rock", success=False))
    origin.context("opponent plays rock")
    snapshot = json.loads(json.dumps(origin.state()))  # as a run stores it, and `ttlearn memory fork` copies it
    fork = memory(tmp_path / "fork")
    fork.load(snapshot)
    assert fork.store.path != origin.store.path
    assert [m.experience for m in fork.store.inspect("default")] == [
        m.experience for m in origin.store.inspect("default")
    ]
    fork.observe(episode(1, "opponent plays rock", success=True))  # rewards the pending retrieval, writes an item
    forked, origins = fork.store.inspect("default"), origin.store.inspect("default")
    assert len(forked) == 2 and forked[1].q_value == pytest.approx(0.3)
    assert len(origins) == 1 and origins[0].q_value == 0.0


def test_loading_the_fresh_state_resets_the_memory(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    fresh = mem.state()
    for i in range(3):
        mem.context("opponent plays rock")
        mem.observe(episode(i, "opponent plays rock", success=i == 1))
    assert len(mem.ns) == 3 and mem.context("opponent plays rock")
    mem.load(fresh)  # what a trial does before every task
    assert len(mem.ns) == 0 and mem.context("opponent plays rock") == ""
    assert mem.state()["memories"] == fresh["memories"]
    mem.observe(episode(3, "opponent plays scissors", success=True))
    assert [m.episode for m in mem.store.inspect("default")] == [3]


def test_a_state_of_another_embedder_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "other.sqlite") as other:
        other.namespace("default", HashEmbedder(64)).add(NewItem("opponent plays rock", "play paper", 0.0))
        foreign = other.export_namespace("default")
    mem = memory(tmp_path)
    mem.observe(episode(0, "opponent plays rock", success=True))
    with pytest.raises(EmbedderMismatchError, match="hash64"):
        mem.load({**mem.state(), "memories": foreign})
    assert len(mem.ns) == 1
    pointer = {"url": "http://127.0.0.1:8765", "namespace": "a", "retrieved": [], "rng": mem.state()["rng"]}
    with pytest.raises(ValueError, match="holds no memories, only a pointer to 'http://127.0.0.1:8765'"):
        mem.load(pointer)


def test_trials_start_every_task_from_the_fresh_memory(tmp_path: Path) -> None:
    from ttlearn.rollout.run import play as play_units
    from ttlearn.rollout.run import prepare
    from ttlearn.runs import RunConfig

    config = RunConfig(
        env="rps",
        env_options={"opponent": "constant", "rounds": 2},
        memory="memrl",
        memory_options={"embedder": "hash", "epsilon": 0.0, "store": str(tmp_path / "trials.sqlite")},
        player="scripted:random",
        writer="smollm2",  # validated by name, built by the fake factory below
        units=3,
        attempts=2,
        carry_memory=False,  # the opt-out: memrl carries from task to task by default
    )
    run = prepare(tmp_path / "t", config)
    play_units(run, llm_factory=lambda spec: FakeLLM(strategy_or_reflection))
    records = run.records
    # each task starts empty and holds its own observed attempts only (all but the last, which is not observed)
    counts = [len(run.state_after(r["index"])["memory"]["memories"]["items"]) for r in records]
    assert counts == [len(r["attempts"]) - 1 for r in records]
    assert counts[1] > 0 and counts[2] == 0  # task 3 does not see task 2's memory


def test_a_run_from_a_fork_writes_to_its_own_store(tmp_path: Path) -> None:
    from ttlearn.rollout.run import play as play_units
    from ttlearn.rollout.run import prepare
    from ttlearn.runs import Run, RunConfig, RunDir

    def play(out: Path, games: int, memory_from: str | None = None) -> Run:
        """A session of `games` games: units of one attempt, the memory carried."""
        config = RunConfig(
            env="rps",
            env_options={"opponent": "beat-last", "rounds": 3},
            memory="memrl",
            memory_options={"embedder": "hash", "epsilon": 0.0},
            player="scripted:random",
            writer="smollm2",  # validated by name, built by the fake factory below
            units=games,
            attempts=1,
            carry_memory=True,
            memory_from=memory_from,
        )
        run = prepare(out, config)
        play_units(run, llm_factory=lambda spec: FakeLLM(strategy_or_reflection))
        return run

    origin = play(tmp_path / "origin", games=3)
    RunDir(tmp_path / "copy").write_fork(origin.path, 2, origin.snapshot(2))  # what `memory fork` writes
    fork = play(tmp_path / "fork", games=1, memory_from=str(tmp_path / "copy"))
    with MemoryStore(origin.path / "memrl.sqlite") as a, MemoryStore(fork.path / "memrl.sqlite") as b:
        assert [(m.unit, m.episode) for m in a.inspect("default")] == [(3, 1), (2, 1), (1, 1)]  # unit, attempt
        assert [m.unit for m in b.inspect("default")] == [1, 2, 1]  # origin's games 1-2, then its own game 1
        assert {m.run_id for m in b.inspect("default")} == {"origin", "fork"}


# -- issue 20: MemRL as its paper configures it --------------------------------------------------------------------


def test_presets_hold_what_the_released_runners_run(tmp_path: Path) -> None:

    # MemTensor/MemRL at 7c3beba: each runner's values (file and line in the PRESETS comments), not its YAML's.
    service_stats = {"sim_mean": 0.1856827586889267, "sim_std": 0.09407906234264374}  # memory_service.py:311-312
    bcb = {
        "k1": 5,
        "k2": 5,
        "delta": 0.5,
        "epsilon": 0.1,
        "q_min": -0.8,
        "alpha": 0.3,
        "q_init": 0.0,
        "reward_success": 1.0,
        "reward_failure": -1.0,
        "sim_mean": 0.31,
        "sim_std": 0.10,
        "join_threshold": 0.9,
        "batch": 25,
    }  # bcb_runner.py:610 applies the updates every 25 tasks
    llb = {
        "k1": 10,
        "k2": 5,
        "delta": 0.5,
        "epsilon": 0.01,
        "q_min": -0.8,
        "q_init": 0.5,
        "reward_failure": 0.0,
        **service_stats,
        "join_threshold": 0.99,
        "batch": 5,  # run_llb.py never passes the YAML's 0.39 / 0.14
        "failure_trajectory": False,
    }  # memory_context.py:77 cuts a reflection's failed trajectory for LLB
    hle = {
        "k1": 5,
        "k2": 3,
        "delta": 0.5,
        "epsilon": 0.0,
        "q_min": -10.0,
        "q_init": 1.0,
        "q_init_failure": 0.0,
        **service_stats,
        "batch": 32,
    }  # τ 0.25 is never read; hle_runner.py:956 writes Q 1 / 0
    alfworld = {
        "k1": 5,
        "k2": 3,
        "delta": 0.5,
        "epsilon": 0.0,
        "q_min": -10.0,
        "q_init": 0.0,
        "sim_mean": 0.5187,
        "sim_std": 0.1203,
        "join_threshold": 0.9,
        "batch": 32,
    }  # τ 0.62 is never read
    for name, values in {"bcb": bcb, "llb": llb, "hle": hle, "alfworld": alfworld}.items():
        assert {k: PRESETS[name][k] for k in values} == values, name
    # the families' settings stay as landed (the pre-registered evaluation uses them)
    sql = {
        "k1": 5,
        "k2": 1,
        "delta": 0.9,
        "epsilon": 0.0,
        "q_min": -0.8,
        "alpha": 0.3,
        "q_init": 0.0,
        "reward_success": 1.0,
        "reward_failure": -1.0,
        "join_threshold": 0.95,
        "w_sim": 0.5,
        "w_q": 0.5,
        "batch": 1,
        "write": "answer",
        "keep": "successes",
    }
    assert PRESETS["sql"] == PRESETS["code"] == sql and PRESETS["household"] == {**sql, "write": "trajectory"}
    mem = memory(tmp_path, preset="llb", epsilon=None, delta=None)
    assert (mem.cfg.k1, mem.cfg.k2, mem.cfg.q_min, mem.cfg.sim_std, mem.batch) == (10, 5, -0.8, 0.09407906234264374, 5)
    assert (mem.q_init, mem.q_init_failure, mem.rewards) == (0.5, 0.5, (1.0, 0.0))
    assert memory(tmp_path, preset="hle", k2=2).cfg.k2 == 2  # an option given beside a preset wins
    with pytest.raises(ValueError, match="unknown memrl preset 'nope'; choose one of: alfworld, bcb"):
        memory(tmp_path, preset="nope")
    with pytest.raises(ValueError, match="fixes alpha"):
        memory(tmp_path, name="memp", preset="bcb", alpha=0.3)
    assert memory(tmp_path, name="memp", preset="bcb").alpha == 0.0  # a baseline's pin beats the preset


def test_the_llb_minilm_preset_is_the_runner_s_with_the_bar_calibrated_for_minilm(tmp_path: Path) -> None:
    # benchmarks/db_bench_similarity.py on db_train's development tasks (docs/db_bench.md); `llb` keeps δ 0.5
    calibrated = {"delta": 0.4, "sim_mean": 0.232, "sim_std": 0.134}
    assert PRESETS["llb-minilm"] == {**PRESETS["llb"], **calibrated} and PRESETS["llb"]["delta"] == 0.5
    mem = memory(tmp_path, preset="llb-minilm", epsilon=None, delta=None)
    assert (mem.cfg.delta, mem.cfg.k1, mem.cfg.k2, mem.cfg.sim_mean, mem.cfg.sim_std) == (0.4, 10, 5, 0.232, 0.134)


def test_the_llb_preset_shows_a_failure_without_its_trajectory(tmp_path: Path) -> None:
    """MemRL's LLB runner shows a failure's reflection and drops the failed trajectory after it; a success is shown
    whole. Both items are written whole (the store keeps the trajectory)."""
    from ttlearn.memory.memrl import without_failed_trajectory

    failure = (
        "Task: count rows\nOutcome: failure (score 0)\nReflection:\nDo better: answer.\n"
        "Trajectory:\nuser: q\nNot solved."
    )
    success = "Task: count rows\nOutcome: success (score 1)\nStrategy:\n1. COUNT(*)\nTrajectory:\nuser: q\nCorrect."
    assert (
        without_failed_trajectory(failure)
        == "Task: count rows\nOutcome: failure (score 0)\nReflection:\nDo better: answer."
    )
    assert without_failed_trajectory(success) == success
    assert without_failed_trajectory("Task: x\nOutcome: failure (score 0)\n") == "Task: x\nOutcome: failure (score 0)\n"
    for preset, shows_trajectory in (("llb", False), ("hle", True)):
        mem = memory(tmp_path / preset, preset=preset, batch=1, write="trajectory", delta=-1.0, epsilon=0.0)
        mem.observe(episode(0, "opponent plays rock", success=False))
        assert "Trajectory:" in mem.store.inspect("default")[0].experience
        assert ("Trajectory:" in mem.context("opponent plays rock")) == shows_trajectory, preset


def test_hle_writes_a_success_at_q_1_and_a_failure_at_q_0(tmp_path: Path) -> None:
    # hle_runner.py:956 (MemRL at 7c3beba): a new item's Q is 1.0 after a correct answer, 0.0 after a wrong one
    mem = memory(tmp_path, preset="hle", batch=1, write="trajectory")
    mem.observe(episode(0, "opponent plays rock", success=True))
    mem.observe(episode(1, "opponent plays paper", success=False))
    assert {m.episode: m.q_value for m in mem.store.inspect("default")} == {0: 1.0, 1: 0.0}
    plain = memory(tmp_path / "plain", q_init=0.25, write="trajectory")  # without q_init_failure: one Q₀ for all
    plain.observe(episode(0, "opponent plays rock", success=False))
    assert [m.q_value for m in plain.store.inspect("default")] == [0.25]


def test_defaults_are_the_bcb_release_with_the_embedders_own_statistics(tmp_path: Path) -> None:
    from ttlearn.memory.embed import SIMILARITY_STATS

    mem = memory(tmp_path, epsilon=None, delta=None)
    assert (mem.cfg.k1, mem.cfg.k2, mem.cfg.delta, mem.cfg.q_min, mem.cfg.epsilon) == (5, 5, 0.5, -0.8, 0.1)
    assert (mem.cfg.sim_mean, mem.cfg.sim_std) == SIMILARITY_STATS["hash"]
    assert mem.batch == 1  # not the BigCodeBench runner's 25: a short run must see its own updates


def test_answer_items_show_the_task_and_the_verified_answer_only(tmp_path: Path) -> None:
    mem = memory(tmp_path, write="answer", keep="successes")
    done = Episode(
        0,
        0,
        "How many singers?",
        (Step("schema…", "SELECT count(*) FROM singer", 1.0),),
        1.0,
        True,
        {"answer": "```sql\nSELECT count(*) FROM singer\n```", "transcript": "long transcript"},
    )
    mem.observe(done)
    (item,) = mem.store.inspect("default")
    assert item.experience == "Task: How many singers?\nVerified answer:\n```sql\nSELECT count(*) FROM singer\n```"
    assert mem.llm.calls == []


def test_mini_batches_retrieve_from_the_frozen_memory_and_update_together(tmp_path: Path) -> None:
    mem = memory(tmp_path, write="trajectory", batch=2)
    task = "opponent plays rock"
    mem.observe(episode(0, task, success=True))
    assert len(mem.ns) == 0 and mem.context(task) == ""  # task 2 still sees the memory of the batch's start
    mem.observe(episode(1, task, success=False))
    assert [m.episode for m in mem.store.inspect("default")] == [1, 0]  # both written when the batch filled
    assert mem.context(task)
    state = json.loads(json.dumps(mem.state()))
    mem.observe(episode(2, task, success=False))  # pending: its Q update waits for the batch
    assert {m.q_value for m in mem.store.inspect("default")} == {0.0}
    clone = memory(tmp_path / "clone", write="trajectory", batch=2)
    clone.load(state)
    clone.observe(episode(2, task, success=False))
    assert clone.state()["pending"] == mem.state()["pending"]
    with pytest.raises(ValueError, match="batch must be at least 1"):
        memory(tmp_path, batch=0)


def test_learning_memories_carry_from_task_to_task_by_default() -> None:
    from ttlearn.runs import RunConfig

    base = {"env": "rps", "player": "scripted:random", "units": 2}
    for name in ("memrl", "memp", "rag", "expel", "cheatsheet"):
        config = RunConfig(**base, memory=name).resolved()
        assert (config.carry_memory, config.attempts) == (True, 1), name
    lamer = RunConfig(**base, memory="lamer").resolved()
    assert (lamer.carry_memory, lamer.attempts) == (False, 3)
    opted_out = RunConfig(**base, memory="memrl", carry_memory=False).resolved()
    assert (opted_out.carry_memory, opted_out.attempts) == (False, 3)
    sql = RunConfig(**{**base, "env": "sql"}, memory="memrl", memory_options={"k2": 2}).resolved()
    assert sql.memory_options == {"preset": "sql", "k2": 2}  # the family's preset, the user's option over it


def test_trials_carry_memrl_from_task_to_task_by_default(tmp_path: Path) -> None:
    from ttlearn.rollout.run import play as play_units
    from ttlearn.rollout.run import prepare
    from ttlearn.runs import RunConfig, read_config

    config = RunConfig(
        env="rps",
        env_options={"opponent": "constant", "rounds": 2},
        memory="memrl",
        memory_options={"embedder": "hash", "epsilon": 0.0, "write": "trajectory"},
        player="scripted:random",
        units=3,
    )
    run = prepare(tmp_path / "t", config)
    play_units(run, llm_factory=lambda spec: FakeLLM(strategy_or_reflection))
    counts = [len(run.state_after(r["index"])["memory"]["memories"]["items"]) for r in run.records]
    assert counts == [1, 2, 3]  # one attempt per task, every task's episode kept and carried on
    saved = read_config(tmp_path / "t")
    assert (saved.carry_memory, saved.attempts) == (True, 1)  # the resolved defaults are what the run records


def test_verified_answers_can_be_shown_as_earlier_exchanges(tmp_path: Path) -> None:
    from ttlearn.players.llm import build_messages

    answer = "```sql\nSELECT count(*) FROM singer\n```"
    done = Episode(
        0, 0, "How many singers?", (Step("schema…", "SELECT count(*) FROM singer", 1.0),), 1.0, True, {"answer": answer}
    )
    notes = memory(tmp_path, write="answer", keep="successes")
    notes.observe(done)
    shown = notes.context("How many singers?")
    messages = build_messages("Rules.", shown, "Question: count the singers", ())
    assert [m["role"] for m in messages] == ["system", "user"]
    note = f"Task: How many singers?\nVerified answer:\n{answer}"
    assert messages[0]["content"] == f"Rules.\n\nYour notes from earlier games:\n{note}"
    turns = memory(tmp_path, write="answer", keep="successes", show="exchanges")  # the same store
    shown = turns.context("How many singers?")
    assert shown == notes.context("How many singers?")  # the same text in the records
    messages = build_messages("Rules.", shown, "Question: count the singers", ())
    assert messages[:3] == [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": "How many singers?"},
        {"role": "assistant", "content": answer},
    ]
    with pytest.raises(ValueError, match="show must be one of notes, exchanges"):
        memory(tmp_path, show="turns")


def test_a_run_recorded_before_the_defaults_resumes_as_recorded(tmp_path: Path) -> None:
    from ttlearn.rollout.run import prepare
    from ttlearn.runs import RunConfig, read_config

    fields = {
        "env": "sql",
        "env_options": {"dataset": "mini"},
        "memory": "memrl",
        "player": "scripted:random",
        "carry_memory": False,
    }
    (tmp_path / "old").mkdir()
    old = {**fields, "memory_options": {}, "tasks": 2, "attempts": 3, "kind": "trials"}
    (tmp_path / "old" / "trials.json").write_text(json.dumps(old))  # as a trial run of last week wrote it
    recorded = read_config(tmp_path / "old")
    assert recorded.memory_options == {} and (recorded.units, recorded.attempts) == (2, 3)
    # no preset slipped in: the directory's config is kept, resumed or named again
    assert prepare(tmp_path / "old").config == recorded
    assert prepare(tmp_path / "old", recorded).config == recorded
    fresh = prepare(tmp_path / "new", RunConfig(**fields, units=2)).config
    assert fresh.memory_options == {"preset": "sql"} and fresh.attempts == 3


def test_a_memrl_run_on_postgresql_matches_sqlite_and_snapshots_point_at_it(postgres_url: str, tmp_path: Path) -> None:
    """`-m store=postgresql://…`: the same contexts, items and Q as the SQLite store over a sequential run with
    ε-exploration; the memory is shared, so a snapshot names the database and loading one overwrites nothing."""
    pytest.importorskip("psycopg")
    tasks = [f"rock paper scissors; opponent plays {m}" for m in ("rock", "paper", "rock", "scissors")] * 4
    runs = []
    for store in (str(tmp_path / "m.sqlite"), postgres_url):
        mem = memory(tmp_path, store=store, epsilon=0.3, k2=2)
        shown = []
        for index, task in enumerate(tasks):
            shown.append(mem.context(task))
            mem.observe(episode(index, task, success=index % 3 != 0))
        items = [(m.id, m.intent, m.experience, m.q_value, m.visits) for m in mem.store.inspect("default")]
        runs.append((shown, items, mem))
    (lite_shown, lite_items, _), (pg_shown, pg_items, shared) = runs
    assert pg_shown == lite_shown and any(pg_shown)
    assert [m[:3] + m[4:] for m in pg_items] == [m[:3] + m[4:] for m in lite_items]
    assert max(abs(p[3] - s[3]) for p, s in zip(pg_items, lite_items)) <= 1e-9
    state = shared.state()
    assert state["store"] == postgres_url and "memories" not in state
    shared.load(state)
    assert len(shared.ns) == len(pg_items)
    with pytest.raises(ValueError, match="never overwrites them"):
        shared.load(runs[0][2].state())


def attempt(unit: int | None, index: int, task: str, success: bool) -> Episode:
    """Attempt `index` at the run's unit `unit`, as the unit player hands it over (`info["unit"]`)."""
    played = episode(index, task, success)
    return replace(played, info={} if unit is None else {"unit": unit})


def test_provenance_names_the_unit_and_the_attempt(tmp_path: Path) -> None:
    """A trial run's tasks 1 and 2, two attempts each: every item and logged retrieval says which task and which
    attempt, so task 2's first attempt is not task 1's. An episode without a unit (a trainer's) records None."""
    mem = memory(tmp_path, write="trajectory")
    for unit, task in ((1, "opponent plays rock"), (2, "opponent plays paper")):
        for index, success in ((1, False), (2, True)):
            mem.context(task)
            mem.observe(attempt(unit, index, task, success))
    mem.context("opponent plays scissors")
    mem.observe(attempt(None, 1, "opponent plays scissors", True))
    items = mem.store.inspect("default")[::-1]
    assert [(m.unit, m.episode) for m in items] == [(1, 1), (1, 2), (2, 1), (2, 2), (None, 1)]
    logged = mem.store.retrievals("default", run_id="r1")
    assert [(r.unit, r.episode) for r in logged] == [(1, 1), (1, 2), (2, 1), (2, 2), (None, 1)]
    assert [r.query for r in mem.store.retrievals("default", unit=2, episode=1)] == ["opponent plays paper"]
    exported = mem.state()["memories"]["items"]
    assert [(m["unit"], m["episode"]) for m in exported] == [(1, 1), (1, 2), (2, 1), (2, 2), (None, 1)]


def strip_units(value: Any) -> Any:
    """A state as the code before units wrote it: the same, with no `unit` key anywhere."""
    if isinstance(value, dict):
        return {k: strip_units(v) for k, v in value.items() if k != "unit"}
    if isinstance(value, list):
        return [strip_units(v) for v in value]
    return value


def test_a_state_saved_before_units_loads_and_plays_on_the_same(tmp_path: Path) -> None:
    """Old snapshots' items and pending updates name only the episode index: they load, the memory goes on exactly
    as from today's state of the same run, and the items it restored keep no unit."""
    mem = memory(tmp_path / "origin", write="trajectory", batch=2, epsilon=0.5)
    mem.context("opponent plays rock")
    mem.observe(attempt(None, 1, "opponent plays rock", True))
    mem.context("opponent plays rock")
    mem.observe(attempt(None, 2, "opponent plays rock", False))
    mem.context("opponent plays rock")
    mem.observe(attempt(None, 3, "opponent plays rock", True))  # pending: half a batch
    state = json.loads(json.dumps(mem.state()))
    old = strip_units(state)
    assert old != state and "unit" not in json.dumps(old) and old["pending"][0]["item"]["episode"] == 3
    resumed = []
    for name, saved in (("today", state), ("old", old)):
        clone = memory(tmp_path / name, write="trajectory", batch=2, epsilon=0.5)
        clone.load(saved)
        shown = clone.context("opponent plays rock")
        clone.observe(attempt(None, 4, "opponent plays rock", True))
        items = clone.store.inspect("default")[::-1]
        resumed.append((shown, [(m.experience, m.q_value, m.visits, m.unit, m.episode) for m in items]))
    assert resumed[0] == resumed[1]
    assert [row[3:] for row in resumed[1][1]] == [(None, 1), (None, 2), (None, 3), (None, 4)]


def recorded_memrl_options() -> list[tuple[str, dict[str, Any]]]:
    """(memory, options) of every committed run that used a MemRL-family memory (results/*/trials.json)."""
    root = Path(__file__).parents[2] / "results"
    configs = [json.loads(p.read_text()) for p in sorted(root.glob("*/trials.json"))]
    return [(c["memory"], c["memory_options"]) for c in configs if c.get("memory") in ("memrl", "memp", "rag")]


def test_the_recorded_runs_options_build_the_settings_they_ran_with(tmp_path: Path) -> None:
    recorded = recorded_memrl_options()
    assert len(recorded) > 10 and {m for m, _ in recorded} >= {"memrl", "rag"}
    for name, options in recorded:
        MEMORIES.check(name, options, reserved=("llm",))
        mem = memory(tmp_path / name, name, **options, epsilon=None, delta=None)
        preset = {**TUNING, **PRESETS[options["preset"]]} if "preset" in options else TUNING
        assert (mem.cfg.k1, mem.cfg.k2, mem.cfg.delta, mem.batch) == (
            preset["k1"],
            preset["k2"],
            preset["delta"],
            preset["batch"],
        ), (name, options)
        assert (mem.write, mem.keep) == (options.get("write", preset["write"]), options.get("keep", preset["keep"]))


def test_episodes_observed_together_land_in_one_write_or_not_at_all(tmp_path: Path) -> None:
    """`applied_together` (the learning proxy's batch feedback): nothing is written until it ends, then the Q updates
    and new items of every episode at once; an error inside undoes the observations, so they may come again."""
    mem = memory(tmp_path, write="trajectory")
    with pytest.raises(RuntimeError, match="refused"):
        with mem.applied_together():
            mem.observe(episode(0, "task one", success=True))
            raise RuntimeError("refused")
    assert len(mem.ns) == 0 and mem.state()["pending"] == []
    with mem.applied_together():
        mem.observe(replace(episode(0, "task one", success=True), info={"exchange": "x0", "key_id": "k"}))
        mem.observe(episode(1, "task two", success=False))
        assert len(mem.ns) == 0  # batch = 1, yet held until the end
    second, first = mem.store.inspect("default")
    assert (first.exchange, first.key_id, second.exchange) == ("x0", "k", None)
    assert (first.created, first.episode, second.episode) == (second.created, 0, 1)  # one transaction's time
