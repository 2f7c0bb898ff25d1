"""`ttlearn show`: any run's summary, one of its units (its attempts, prompts and replies), or two runs compared."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ttlearn.cli.common import (
    console,
    format_comparison,
    format_unit,
    parse_options,
    print_call,
    print_summary,
    stops_at_once,
)
from ttlearn.eval.paired import compare_trials
from ttlearn.eval.summary import summarize
from ttlearn.runs import Run


def show(
    run_dir: Path = typer.Argument(..., help="A run directory."),
    unit: Optional[int] = typer.Option(
        None, "--unit", "--game", help="Show this unit's attempts, steps, prompts and replies (a game is a unit)."
    ),
    prompts: bool = typer.Option(False, help="With --unit: print the full prompts too."),
    against: Optional[Path] = typer.Option(
        None, help="Another run on the same instances; prints paired success@k with McNemar p-values."
    ),
    epoch: Optional[int] = typer.Option(None, min=1, help="With --against: pair this epoch's tasks only."),
) -> None:
    """Print a run's summary, or one unit's attempts with their prompts and replies. Reads a live run without changing
    it."""
    run = Run.open(run_dir)
    if against is not None:
        show_against(run, Run.open(against), epoch)
    elif epoch is not None:
        raise ValueError("--epoch goes with --against (the summary already reports every epoch)")
    elif unit is None:
        print_summary(summarize(run))
    else:
        if not 1 <= unit <= run.done:
            raise ValueError(f"--unit must be a finished unit, between 1 and {run.done}")
        console.print(format_unit(run.records[unit - 1]), markup=False, highlight=False)
        for call in run.calls(unit):
            print_call(call, prompts)


def show_against(run: Run, other: Run, epoch: int | None = None) -> None:
    """Paired success@k of two runs on the instances both played (in `epoch` only, when given)."""
    a, b = run.config, other.config
    if (a.env, a.env_options, a.seed) != (b.env, b.env_options, b.seed):
        raise ValueError(f"{other.path} plays other instances (env, env options or seed differ)")
    records = [r for r in run.records if epoch is None or r["epoch"] == epoch]
    comparison = compare_trials(records, other.records, min(a.attempts, b.attempts))
    console.print(format_comparison(comparison, str(run.path), str(other.path)), highlight=False)


def rejudge(
    run_dir: Path = typer.Argument(..., help="A finished run whose attempts are one answer each (e.g. sql)."),
    env_option: list[str] = typer.Option(
        ..., "--env-option", "-e", help="The environment option to judge by, KEY=VALUE (e.g. metric=exec); repeatable."
    ),
) -> None:
    """Judge a recorded run's answers again under other environment options (a new metric), from its records
    alone: no model runs. The verdicts go beside the recorded ones and the summary is rewritten; `show` then reports
    them and says so, and `replay` still reproduces what was played."""
    from ttlearn.rollout.rejudge import rejudge_run

    with Run.open(run_dir, write=True) as run:
        if not run.finished:
            raise ValueError(f"{run_dir} is not finished ({run.done} of {run.total}); resume it first")
        with stops_at_once():  # SIGINT / SIGTERM: the sandboxed query in progress ends with it, at once
            records = rejudge_run(run, parse_options(env_option, "-e"))
        changed = sum(
            r["rejudged"].get(key) != r.get(key)
            for r in records
            for key in ("first_success", "control_first_success")
            if key in r
        )
        summary = summarize(Run.open(run_dir))
        run.write_summary(summary.to_json())
    print_summary(summary)
    console.print(f"{changed} verdict(s) changed of {len(records)} unit record(s); summary rewritten", highlight=False)
