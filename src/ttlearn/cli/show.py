"""`ttlearn show`: a run's summary, one game's (or task's) steps and prompts, or two trial runs compared."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ttlearn.cli.common import console, format_comparison, format_task, format_trial_summary, print_call, print_summary
from ttlearn.eval.summary import summarize
from ttlearn.eval.trials import compare_trials, summarize_trials
from ttlearn.runs import Run, is_trial_dir, load_trial_config, read_tasks


def show(
    run_dir: Path = typer.Argument(..., help="A run directory."),
    game: Optional[int] = typer.Option(None, help="Show this game's steps, prompts and replies (trial runs: a task)."),
    prompts: bool = typer.Option(False, help="With --game: print the full prompts too."),
    against: Optional[Path] = typer.Option(
        None, help="Trial runs: another run on the same tasks; prints paired success@k with McNemar p-values."
    ),
) -> None:
    """Print a run's summary, or one game's prompts and replies (in a trial run: one task's attempts). Reads a live
    run without changing it."""
    if is_trial_dir(run_dir):
        show_trials(run_dir, game, prompts, against)
        return
    if against is not None:
        raise ValueError("--against compares trial runs (ttlearn run ENV --tasks K)")
    run = Run.open(run_dir, repair=False)
    if game is None:
        print_summary(summarize(run), run.path)
        return
    if not 1 <= game <= len(run.episodes):
        raise ValueError(f"game must be between 1 and {len(run.episodes)}")
    for event in run.events(game):
        if event["type"] == "call":
            print_call(event, prompts)
        elif event["type"] == "step":
            flag = "" if event["valid"] else " [red](invalid)[/]"
            console.print(f"step {event['step']}: {event['action'] or '(no move)'} → {event['reward']:+g}{flag}")
        elif event["type"] == "game":
            console.print(f"[bold]game {game} score {event['episode']['score']:+g}[/]")


def show_trials(run_dir: Path, task: int | None, prompts: bool, against: Path | None) -> None:
    """A trial run (live or finished) read without repairing it: its success@k table (or a paired comparison with
    another run), or one task in full."""
    records = read_tasks(run_dir, repair=False)
    config = load_trial_config(run_dir)
    if against is not None:
        other = load_trial_config(against)
        if (other.env, other.env_options, other.seed) != (config.env, config.env_options, config.seed):
            raise ValueError(f"{against} plays other instances (env, env options or seed differ)")
        comparison = compare_trials(records, read_tasks(against, repair=False), min(config.attempts, other.attempts))
        console.print(format_comparison(comparison, str(run_dir), str(against)), highlight=False)
        return
    if task is None:
        console.print(format_trial_summary(summarize_trials(records, config)), highlight=False)
        console.print(f"{len(records)} of {config.total} tasks finished")
        return
    if not 1 <= task <= len(records):
        raise ValueError(f"--game must be a finished task, between 1 and {len(records)}")
    record = records[task - 1]
    console.print(format_task(record), markup=False, highlight=False)
    for call in record["calls"] if prompts else []:
        print_call(call, prompts=True)
