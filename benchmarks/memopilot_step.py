"""Seconds of a MemoPilot training step by phase, against the raw cost of the same work; peak RSS of the run.

    python benchmarks/memopilot_step.py [--writer smollm2 --player gemma270m --group 8 --sequences 4 --steps 2]

Runs `--steps` real training steps (the development recipe of docs/memopilot.md unless told otherwise) and reports,
per step and per sampled note, the seconds of its three phases as the trainer measured them:
  write:  the writer's notes (`HFPolicy.sample`: the step's S·G rows of a turn in one call, shared prompts and
          prompt heads evaluated once, ended rows leaving the batch);
  play:   the frozen player's games (greedy decisions reused from the embedded runtime's reply cache);
  update: the GRPO update (rescoring with gradients, loss, backward, clip, AdamW).
Then the raw cost of the same work, measured in the same run on the last step's writes and games:
  write:  transformers' `generate` on the same prompts, batched and left-padded, sampling as many new tokens as
          the longest note (`min_new_tokens`), no prompt shared;
  play:   every decision of the step's games asked again with the reply cache off (each one evaluated);
  update: a plain forward + backward of each write as its own left-padded row (prompt + completion), by micro-batch.
Ratios < 1 mean the trainer does the work in less time than doing it plainly. Peak RSS is the process's maximum
resident set (`getrusage`), which covers the training steps and the baselines.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from ttlearn.llm.hf import positions_from_mask
from ttlearn.train.memopilot import MemoPilotTrainConfig, MemoPilotTrainer, Write

DEVELOPMENT = (
    "biased,biased-paper,biased-scissors,cycle-rrps,cycle-ppsr,cycle-ssrp,"
    "switch-rock-paper,switch-paper-scissors,switch-scissors-rock"
)


def raw_generate(trainer: MemoPilotTrainer, writes: list[Write]) -> float:
    """Seconds of `generate` on the writes' prompts (one row each), sampling the longest note's length."""
    policy = trainer.policy
    rows = [list(w.sample.prompt_ids) for w in writes]
    width = max(map(len, rows))
    ids = torch.tensor([[policy.pad_id] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    new = max(len(w.sample.completion_ids) for w in writes)
    start = time.perf_counter()
    with torch.no_grad():
        policy.model.generate(
            input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=new, min_new_tokens=new, top_k=0
        )
    return time.perf_counter() - start


def raw_forward_backward(trainer: MemoPilotTrainer, writes: list[Write]) -> float:
    """Seconds of a plain forward + backward of each write as its own row, `micro_batch` rows at a time."""
    policy, size = trainer.policy, trainer.config.micro_batch
    start = time.perf_counter()
    for i in range(0, len(writes), size):
        rows = [list(w.sample.prompt_ids) + list(w.sample.completion_ids) for w in writes[i : i + size]]
        keep = max(len(w.sample.completion_ids) for w in writes[i : i + size]) + 1
        width = max(map(len, rows))
        ids = torch.tensor([[policy.pad_id] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        logits = policy.model(
            input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask), logits_to_keep=keep
        ).logits
        torch.log_softmax(logits.float(), -1).mean().backward()
    policy.model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def raw_play(trainer: MemoPilotTrainer, jobs: list[tuple]) -> tuple[float, int]:
    """(seconds, decisions) of the same games played again with every decision evaluated (the reply cache off)."""
    llm = trainer.player.llm  # type: ignore[attr-defined]
    kept, llm.greedy_replies = llm.greedy_replies, None
    start = time.perf_counter()
    try:
        games = trainer.play(jobs)
    finally:
        llm.greedy_replies = kept
    return time.perf_counter() - start, sum(len(g.steps) for g in games)


def record_last_step(trainer: MemoPilotTrainer) -> dict[str, list]:
    """The play jobs and the writes of the step in progress, kept by wrapping the trainer's two calls."""
    import ttlearn.train.memopilot as trainer_module

    last: dict[str, list] = {"jobs": [], "writes": []}
    play, update = trainer.play, trainer_module.policy_update

    def recording_play(jobs):
        if trainer.step + 1 != last.get("step"):
            last.update(step=trainer.step + 1, jobs=[])
        last["jobs"] += list(jobs)
        return play(jobs)

    def recording_update(policy, optimizer, writes, *args, **kwargs):
        last["writes"] = list(writes)
        return update(policy, optimizer, writes, *args, **kwargs)

    trainer.play = recording_play  # type: ignore[method-assign]
    trainer_module.policy_update = recording_update
    return last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--player", default="gemma270m")
    parser.add_argument("--writer", default="smollm2", help="the writer G_θ's HF source (`writer_base`)")
    parser.add_argument("--opponents", default=DEVELOPMENT)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--sequences", type=int, default=4)
    parser.add_argument("--games", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-completion-length", type=int, default=24)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = MemoPilotTrainConfig(
        player=args.player,
        writer_base=args.writer,
        note_at="default",
        opponents=args.opponents.split(","),
        games=args.games,
        rounds=args.rounds,
        group=args.group,
        sequences_per_step=args.sequences,
        steps=args.steps,
        writer_form="counter",
        max_completion_length=args.max_completion_length,
        memory_chars=120,
        memory_words=15,
        eval_every=0,
        save_every=args.steps,
        device="cpu",
        out=tempfile.mkdtemp(prefix="memopilot-step-"),
    )
    trainer = MemoPilotTrainer(config)
    last = record_last_step(trainer)
    print(
        f"{args.steps} steps × {args.sequences} sequences × G {args.group} × {args.games - 1} notes, "
        f"writer {args.writer}, player {args.player}"
    )
    print("step  notes  write_s  play_s  update_s  wall_s  s/note")
    for m in trainer.train():
        cells = [m["write_s"], m["play_s"], m["update_s"], m["wall_s"], m["wall_s"] / m["notes"]]
        print(f"{m['step']:>4} {m['notes']:>6} " + " ".join(f"{c:8.2f}" for c in cells))
    writes, jobs = last["writes"], last["jobs"]
    write_raw = raw_generate(trainer, writes)
    play_raw, decisions = raw_play(trainer, jobs)
    update_raw = raw_forward_backward(trainer, writes)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"last step: {len(writes)} notes, {len(jobs)} games, {decisions} decisions; trainer vs raw")
    for phase, ours, raw in (
        ("write", m["write_s"], write_raw),
        ("play", m["play_s"], play_raw),
        ("update", m["update_s"], update_raw),
    ):
        print(f"  {phase:<6} {ours:7.1f} s vs {raw:7.1f} s   ratio {ours / raw:.2f}")
    notes = m["notes"]
    print(
        f"seconds per sampled note: {m['wall_s'] / notes:.2f} (write {m['write_s'] / notes:.2f}, "
        f"play {m['play_s'] / notes:.2f}, update {m['update_s'] / notes:.2f})"
    )
    print(f"peak RSS: {peak:.0f} MiB")


if __name__ == "__main__":
    main()
