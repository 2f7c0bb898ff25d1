"""Seconds of a MemoPilot training step by phase, against the raw cost of the same work; peak memory of the run.

    python benchmarks/memopilot_step.py [--writer smollm2 --player gemma270m --group 8 --sequences 4 --steps 2]
    python benchmarks/memopilot_step.py --device cuda --player "hf:/models/p?device=cuda" --writer /models/w

Runs `--steps` real training steps (the development recipe of docs/memopilot.md unless told otherwise) on `--device`
(auto: a visible GPU, else the CPU; the trainers' `--device` / `--dtype`) against any player spec, and reports, per
step and per sampled note, the seconds of its three phases as the trainer measured them:
  write:  the writer's notes (`HFPolicy.sample`: the step's S·G rows of a turn in one call, shared prompts and
          prompt heads evaluated once, ended rows leaving the batch);
  play:   the frozen player's games (greedy decisions reused from the embedded runtime's reply cache, where the
          player's back end has one);
  update: the GRPO update (rescoring with gradients, loss, backward, clip, AdamW).
Then the raw cost of the same work, measured in the same run on the last step's notes and games:
  write:  transformers' `generate` on the same prompts, batched and left-padded, sampling as many new tokens as
          the longest note (`min_new_tokens`), no prompt shared;
  play:   every decision of the step's games asked again with the reply cache off (each one evaluated; a back end
          without a reply cache plays them again as it did);
  update: a plain forward + backward of each note as its own left-padded row (prompt + completion), by micro-batch.
Ratios < 1 mean the trainer does the work in less time than doing it plainly. Peak RSS is the process's maximum
resident set (`getrusage`), which covers the training steps and the baselines; on a GPU, peak GPU memory is torch's
most allocated over the training steps. `measure` returns the same figures for benchmarks/gpu_check.py.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import tempfile
import time
from collections.abc import Iterator
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

from ttlearn.llm.hf import HFPolicy, Sample, pad_rows, positions_from_mask
from ttlearn.train.memopilot import MemoPilotTrainConfig, MemoPilotTrainer

DEVELOPMENT = (
    "biased,biased-paper,biased-scissors,cycle-rrps,cycle-ppsr,cycle-ssrp,"
    "switch-rock-paper,switch-paper-scissors,switch-scissors-rock"
)


def finished(device: torch.device) -> float:
    """perf_counter once the device has done the work queued on it (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def raw_generate(trainer: MemoPilotTrainer, notes: list[Sample]) -> float:
    """Seconds of `generate` on the notes' prompts (one row each), sampling the longest note's length."""
    policy = trainer.policy
    ids, mask = pad_rows([n.prompt_ids for n in notes], policy.pad_id, left=True, device=policy.device)
    new = max(len(n.completion_ids) for n in notes)
    start = finished(policy.device)
    with torch.no_grad():
        policy.model.generate(
            input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=new, min_new_tokens=new, top_k=0
        )
    return finished(policy.device) - start


def raw_forward_backward(trainer: MemoPilotTrainer, notes: list[Sample]) -> float:
    """Seconds of a plain forward + backward of each note as its own row, `micro_batch` rows at a time."""
    policy, size = trainer.policy, trainer.config.micro_batch
    start = finished(policy.device)
    for i in range(0, len(notes), size):
        rows = [list(n.prompt_ids) + list(n.completion_ids) for n in notes[i : i + size]]
        keep = max(len(n.completion_ids) for n in notes[i : i + size]) + 1
        ids, mask = pad_rows(rows, policy.pad_id, left=True, device=policy.device)
        logits = policy.model(
            input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask), logits_to_keep=keep
        ).logits
        torch.log_softmax(logits.float(), -1).mean().backward()
    seconds = finished(policy.device) - start
    policy.model.zero_grad(set_to_none=True)
    return seconds


def raw_play(trainer: MemoPilotTrainer, jobs: list[tuple]) -> tuple[float, int]:
    """(seconds, decisions) of the same games played again with every decision evaluated: the reply cache off where
    the player's back end has one (`greedy_replies`, the embedded runtime), as played otherwise."""
    llm = trainer.player.llm  # type: ignore[attr-defined]
    kept = getattr(llm, "greedy_replies", None)
    if kept is not None:
        llm.greedy_replies = None
    start = time.perf_counter()
    try:
        games = trainer.play(jobs)
    finally:
        if kept is not None:
            llm.greedy_replies = kept
    return time.perf_counter() - start, sum(len(g.steps) for g in games)


@contextlib.contextmanager
def recording_last_step(trainer: MemoPilotTrainer) -> Iterator[dict[str, list]]:
    """The play jobs and the notes of the step in progress, kept by wrapping the trainer's two calls while inside."""
    import ttlearn.train.memopilot as trainer_module

    last: dict[str, Any] = {"jobs": [], "notes": []}
    play, update = trainer.play, trainer_module.policy_update

    def recording_play(jobs, *args, **kwargs):
        if trainer.step + 1 != last.get("step"):
            last.update(step=trainer.step + 1, jobs=[])
        last["jobs"] += list(jobs)
        return play(jobs, *args, **kwargs)

    def recording_update(policy, optimizer, notes, *args, **kwargs):
        last["notes"] = list(notes)
        return update(policy, optimizer, notes, *args, **kwargs)

    trainer.play = recording_play  # type: ignore[method-assign]
    trainer_module.policy_update = recording_update
    try:
        yield last
    finally:
        trainer.play, trainer_module.policy_update = play, update  # type: ignore[method-assign]


def measure(config: MemoPilotTrainConfig, *, policy: HFPolicy | None = None) -> dict[str, Any]:
    """The figures of `config.steps` training steps and of the raw work of the last one: the metrics of every step,
    the last step's seconds against the raw ones, seconds per note, peak RSS and (on a GPU) peak GPU memory. `policy`:
    a writer already built (a LoRA policy on the config's device), else `config.writer_base` is loaded."""
    trainer = MemoPilotTrainer(config, policy=policy)
    device = trainer.policy.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with recording_last_step(trainer) as last:
        steps = trainer.train()
    peak_gpu = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    m, notes, jobs = steps[-1], last["notes"], last["jobs"]
    play_raw, decisions = raw_play(trainer, jobs)
    raw = {"write": raw_generate(trainer, notes), "play": play_raw, "update": raw_forward_backward(trainer, notes)}
    ours = {phase: m[f"{phase}_s"] for phase in raw}
    count = m["notes"]
    return {
        "device": str(device),
        "dtype": str(next(trainer.policy.model.parameters()).dtype).removeprefix("torch."),
        "steps": [{k: row[k] for k in ("step", "notes", "write_s", "play_s", "update_s", "wall_s")} for row in steps],
        "last_step": {"notes": len(notes), "games": len(jobs), "decisions": decisions},
        "seconds": ours,
        "raw_seconds": raw,
        "ratio": {phase: ours[phase] / raw[phase] for phase in raw},
        "seconds_per_note": {"wall": m["wall_s"] / count, **{phase: ours[phase] / count for phase in raw}},
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_gpu_mib": peak_gpu,
    }


def report(figures: dict[str, Any]) -> None:
    print("step  notes  write_s  play_s  update_s  wall_s  s/note")
    for m in figures["steps"]:
        cells = [m["write_s"], m["play_s"], m["update_s"], m["wall_s"], m["wall_s"] / m["notes"]]
        print(f"{m['step']:>4} {m['notes']:>6} " + " ".join(f"{c:8.2f}" for c in cells))
    last = figures["last_step"]
    print(f"last step: {last['notes']} notes, {last['games']} games, {last['decisions']} decisions; trainer vs raw")
    for phase, raw in figures["raw_seconds"].items():
        ours = figures["seconds"][phase]
        print(f"  {phase:<6} {ours:7.1f} s vs {raw:7.1f} s   ratio {figures['ratio'][phase]:.2f}")
    per = figures["seconds_per_note"]
    print(
        f"seconds per sampled note: {per['wall']:.2f} (write {per['write']:.2f}, play {per['play']:.2f}, "
        f"update {per['update']:.2f})"
    )
    print(f"peak RSS: {figures['peak_rss_mib']:.0f} MiB")
    if figures["peak_gpu_mib"] is not None:
        print(f"peak GPU memory ({figures['device']}, {figures['dtype']}): {figures['peak_gpu_mib']:.0f} MiB")


def development_config(**options: Any) -> MemoPilotTrainConfig:
    """The step of the development recipe (docs/memopilot.md): `options` override its sizes, player and writer."""
    steps = options.get("steps", 2)
    return MemoPilotTrainConfig(
        **{
            "note_at": "default",
            "opponents": DEVELOPMENT.split(","),
            "games": 3,
            "rounds": 6,
            "group": 8,
            "sequences_per_step": 4,
            "writer_form": "counter",
            "max_completion_length": 24,
            "memory_chars": 120,
            "memory_words": 15,
            "eval_every": 0,
            "save_every": steps,
            "out": tempfile.mkdtemp(prefix="memopilot-step-"),
            **options,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--player", default="gemma270m", help="any LLM spec, e.g. hf:DIR?device=cuda")
    parser.add_argument("--writer", default="smollm2", help="the writer G_θ's HF source (`writer_base`)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="the writer's device")
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"), help="the writer's dtype")
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
    config = development_config(
        player=args.player,
        writer_base=args.writer,
        opponents=args.opponents.split(","),
        games=args.games,
        rounds=args.rounds,
        group=args.group,
        sequences_per_step=args.sequences,
        steps=args.steps,
        max_completion_length=args.max_completion_length,
        device=args.device,
        dtype=args.dtype,
    )
    print(
        f"{args.steps} steps × {args.sequences} sequences × G {args.group} × {args.games - 1} notes, "
        f"writer {args.writer}, player {args.player}"
    )
    report(measure(config))


if __name__ == "__main__":
    main()
