"""`ttlearn run`, `resume` and `replay`: play into a run directory, finish an interrupted one, or re-play a recording.

`run` plays either kind of run, named by its flags: a *session* (`--games N`: one sequence of games, the memory
carried from each game to the next) or a *trial run* (`--tasks K`: K task instances, each tried up to `--attempts`
times with the memory's reflections in between; LaMer, and MemRL's protocol with `--epochs`). The flags become one
config, which checks itself (trial-only flags without `--tasks` are an error, never a silent switch of kind); the
driver (`rollout.run`) checks the rest once and plays. Nothing here depends on the kind.
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
from ttlearn.rollout.run import Config, play, prepare
from ttlearn.runs import Run, RunDir, check_trusted, parse_config

TRUST_HELP = "A URL of the run (-m url=, openai:URL) that may receive TTLEARN_MEMORY_KEY / OPENAI_API_KEY; repeatable."
STORE_HELP = "The run's memory store file (-m store=) when it lies outside the run directory: it will be written."


def play_with_progress(
    out: Path,
    config: Config | None,
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
        stopped = f"interrupted after {run.done} {run.unit}s; continue with:"
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
    memory_from: Optional[Path] = typer.Option(None, help="Session: start from the memory of a run dir or snapshot."),
    games: Optional[int] = typer.Option(None, min=1, help="Session mode: games in the sequence (default 6)."),
    tasks: Optional[int] = typer.Option(
        None, min=1, help="Trial mode: how many task instances, each tried --attempts times (LaMer, MemRL protocol)."
    ),
    attempts: Optional[int] = typer.Option(
        None, min=1, help="Trial mode: attempts per task (default 1 when the memory carries over, else 3)."
    ),
    epochs: Optional[int] = typer.Option(
        None, min=1, help="Trial mode, MemRL protocol: replay the task set N times, the memory carried over."
    ),
    carry_memory: Optional[bool] = typer.Option(
        None,
        "--carry-memory/--no-carry-memory",
        help="Trial mode, MemRL's runtime learning: the memory carries from task to task. Default: yes for memories "
        "that learn across tasks (memrl, memp, rag, expel, cheatsheet), no for the others; implied by --epochs > 1.",
    ),
    control: Optional[bool] = typer.Option(
        None,
        "--control",
        help="Trial mode: also play every task without memory (same seeds; with --epochs, in the last epoch) and report "
        "the paired difference and both arms' invalid replies.",
    ),
    validation_tasks: Optional[int] = typer.Option(
        None, min=1, help="Trial mode, MemRL protocol: after each epoch, play N held-out instances from its memory."
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
        help="Episodes in flight sharing one back end (independent games, or trial tasks); same results. Default: "
        "as many as the embedded model runs side by side (one per idle core) where the units are independent, else 1.",
    ),
    out: Optional[Path] = typer.Option(None, help="Run directory (default runs/ENV-MEMORY-TIME)."),
) -> None:
    """Play a session of games (--games) or a trial run (--tasks) with a frozen player and a memory; record everything
    in a run directory that `resume`, `show` and `replay` read."""
    options = {"opponent": opponent, "rounds": rounds, "hands": hands, "duplicate": duplicate}
    env_options = {**parse_options(env_opt, "--env-opt"), **{k: v for k, v in options.items() if v is not None}}
    fields = {
        "kind": "session" if tasks is None else "trials",
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
        "note_at": note_at,
        "games": games,
        "memory_from": str(memory_from) if memory_from else None,
        "tasks": tasks,
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
    """Finish an interrupted run: no game (or trial task) is lost or played twice. Credentials go only to URLs
    named again with --trust-url: the run directory may have been written by anyone."""
    if keep_key_out(parse_options(memory_opt, "--memory-opt")):
        raise ValueError("resume takes only -m key=KEY; the run's other memory options are in its directory")
    check_trusted(RunDir(run_dir).config(), trust_url, run_dir, stores=trust_store)  # before anything else is read
    run = Run.open(run_dir, repair=False)
    if run.finished:
        console.print(f"{run_dir} is already complete ({run.done} {run.unit}s).", markup=False)
    else:
        console.print(f"resuming {run_dir} at {run.unit} {run.done + 1} of {run.total}", markup=False)
    play_with_progress(run_dir, None, concurrency, how="resumed")


def replay(
    run_dir: Path = typer.Argument(..., help="A finished run to replay from its recorded LLM calls."),
    out: Optional[Path] = typer.Option(None, help="Where to write the replayed run (default RUN_DIR-replay)."),
    trust_url: list[str] = typer.Option([], help=TRUST_HELP),
    trust_store: list[str] = typer.Option([], help=STORE_HELP),
) -> None:
    """Re-run a recorded session or trial run without calling any model, and check that every outcome is
    reproduced."""
    out = out or Path(f"{run_dir}-replay")
    check_trusted(RunDir(run_dir).config(), trust_url, run_dir, stores=trust_store)  # before anything else is read
    source = Run.open(run_dir, repair=False)
    if not source.finished:
        raise ValueError(f"{run_dir} is unfinished ({source.done} of {source.total} {source.unit}s); resume it first")
    target = play_with_progress(out, source.config, replay=ReplayBook(source.calls()), how="replayed")
    same = source.outcomes() == target.outcomes()
    verdict = ("scores reproduced exactly", "green") if same else ("scores differ from the recording", "red")
    console.print(styled(*verdict))
    if not same:
        raise typer.Exit(1)
