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
from ttlearn.eval.summary import RunSummary, summarize, summarize_units
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
    epoch: Optional[int] = typer.Option(
        None, min=1, help="Only this epoch's units: their summary (success by skill in an early epoch), or paired."
    ),
    not_in: Optional[Path] = typer.Option(
        None,
        help="Only the units whose instance this other run (same env, options and seed) did not play: a result on "
        "the instances an earlier run had not yet spent.",
    ),
) -> None:
    """Print a run's summary, or one unit's attempts with their prompts and replies. Reads a live run without changing
    it."""
    run = Run.open(run_dir)
    records = units_kept(run, epoch, not_in)
    if against is not None:
        show_against(run, records, Run.open(against))
    elif unit is not None:
        if epoch is not None or not_in is not None:
            raise ValueError("--unit shows one unit; --epoch and --not-in choose units to summarise")
        if not 1 <= unit <= run.done:
            raise ValueError(f"--unit must be a finished unit, between 1 and {run.done}")
        console.print(format_unit(run.records[unit - 1]), markup=False, highlight=False)
        for call in run.calls(unit):
            print_call(call, prompts)
    elif epoch is None and not_in is None:
        print_summary(summarize(run))
    else:
        head = RunSummary(str(run.path), run.config, run.done, run.total)
        print_summary(summarize_units(records, run.config, head))
        console.print(
            f"(the summary of {len(records)} of the run's {run.done} finished units: {chosen(epoch, not_in)})"
        )


def same_instances(run: Run, other: Run) -> None:
    """Refuse a run whose instance seeds name other instances (another env, env options or run seed)."""
    a, b = run.config, other.config
    if (a.env, a.env_options, a.seed) != (b.env, b.env_options, b.seed):
        raise ValueError(f"{other.path} plays other instances (env, env options or seed differ)")


def units_kept(run: Run, epoch: int | None, not_in: Path | None) -> list[dict]:
    """The run's finished unit records in `epoch` (None: every epoch) whose instance `not_in` never played; the
    run's own list when nothing is left out."""
    if epoch is None and not_in is None:
        return run.records
    played = set()
    if not_in is not None:
        other = Run.open(not_in)
        same_instances(run, other)
        played = {(r.get("type", "task"), r["seed"]) for r in other.records}
    kept = [
        r
        for r in run.records
        if (epoch is None or r["epoch"] == epoch) and (r.get("type", "task"), r["seed"]) not in played
    ]
    if not kept:
        raise ValueError(f"no finished unit of {run.path} is left: {chosen(epoch, not_in)}")
    return kept


def chosen(epoch: int | None, not_in: Path | None) -> str:
    """The units --epoch and --not-in keep, in words."""
    parts = [f"epoch {epoch}"] if epoch is not None else []
    if not_in is not None:
        parts.append(f"instances {not_in} did not play")
    return " and ".join(parts)


def show_against(run: Run, records: list[dict], other: Run) -> None:
    """Paired success@k of two runs on the instances both played, of `records` (the run's units `show` kept)."""
    same_instances(run, other)
    a, b = run.config, other.config
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
