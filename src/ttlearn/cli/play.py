"""`ttlearn run`, `resume` and `replay`: play into a run directory, finish an interrupted one, or re-play a recording.

`run` plays units: task instances, each tried up to `--attempts` times with the memory's reflections in between
(LaMer; MemRL's protocol with `--epochs`). `--games N` is the session of games: N units of one attempt, the memory
carried from each game to the next. The flags become one config, which checks itself; the driver (`rollout.run`)
checks the rest once and plays.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from ttlearn.cli.common import (
    console,
    friendly,
    keep_key_out,
    parse_options,
    print_summary,
    progress_bar,
    progress_line,
    reads_runs,
    styled,
)
from ttlearn.envs.base import ENVS
from ttlearn.llm.base import DEFAULT_LLM
from ttlearn.llm.cache import ReplayBook
from ttlearn.rollout.parts import default_player
from ttlearn.rollout.run import play, prepare
from ttlearn.runs import Run, RunConfig, check_trusted, parse_config, read_config

TRUST_HELP = "A URL of the run (-m url=, openai:URL) that may receive TTLEARN_MEMORY_KEY / OPENAI_API_KEY; repeatable."
STORE_HELP = "The run's memory store file (-m store=) when it lies outside the run directory: it will be written."


def play_with_progress(
    out: Path,
    config: RunConfig | None,
    concurrency: int | None = None,
    replay: ReplayBook | None = None,
    how: str | None = None,
) -> Run:
    """Create (or resume) the run at `out`, play its missing units with a progress bar, then print its summary.
    `concurrency` None: as `play` decides (independent units side by side on the embedded model); `how` ("resumed",
    "replayed"): warn first when the environment cannot reproduce such a run exactly."""
    run = prepare(out, config, concurrency or 1)
    if how:
        warn_inexact(run.config.env, how)
    title = f"{run.config.env} · {run.config.memory}"
    try:
        with progress_bar(title, run.total, run.done) as update:
            summary = play(
                run,
                lambda done, total, record: update(completed=done, last=progress_line(record)),
                concurrency=concurrency,
                replay=replay,
            )
    except KeyboardInterrupt:
        stopped = f"interrupted after {run.done} units; continue with:"
        console.print(styled(stopped, "yellow", f" ttlearn resume {out}"))
        raise typer.Exit(130) from None
    print_summary(summary)
    return run


def warn_inexact(env: str, how: str) -> None:
    """Say so when a run's environment declares it is not deterministic: its games cannot be reproduced exactly."""
    if not ENVS.get(env).deterministic:
        console.print(
            styled(
                "warning:",
                "yellow",
                f" environment {env!r} declares deterministic = False, so a {how} run is not exact: games may differ "
                "from an uninterrupted run, and a replay may ask questions the recording never saw",
            )
        )


def register(app: typer.Typer) -> None:
    app.command()(friendly(run))
    app.command()(friendly(reads_runs(resume)))
    app.command()(friendly(reads_runs(replay)))


def run(
    env: str = typer.Argument(..., help="Environment (see `ttlearn list`): rps, holdem, sokoban, minesweeper, …"),
    opponent: Optional[str] = typer.Option(None, help="Opponent of a game env, e.g. cycle3, beat-last, probe."),
    rounds: Optional[int] = typer.Option(None, help="RPS: rounds per game (default 20)."),
    hands: Optional[int] = typer.Option(None, help="Hold'em: hands per game."),
    duplicate: Optional[bool] = typer.Option(
        None, "--duplicate", help="Hold'em: replay every deal with seats swapped."
    ),
    env_opt: list[str] = typer.Option([], "--env-opt", "-e", help="Any other environment option, KEY=VALUE."),
    memory: str = typer.Option(
        "none", help="Memory method: none, history, reflexion, memrl, lamer, … (`ttlearn list`)."
    ),
    memory_opt: list[str] = typer.Option([], "--memory-opt", "-m", help="A memory option, KEY=VALUE."),
    memory_from: Optional[Path] = typer.Option(
        None, help="Start from the memory of a run directory, fork or snapshot file (every unit, or the first when it carries)."
    ),
    units: Optional[int] = typer.Option(
        None, "--units", "--tasks", min=1, help="Task instances to play, each tried --attempts times (LaMer, MemRL)."
    ),
    games: Optional[int] = typer.Option(
        None,
        min=1,
        help="A session of N games (the default, N = 6): N units of one attempt, the memory carried from each game to "
        "the next.",
    ),
    attempts: Optional[int] = typer.Option(
        None, min=1, help="Attempts per unit (default 1 when the memory carries over, else LaMer's 3)."
    ),
    epochs: Optional[int] = typer.Option(
        None, min=1, help="MemRL protocol: replay the units N times, the memory carried over."
    ),
    carry_memory: Optional[bool] = typer.Option(
        None,
        "--carry-memory/--no-carry-memory",
        help="The memory carries from unit to unit (runtime learning). Default: yes for --games and for memories "
        "that learn across tasks (memrl, memp, rag, expel, cheatsheet), no for the others; implied by --epochs > 1.",
    ),
    control: Optional[bool] = typer.Option(
        None,
        "--control",
        help="Also play every unit without memory (same seeds; with --epochs, in the last epoch) and report the paired "
        "difference and both arms' invalid replies.",
    ),
    validation_tasks: Optional[int] = typer.Option(
        None, min=1, help="MemRL protocol: after each epoch, play N held-out instances from its memory."
    ),
    validation_opt: list[str] = typer.Option(
        [], "--validation-opt", help="Environment option of the held-out instances, KEY=VALUE (e.g. split=test)."
    ),
    policy: Optional[Path] = typer.Option(
        None, help="Play with a trained LaMer policy folder (an hf adapter): the same as --llm hf:FOLDER."
    ),
    llm: Optional[str] = typer.Option(
        None,
        help="Player: gemma270m, smollm2, qwen-coder, gguf:PATH, openai:URL#MODEL, hf:…, or scripted:random|oracle|… "
        f"(default: qwen-coder for code and sql, else {DEFAULT_LLM}).",
    ),
    writer: Optional[str] = typer.Option(
        None, help="LLM that writes the memory (default: the player's LLM); a folder means a trained hf: writer."
    ),
    temperature: float = typer.Option(0.0, min=0.0, help="Player sampling temperature (0 = greedy)."),
    retries: int = typer.Option(
        2, min=0, help="LLM player writing text: more replies asked for before a move counts invalid (LaMer: 0)."
    ),
    free_text: Optional[int] = typer.Option(
        None,
        "--free-text",
        min=1,
        help="LaMer's policy: one reply of up to N tokens, reasoning then <action>…</action>, never choice scoring.",
    ),
    max_options: Optional[int] = typer.Option(
        None,
        "--max-options",
        min=1,
        help="LLM player: the most legal actions one prompt lists (default 64): the environment's ranked actions "
        "first, then those most like the observation. A choice-scoring player picks among these only.",
    ),
    note_at: Optional[str] = typer.Option(
        None,
        "--note-at",
        help="LLM player: where the memory is shown: system (default), exchange (an earlier answer), advice (a line "
        "before the legal actions) or default (the action the notes name, listed first and suggested).",
    ),
    seed: int = typer.Option(0, help="Seed of the whole run; the same seed replays the same games."),
    concurrency: Optional[int] = typer.Option(
        None,
        min=1,
        help="Units in flight sharing one back end (independent units only); same results. Default: "
        "as many as the embedded model runs side by side (one per idle core) where the units are independent, else 1.",
    ),
    out: Optional[Path] = typer.Option(None, help="Run directory (default runs/ENV-MEMORY-TIME)."),
) -> None:
    """Play units (--units K: task instances with attempts) or a session of games (--games N, the default) with a
    frozen player and a memory; record everything in a run directory that `resume`, `show` and `replay` read."""
    if units is not None and games is not None:
        raise ValueError("--games N is N units of one attempt with the memory carried; give --units or --games, not both")
    if games is not None or units is None:
        units = games or RunConfig.model_fields["units"].default
        attempts = 1 if attempts is None else attempts
        carry_memory = True if carry_memory is None else carry_memory
    options = {"opponent": opponent, "rounds": rounds, "hands": hands, "duplicate": duplicate}
    env_options = {**parse_options(env_opt, "--env-opt"), **{k: v for k, v in options.items() if v is not None}}
    fields = {
        "env": env,
        "env_options": env_options,
        "memory": memory,
        "memory_options": keep_key_out(parse_options(memory_opt, "--memory-opt")),
        "player": f"hf:{policy}" if policy else llm or default_player(env),
        "writer": f"hf:{writer}" if writer and Path(writer).is_dir() else writer,
        "seed": seed,
        "temperature": temperature,
        "retries": retries,
        "free_text_tokens": free_text,
        "max_options": max_options,
        "units": units,
        "note_at": note_at,
        "memory_from": str(memory_from) if memory_from else None,
        "attempts": attempts,
        "epochs": epochs,
        "carry_memory": carry_memory,
        "control": control,
        "validation_tasks": validation_tasks,
        "validation_env_options": parse_options(validation_opt, "--validation-opt") or None,
    }
    config = parse_config({k: v for k, v in fields.items() if v is not None})
    out = out or Path("runs") / f"{env}-{memory}-{time.strftime('%Y%m%d-%H%M%S')}"
    play_with_progress(out, config, concurrency)


def resume(
    run_dir: Path = typer.Argument(..., help="A run directory left by an interrupted `ttlearn run`."),
    concurrency: Optional[int] = typer.Option(None, min=1, help="Episodes in flight, as for `run`."),
    memory_opt: list[str] = typer.Option([], "--memory-opt", "-m", help="Only key=KEY: the memory service's key."),
    trust_url: list[str] = typer.Option([], help=TRUST_HELP),
    trust_store: list[str] = typer.Option([], help=STORE_HELP),
) -> None:
    """Finish an interrupted run: no unit is lost or played twice. Credentials go only to URLs
    named again with --trust-url: the run directory may have been written by anyone."""
    if keep_key_out(parse_options(memory_opt, "--memory-opt")):
        raise ValueError("resume takes only -m key=KEY; the run's other memory options are in its directory")
    check_trusted(read_config(run_dir), trust_url, run_dir, stores=trust_store)  # before anything else is read
    run = Run.open(run_dir, repair=False)
    if run.finished:
        console.print(f"{run_dir} is already complete ({run.done} units).", markup=False)
    else:
        console.print(f"resuming {run_dir} at unit {run.done + 1} of {run.total}", markup=False)
    play_with_progress(run_dir, None, concurrency, how="resumed")


def replay(
    run_dir: Path = typer.Argument(..., help="A finished run to replay from its recorded LLM calls."),
    out: Optional[Path] = typer.Option(None, help="Where to write the replayed run (default RUN_DIR-replay)."),
    trust_url: list[str] = typer.Option([], help=TRUST_HELP),
    trust_store: list[str] = typer.Option([], help=STORE_HELP),
) -> None:
    """Re-run a recorded run without calling any model, and check that every outcome is
    reproduced."""
    out = out or Path(f"{run_dir}-replay")
    check_trusted(read_config(run_dir), trust_url, run_dir, stores=trust_store)  # before anything else is read
    source = Run.open(run_dir, repair=False)
    if not source.finished:
        raise ValueError(f"{run_dir} is unfinished ({source.done} of {source.total} units); resume it first")
    target = play_with_progress(out, source.config, replay=ReplayBook(source.calls()), how="replayed")
    same = source.outcomes() == target.outcomes()
    verdict = ("scores reproduced exactly", "green") if same else ("scores differ from the recording", "red")
    console.print(styled(*verdict))
    if not same:
        raise typer.Exit(1)
