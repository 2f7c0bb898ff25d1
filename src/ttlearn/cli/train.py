"""`ttlearn train …`: the RL trainers (memory writers, agent policies); needs the `train` extra."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer

from ttlearn.cli.common import console, friendly, parse_options, progress_bar

train_app = typer.Typer(
    help="Train memory writers and agent policies by RL (needs the `train` extra).", no_args_is_help=True
)

SHOWN_METRICS = (
    "loss",
    "reward_mean",
    "reward_per_trial",
    "success_rate",
    "success_any",
    "kl",
    "clip_fraction",
    "grad_norm",
    "eval_reward",
)


@contextlib.contextmanager
def training_progress(steps: int) -> Iterator[Callable[[int, dict[str, Any]], None]]:
    """The progress bar of a training run, showing the headline metrics of the last step."""
    with progress_bar("training", steps) as update:

        def advance(step: int, metrics: dict[str, Any]) -> None:
            shown = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and k in SHOWN_METRICS}
            update(completed=step, last=" ".join(f"{k} {v:.3g}" for k, v in shown.items()))

        yield advance


@train_app.command("lamer")
@friendly
def train_lamer_command(
    env: str = typer.Option("sokoban", help="sokoban or minesweeper."),
    env_opt: list[str] = typer.Option([], "--env-opt", "-e", help="An environment option, KEY=VALUE."),
    algo: str = typer.Option("lamer", help="lamer (trials with reflection), or the baselines gigpo / grpo."),
    mode: str = typer.Option("reflection", help="What later attempts see: reflection, history or both."),
    policy: str = typer.Option("smollm2", help="HF source of the policy, or an adapter folder to continue."),
    tasks: int = typer.Option(16, min=1, help="Training instance pool."),
    tasks_per_step: int = typer.Option(2, min=1, help="Instances per step."),
    group: int = typer.Option(4, min=2, help="Trials per instance (the advantage group)."),
    attempts: int = typer.Option(3, min=1, help="Attempts per trial."),
    steps: int = typer.Option(20, min=1, help="Optimiser steps."),
    lr: float = typer.Option(1e-5, help="Learning rate (LoRA)."),
    seed: int = typer.Option(0, help="Seed."),
    out: Path = typer.Option(..., help="Output folder: checkpoints step_NNNN/, final/, metrics.jsonl (resumable)."),
) -> None:
    """LaMer: cross-episode meta-RL of the agent policy over multi-attempt trials (LoRA on the embedded model)."""
    from ttlearn.train.lamer import LamerTrainConfig, LamerTrainer

    config = LamerTrainConfig(
        env=env,
        env_options=parse_options(env_opt, "--env-opt"),
        out=out,
        algo=algo,
        mode=mode,
        policy=policy,
        tasks=tasks,
        tasks_per_step=tasks_per_step,
        group=group,
        attempts=attempts,
        steps=steps,
        lr=lr,
        seed=seed,
    )
    with training_progress(steps) as advance:
        LamerTrainer(config, progress=advance).train()
    console.print(
        f"final policy: [bold]{out / 'final'}[/] (use: ttlearn run {env} --memory lamer --policy {out / 'final'})"
    )


@train_app.command("memopilot")
@friendly
def train_memopilot_command(
    env: str = typer.Option("rps", help="Environment of the training games."),
    opponents: str = typer.Option("cycle3,beat-last,biased", help="Comma-separated training opponents."),
    games: int = typer.Option(4, min=2, help="T: games per rollout (writes after games 1..T-1 are trained)."),
    rounds: int = typer.Option(10, min=1, help="Rounds per game."),
    group: int = typer.Option(4, min=2, help="G: rollouts per sequence (the turn-level advantage group)."),
    steps: int = typer.Option(30, min=1, help="Optimiser steps."),
    lr: float = typer.Option(1e-4, help="Learning rate (LoRA)."),
    loss_type: str = typer.Option("dapo", help="grpo, bnpo, dr_grpo or dapo (TRL's definitions)."),
    beta: float = typer.Option(0.0, min=0.0, help="KL weight against the frozen base writer."),
    player: str = typer.Option("smollm2", help="The frozen player (any LLM spec, e.g. openai:URL#MODEL)."),
    writer_base: str = typer.Option("smollm2", help="HF source of the writer G_θ."),
    eval_every: int = typer.Option(10, min=0, help="Held-out evaluation every N steps (0: never)."),
    seed: int = typer.Option(0, help="Seed."),
    out: Path = typer.Option(..., help="Output folder: step_NNNN/, final/, metrics.jsonl (resumable)."),
) -> None:
    """MemoPilot: train the memory writer by multi-turn GRPO with turn-level, context-independent advantages."""
    from ttlearn.train.memopilot import MemoPilotTrainConfig, MemoPilotTrainer

    config = MemoPilotTrainConfig(
        env=env,
        opponents=[o for o in opponents.split(",") if o],
        games=games,
        rounds=rounds,
        group=group,
        steps=steps,
        lr=lr,
        loss_type=loss_type,
        beta=beta,
        player=player,
        writer_base=writer_base,
        eval_every=eval_every,
        seed=seed,
        out=out,
    )
    with training_progress(steps) as advance:
        MemoPilotTrainer(config, progress=advance).train()
    console.print(
        f"final writer: [bold]{out / 'final'}[/] (use: ttlearn run rps --memory memopilot --writer {out / 'final'})"
    )


