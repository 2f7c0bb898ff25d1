"""The MemoPilot trainer: advantage wiring, micro-batch weights, the PPO ratio at sampling, one optimiser step, resume.

Model tests use the embedded SmolLM2 writer with tiny settings (T=2, G=2, 2 rounds, 8-token writes) and a scripted
player whose move is a function of the memory text, so different memories give different rewards (the real frozen
player is tested elsewhere; here only the trainer's plumbing is under test).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from numeric import SAME

from ttlearn.memory.memopilot import seen_token_count
from ttlearn.players.base import Decision, Player
from ttlearn.train.memopilot import (
    MemoPilotTrainConfig,
    MemoPilotTrainer,
    Write,
    interval,
    move_shares,
    paired_change,
    write_advantages,
)
from ttlearn.train.parallel import rank_share
from ttlearn.train.update import UpdateSettings, micro_batch_weight, policy_update

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
torch.set_num_threads(1)


class NoteHashPlayer(Player):
    """Plays the move indexed by the memory's byte sum mod 3: a deterministic player that reacts to any note."""

    def act(self, env, obs, memory, *, seed):
        return Decision(obs.legal_actions[sum(memory.encode()) % len(obs.legal_actions)])


def fake_write(sequence: int, rollout: int, turn: int) -> Write:
    return Write(sequence, rollout, turn, None)  # type: ignore[arg-type]  # the sample is not read here


# ---- pure pieces -------------------------------------------------------------------------------------------------
def test_advantages_are_wired_per_turn_and_rollout() -> None:
    # r[i, t-1]: rollout 0 won game 2, rollout 1 lost it; both drew game 3
    rewards = {7: np.array([[1.0, 0.0], [-1.0, 0.0]])}
    writes = [fake_write(7, 1, 2), fake_write(7, 0, 1), fake_write(7, 1, 1), fake_write(7, 0, 2)]
    # turn 1: mean 0, sample std sqrt(2) → ±1/(1.41421 + 1e-4); turn 2: all equal → 0
    expected = [0.0, 1 / (2**0.5 + 1e-4), -1 / (2**0.5 + 1e-4), 0.0]
    assert np.allclose(write_advantages(writes, rewards, "group"), expected, atol=1e-9)
    # scale "none" only centres: 1 and -1
    assert np.allclose(write_advantages(writes, rewards, "none"), [0.0, 1.0, -1.0, 0.0])


def test_micro_batch_weights_recover_the_whole_batch_loss() -> None:
    from ttlearn.train.loss import LOSS_TYPES, policy_loss

    assert micro_batch_weight("grpo", 1, 5, 4, 20) == 0.25
    assert micro_batch_weight("bnpo", 1, 5, 4, 20) == 0.25 and micro_batch_weight("bnpo", 3, 15, 4, 20) == 0.75
    assert micro_batch_weight("dapo", 1, 5, 4, 20) == 1.0
    with pytest.raises(ValueError, match="loss_type"):
        micro_batch_weight("sum", 1, 1, 1, 1)
    gen, f64 = torch.Generator().manual_seed(0), {"dtype": torch.float64}  # sums in two orders: float64 (numeric.py)
    logp, old = -torch.rand(5, 6, generator=gen, **f64), -torch.rand(5, 6, generator=gen, **f64)
    adv = torch.randn(5, generator=gen, **f64)
    mask = torch.tensor([[1] * n + [0] * (6 - n) for n in (6, 2, 4, 1, 3)], dtype=torch.bool)
    total_tokens = int(mask.sum())
    for loss_type in LOSS_TYPES:
        options = {"loss_type": loss_type, "max_completion_length": 8, "num_items_in_batch": total_tokens}
        whole, _ = policy_loss(logp, old, adv, mask, **options)
        parts = 0.0
        for rows in (slice(0, 2), slice(2, 5)):
            part, _ = policy_loss(logp[rows], old[rows], adv[rows], mask[rows], **options)
            n_rows, n_tokens = mask[rows].shape[0], int(mask[rows].sum())
            parts += part * micro_batch_weight(loss_type, n_rows, n_tokens, 5, total_tokens)
        assert torch.allclose(parts, whole, **SAME), loss_type


def test_rank_share_splits_the_group_evenly() -> None:
    assert rank_share(4, 0, 2, "group") == [0, 2] and rank_share(4, 1, 2, "group") == [1, 3]
    assert rank_share(3, 0, 1, "group") == [0, 1, 2]
    with pytest.raises(ValueError, match=r"group \(3\) must be a multiple of the number of processes \(2\)"):
        rank_share(3, 0, 2, "group")


def test_the_curve_statistics_by_hand() -> None:
    # two values: mean 2, s = √2, t*(0.975, 1 df) = 12.7062, so the half-width is 12.7062 · √2 / √2
    assert interval([1.0, 3.0]) == pytest.approx([2.0, 2.0 - 12.7062, 2.0 + 12.7062], abs=1e-4)
    assert interval([0.5]) == [0.5, 0.5, 0.5]
    # differences 1, 0, −0.5: the zero carries no sign; of the 4 sign flips of (1, 0.5), all reach |0.5|
    assert paired_change([0.0, 0.0, 1.0], [1.0, 0.0, 0.5]) == {
        "gain": pytest.approx(1 / 6, abs=1e-6),
        "rose": 1,
        "fell": 1,
        "p": 1.0,
    }
    # five equal gains: only the two all-same-sign flips of 32 reach the observed sum
    assert paired_change([0.0] * 5, [0.5] * 5)["p"] == pytest.approx(2 / 32)
    assert move_shares(["paper", None, "paper", "rock"]) == {"paper": 0.5, "none": 0.25, "rock": 0.25}


def test_config_refuses_unknown_and_clashing_options() -> None:
    with pytest.raises(ValueError, match="groups"):
        MemoPilotTrainConfig(out="x", groups=3)
    with pytest.raises(ValueError, match="opponents"):
        MemoPilotTrainConfig(out="x", env_options={"opponent": "cycle3"})
    with pytest.raises(ValueError, match="games"):
        MemoPilotTrainConfig(out="x", games=1)
    with pytest.raises(ValueError, match="note_at"):
        MemoPilotTrainConfig(out="x", note_at="footnote")
    with pytest.raises(ValueError, match="writer_form"):
        MemoPilotTrainConfig(out="x", writer_form="essay")
    with pytest.raises(ValueError, match="length"):
        MemoPilotTrainConfig(out="x", env="sokoban")
    with pytest.raises(ValueError, match="hands"):  # hold'em's game length is its number of hands
        MemoPilotTrainConfig(out="x", env="holdem", env_options={"hands": 3})
    holdem = MemoPilotTrainConfig(out="x", env="holdem", opponents=["tight-passive"], rounds=3, writer_form="style")
    assert MemoPilotTrainer.make_env(holdem, "tight-passive", 5).config() == {
        "opponent": "tight-passive",
        "hands": 3,
        "seed": 5,
    }


def test_only_the_tokens_the_player_sees_are_trained() -> None:
    # Five tokens write "The opponent plays rock" (23 characters). Bound 15: "The opponent pl" is cut back to the word
    # boundary, so the player sees "The opponent": tokens 1-3 (3 reaches it), 4-5 were cut. Before: all 5 trained.
    prefixes = ["The", "The opp", "The opponent", "The opponent plays", "The opponent plays rock"]
    assert seen_token_count(prefixes, max_chars=15) == 3
    # Within the bound nothing is cut, and the last token (the end of turn, which adds no text) counts too.
    assert seen_token_count([*prefixes, "The opponent plays rock"], max_chars=40) == 6
    # Whitespace is collapsed before the bound, as the memory does: "a  b" reads "a b".
    assert seen_token_count(["a", "a  b", "a  b cc", "a  b cc dd"], max_chars=5) == 2


# ---- with the model ----------------------------------------------------------------------------------------------
def tiny(tmp_path, **overrides) -> MemoPilotTrainConfig:
    settings = {
        "opponents": ["cycle3", "biased"],
        "games": 2,
        "rounds": 2,
        "group": 2,
        "steps": 1,
        "lr": 5e-3,
        "max_completion_length": 8,
        "micro_batch": 2,
        "eval_every": 0,
        "out": tmp_path / "run",
    }
    return MemoPilotTrainConfig(**{**settings, **overrides})


def settings(trainer: MemoPilotTrainer) -> UpdateSettings:
    return UpdateSettings.of(trainer.config)


def lora_weights(trainer: MemoPilotTrainer) -> list[torch.Tensor]:
    return [p.detach().clone() for p in trainer.params]


@pytest.fixture(scope="module")
def trainer(tmp_path_factory) -> MemoPilotTrainer:
    return MemoPilotTrainer(tiny(tmp_path_factory.mktemp("mp"), micro_batch=1), player=NoteHashPlayer())


@pytest.mark.model
def test_loss_logprobs_come_from_the_sampling_weights_and_temperature(trainer: MemoPilotTrainer) -> None:
    (played,) = trainer.play_rollouts([(0, "cycle3", 11)], [0, 1], 1.0, sample_seed=5)
    writes, rewards = played.writes, played.rewards
    assert len(writes) == 2 and rewards.shape == (2, 1)
    samples = [w.sample for w in writes]
    prompts, completions = [s.prompt_ids for s in samples], [s.completion_ids for s in samples]
    with torch.no_grad():
        recomputed, mask = trainer.policy.sequence_logprobs(prompts, completions, 1.0)
        other_temperature, _ = trainer.policy.sequence_logprobs(prompts, completions, 0.5)
    sampled = torch.tensor([[*s.logprobs] + [0.0] * (mask.shape[1] - len(s.logprobs)) for s in samples])
    # that the two paths compute one function is test_hf's float64 check; here: the trainer scores with the weights
    # and temperature it sampled with. A float32 path difference is ~1e-4 on any CPU, a wrong temperature ~1e-1.
    same, wrong = (float((x[mask] - sampled[mask]).abs().max()) for x in (recomputed, other_temperature))
    assert same < wrong / 100, (same, wrong)
    advantages = np.array([1.0, -0.5])
    stats = policy_update(trainer.policy, trainer.optimizer, samples, advantages, settings(trainer), step=False)
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and stats["clip_fraction"] == 0.0
    assert np.isfinite(stats["grad_norm"]) and stats["grad_norm"] > 0
    grads = [p.grad for p in trainer.params if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    trainer.optimizer.zero_grad(set_to_none=True)


@pytest.mark.model
def test_one_step_changes_the_adapters_and_lowers_the_loss(trainer: MemoPilotTrainer) -> None:
    writes = trainer.play_rollouts([(0, "biased", 12)], [0, 1], 1.0, sample_seed=6)[0].writes
    advantages = np.array([1.0, -1.0])
    before = lora_weights(trainer)
    samples = [w.sample for w in writes]
    first = policy_update(trainer.policy, trainer.optimizer, samples, advantages, settings(trainer))
    after = policy_update(trainer.policy, trainer.optimizer, samples, advantages, settings(trainer), step=False)
    trainer.optimizer.zero_grad(set_to_none=True)
    assert any(not torch.equal(a, b) for a, b in zip(before, lora_weights(trainer)))
    assert after["loss"] < first["loss"] - 1e-4
    assert after["ratio_mean"] != pytest.approx(1.0, abs=1e-6)  # the old log-probs stay the sampled ones


@pytest.mark.model
def test_resume_gives_the_same_next_step(tmp_path) -> None:
    straight = MemoPilotTrainer(tiny(tmp_path / "a", steps=2), player=NoteHashPlayer()).train()
    assert straight[0]["grad_norm"] > 0  # the rewards differ, so the step is not trivially zero
    MemoPilotTrainer(tiny(tmp_path / "b", steps=1), player=NoteHashPlayer()).train()
    resumed_trainer = MemoPilotTrainer(tiny(tmp_path / "b", steps=2), player=NoteHashPlayer())
    assert resumed_trainer.step == 1
    resumed = resumed_trainer.train()
    assert [m["step"] for m in resumed] == [2]
    assert resumed[0]["loss"] == pytest.approx(straight[1]["loss"], abs=1e-6)
    assert resumed[0]["grad_norm"] == pytest.approx(straight[1]["grad_norm"], rel=1e-5)
    log = [json.loads(line) for line in (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in log] == [1, 2]
    for name in ("step_0001", "step_0002", "final"):
        assert (tmp_path / "b" / "run" / name / "ttlearn_adapter.json").is_file()
    with pytest.raises(ValueError, match="different settings"):
        MemoPilotTrainer(tiny(tmp_path / "b", steps=3, lr=1e-3), player=NoteHashPlayer())


@pytest.mark.model
def test_the_frozen_player_shows_the_memory_where_the_config_says(tmp_path) -> None:
    """`--note-at default`: the writer is trained for a player that takes the note's move as its suggested default
    (the one presentation the small players follow, docs/ceiling.md)."""
    trainer = MemoPilotTrainer(tiny(tmp_path, player="smollm2", note_at="default"))
    env = trainer.make_env(trainer.config, "constant", 0)
    obs = env.reset(seed=0)
    trainer.player.begin_episode(env)
    decision = trainer.player.act(env, obs, "The opponent always plays rock. Play paper.", seed=0)
    assert trainer.player.note_at == "default" and decision.action == "paper"


def test_rollout_games_in_flight_score_as_sequential_ones(trainer: MemoPilotTrainer) -> None:
    sequential = trainer.play_rollouts([(1, "cycle3", 13)], [0, 1], 1.0, sample_seed=7)[0].rewards
    original = trainer.config
    trainer.config = original.model_copy(update={"concurrency": 2})
    try:
        concurrent = trainer.play_rollouts([(1, "cycle3", 13)], [0, 1], 1.0, sample_seed=7)[0].rewards
    finally:
        trainer.config = original
    assert np.array_equal(sequential, concurrent)


@pytest.mark.model
def test_the_development_curve_is_logged_drawn_and_its_games_recorded_once_across_a_resume(tmp_path) -> None:
    """Every `eval_every` steps the greedy writer plays the fixed development sequences; step 1's line also holds
    the evaluation before any update, which later ones are paired with (read back from the log after a resume).

    episodes.jsonl: the training games as "episode" lines, the evaluations' as marked "evaluation" lines (which
    evaluation, with the writer's notes or no memory); the no-memory games are played and recorded once a run, and a
    resumed run reads their value back instead of playing them again. (One run checks both files: the same
    step-then-resume run wrote them.)"""
    settings = {"eval_every": 1, "eval_seeds": [3], "writer_form": "counter", "max_completion_length": 12}
    MemoPilotTrainer(tiny(tmp_path, steps=1, **settings), player=NoteHashPlayer()).train()
    resumed = MemoPilotTrainer(tiny(tmp_path, steps=2, **settings), player=NoteHashPlayer())
    second = resumed.train()[0]
    log = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    start, first = log[0]["eval_start"], log[0]["eval"]
    assert start["after_step"] == 0 and first["after_step"] == 1 and second["eval"]["after_step"] == 2
    assert len(start["rewards"]) == 2  # cycle3 and biased × seed 3
    assert set(start["notes"]) == {"cycle3", "biased"}
    assert all(note.startswith("The opponent plays mostly") for notes in start["notes"].values() for note in notes)
    changes = [a - b for a, b in zip(second["eval"]["rewards"], start["rewards"])]
    assert second["eval"]["vs_start"]["gain"] == pytest.approx(np.mean(changes), abs=1e-6)
    assert log[1]["note_reward"][1] <= log[1]["note_reward"][0] <= log[1]["note_reward"][2]
    assert sum(log[1]["suggested"].values()) == pytest.approx(1.0, abs=1e-3) and "kl_to_base" in log[1]
    svg = (tmp_path / "run" / "curve.svg").read_text()
    assert 'data-chart="training"' in svg and "training-greedy" in svg
    assert second["eval"]["none"] == start["none"]  # the no-memory baseline read back after the resume

    lines = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    training = [line for line in lines if line["type"] == "episode"]
    # per step: 1 sequence, game 1 once, then 2 rollouts × game 2
    assert [line["step"] for line in training] == [1, 1, 1, 2, 2, 2]
    evaluation = [line for line in lines if line["type"] == "evaluation"]
    assert len(training) + len(evaluation) == len(lines)
    writer = [(line["step"], line["after_step"]) for line in evaluation if line["memory"] == "writer"]
    # each evaluation: 2 sequences (cycle3, biased × seed 3), game 1 then the greedy writer's game 2
    assert writer == [(1, 0)] * 4 + [(1, 1)] * 4 + [(2, 2)] * 4
    baseline = [line for line in evaluation if line["memory"] == "none"]
    assert [(line["step"], line["after_step"]) for line in baseline] == [(1, 0), (1, 0)]  # not again after resume


@pytest.mark.model
def test_the_stopping_rule_ends_the_run_at_the_first_evaluation_without_a_new_best(tmp_path) -> None:
    """With a learning rate too small to change a greedy note, the evaluation after step 1 ties the one before it:
    no new best, so `patience` 1 ends a 4-step run there, checkpointed and with its final adapter; a rerun of the
    finished run trains nothing more."""
    settings = {"eval_every": 1, "eval_seeds": [3], "lr": 1e-12, "steps": 4, "save_every": 3}
    done = MemoPilotTrainer(tiny(tmp_path, patience=1, **settings), player=NoteHashPlayer()).train()
    assert [m["step"] for m in done] == [1]
    assert done[0]["eval"]["reward"][0] == done[0]["eval_start"]["reward"][0]
    run = tmp_path / "run"
    assert (run / "step_0001").is_dir() and (run / "final").is_dir()
    assert MemoPilotTrainer(tiny(tmp_path, patience=1, **settings), player=NoteHashPlayer()).train() == []


@pytest.mark.model
def test_a_favourite_note_is_completed_with_the_counter_before_the_player_reads_it(trainer) -> None:
    """`writer_form=favourite`: the writer names a move and the note the player reads adds the move that beats it."""
    original = trainer.config
    trainer.config = original.model_copy(update={"writer_form": "favourite", "max_completion_length": 4})
    try:
        notes = trainer.play_rollouts([(1, "biased", 13)], [0, 1, 2, 3], 1.0, sample_seed=7)[0].notes
    finally:
        trainer.config = original
    counters = {"rock": "paper", "paper": "scissors", "scissors": "rock"}
    written = [note for row in notes for note in row]
    named = [re.match(r"The opponent plays mostly (\w+)", note).group(1).lower() for note in written]
    assert len(written) == 4 and any(move in counters for move in named)  # seeded: 2 of these 4 name a move
    for note, move in zip(written, named):
        if move in counters:
            assert note == f"The opponent plays mostly {move}, so play {counters[move]}."


@pytest.mark.model
def test_a_choice_writer_names_a_reading_in_every_note_and_learns_which(tmp_path) -> None:
    """`writer_form=style-choice` on hold'em: each write is one of the readings (scored by the writer), completed
    with its advice; the write's log-probs are what the update recomputes, and an update that rewards the rarer
    reading raises its share among the readings (the restriction's normaliser adds nothing to the gradient)."""
    config = tiny(tmp_path, env="holdem", opponents=["tight-passive"], writer_form="style-choice", group=4)
    trainer = MemoPilotTrainer(config, player=NoteHashPlayer())
    (played,) = trainer.play_rollouts([(0, "tight-passive", 11)], [0, 1, 2, 3], 1.0, sample_seed=6)
    readings = trainer.make_env(config, "tight-passive", 11).readings
    notes = [note for row in played.notes for note in row]
    assert all(re.fullmatch(rf"The opponent plays ({'|'.join(readings)}), so .+\.", note) for note in notes)
    samples = [w.sample for w in played.writes]
    with torch.no_grad():
        recomputed, _ = trainer.policy.sequence_logprobs(
            [s.prompt_ids for s in samples], [s.completion_ids for s in samples], 1.0
        )
    for sample, row in zip(samples, recomputed):
        assert list(sample.logprobs) == pytest.approx(row[: len(sample.logprobs)].tolist(), abs=1e-5)

    texts = [s.text for s in samples]  # seeded: three tight-passive, one loose-passive
    assert sorted(texts) == [" loose-passive"] + [" tight-passive"] * 3
    choices = [f" {r}" for r in readings]

    def share() -> float:
        scores = trainer.policy.score_choices(list(samples[0].prompt_ids), choices)
        return float(torch.softmax(torch.tensor(list(scores.values())), 0)[choices.index(" loose-passive")])

    before = share()
    advantages = np.array([1.0 if t == " loose-passive" else -1 / 3 for t in texts])
    policy_update(trainer.policy, trainer.optimizer, samples, advantages, settings(trainer))
    assert share() > before
