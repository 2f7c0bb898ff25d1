"""`ttlearn arena` plays a paired plan of runs; `ttlearn report` rebuilds its report from the records alone."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import typer

from ttlearn.cli.common import console, csv, friendly, parse_options, progress_bar, reads_runs, styled
from ttlearn.llm.base import DEFAULT_LLM
from ttlearn.runs import default_arena_dir


def _seeds(text: Optional[str]) -> int | list[int] | None:
    """'5' → 5 seeds (0..4); '3,7,9' → exactly those."""
    if text is None:
        return None
    try:
        return int(text) if "," not in text else [int(s) for s in csv(text) or []]
    except ValueError:
        raise ValueError(f"--seeds takes a count or a comma-separated list of integers, got {text!r}") from None


def arena(
    config_file: Optional[Path] = typer.Argument(None, help="A YAML arena config; the options below override it."),
    env: Optional[str] = typer.Option(None, help="Environment: rps, holdem, sokoban, minesweeper, …"),
    memories: Optional[str] = typer.Option(None, help="Comma-separated memory methods, e.g. none,history,reflexion."),
    opponents: Optional[str] = typer.Option(None, help="Comma-separated opponents, e.g. cycle3,beat-last,probe."),
    seeds: Optional[str] = typer.Option(None, help="Sequences per opponent: a count (5 → seeds 0..4) or a list."),
    games: Optional[int] = typer.Option(
        None, min=1, help="Each sequence a session of N games (as `ttlearn run --games N`)."
    ),
    attempts: Optional[int] = typer.Option(
        None, min=1, help="Attempts per unit (default 1 where the memory carries, else LaMer's 3)."
    ),
    carry_memory: Optional[bool] = typer.Option(
        None,
        "--carry-memory/--no-carry-memory",
        help="The memory carries from unit to unit (as `ttlearn run`); no: every unit starts afresh.",
    ),
    rounds: Optional[int] = typer.Option(None, help="RPS: rounds per game."),
    hands: Optional[int] = typer.Option(None, help="Hold'em: hands per game."),
    env_opt: list[str] = typer.Option([], "--env-opt", "-e", help="Any other environment option, KEY=VALUE."),
    llm: Optional[str] = typer.Option(
        None, help=f"Player of every method (default: the environment's; {DEFAULT_LLM} where it names none)."
    ),
    writer: Optional[str] = typer.Option(None, help="LLM that writes the memories (default: the player's LLM)."),
    temperature: Optional[float] = typer.Option(None, min=0.0, help="Player sampling temperature (default 0)."),
    note_at: Optional[str] = typer.Option(
        None, "--note-at", help="LLM player: where the memory is shown (as `ttlearn run --note-at`; default system)."
    ),
    out: Optional[Path] = typer.Option(None, help="Arena folder (default runs/arena-ENV, or runs/arena-CONFIG)."),
    workers: Optional[int] = typer.Option(
        None, min=1, help="Parallel worker processes (default min(2, CPUs)); with --ray on a local Ray, tasks at once."
    ),
    concurrency: int = typer.Option(
        1, min=1, help="Runs in flight in this process sharing one back end (e.g. a server's parallel slots)."
    ),
    ray: bool = typer.Option(False, "--ray", help="Run the plan as Ray tasks (local Ray, or $RAY_ADDRESS)."),
    ray_address: Optional[str] = typer.Option(None, help="With --ray: the Ray cluster to use, e.g. ray://HOST:10001."),
) -> None:
    """Compare memory methods: every method plays the same (opponent, seed) sequences; rate them by Elo. The config
    file holds any `ttlearn run` option beside `memories`, `opponents` and `seeds`.

    Run the same command again to resume an interrupted arena: finished sequences are not replayed.
    """
    from ttlearn.eval import report as report_mod
    from ttlearn.rollout import arena as arena_mod

    env_options = parse_options(env_opt, "--env-opt")
    env_options.update({k: v for k, v in {"rounds": rounds, "hands": hands}.items() if v is not None})
    config = arena_mod.load_arena_config(
        config_file,
        env=env,
        memories=csv(memories),
        opponents=csv(opponents),
        seeds=_seeds(seeds),
        games=games,
        attempts=attempts,
        carry_memory=carry_memory,
        player=llm,
        writer=writer,
        temperature=temperature,
        note_at=note_at,
        env_options=env_options,
    )
    out = out or default_arena_dir(config_file.stem if config_file else config.run.env)
    todo, finished = arena_mod.prepare(config, out)
    if finished:
        console.print(
            f"{len(finished)} of {len(todo) + len(finished)} runs already finished in {out}; playing the rest"
        )
    start = time.perf_counter()
    try:
        with progress_bar(f"arena {config.run.env}", len(todo) + len(finished), len(finished)) as update:
            plan = arena_mod.execute(todo, workers=workers, ray=ray, ray_address=ray_address, concurrency=concurrency)
            for item, outcome in plan:
                update(advance=1, last=f"{item.name}: mean {outcome['mean_score']:+.2f}")
    except KeyboardInterrupt:
        again = f"interrupted; finished runs are kept. Resume with the same command (--out {out})."
        console.print(styled(again, "yellow"))
        raise typer.Exit(130) from None
    except arena_mod.RunFailed as exc:
        rest = f" {exc}\nfinished runs are kept; fix the cause and rerun to resume."
        console.print(styled("error:", "bold red", rest))
        raise typer.Exit(1) from None
    console.print(f"played {len(todo)} runs in {time.perf_counter() - start:.1f}s")
    _print_report(report_mod.write_report(out), out)


def _print_report(report: dict[str, Any], out: Path) -> None:
    from ttlearn.eval.report import elo_table, paired_table
    from ttlearn.runs import REPORT_HTML

    console.print(elo_table(report))
    if report["paired"]:
        console.print(paired_table(report))
    console.print(styled("report: ", "", str(out / REPORT_HTML), "bold", " (and report.json)"))


def report(out_dir: Path = typer.Argument(..., help="An arena folder (holding runs/).")) -> None:
    """Rebuild an arena's report.html and report.json from its run records alone (offline, deterministic)."""
    from ttlearn.eval.report import write_report

    _print_report(write_report(out_dir), out_dir)


def register(app: typer.Typer) -> None:
    app.command()(friendly(reads_runs(arena)))
    app.command()(friendly(reads_runs(report)))
