"""`ttlearn run`, `resume` and `replay`: play into a run directory, finish an interrupted one, or re-play a recording.

`run` plays units: task instances, each tried up to `--attempts` times with the memory's reflections in between
(LaMer), over `--epochs` passes (MemRL's protocol). `--games N` is a preset of those options, the session of games:
N units of one attempt, the memory carried from each game to the next (`runs.games`). The flags become one
`RunConfig`: a flag not given is the config's own default, so `ttlearn run ENV` plays what `RunConfig(env=ENV)` plays.
The config checks itself; the driver (`rollout.run`) checks the rest once and plays.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from ttlearn.cli.common import (
    console,
    friendly,
    keep_key_out,
    keep_password_out,
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
from ttlearn.rollout.run import play, prepare
from ttlearn.runs import Run, RunConfig, check_trusted, default_run_dir, parse_config, read_config, replay_dir
from ttlearn.runs import games as session_of

TRUST_HELP = "A URL of the run (-m url=, openai:URL) that may receive TTLEARN_MEMORY_KEY / OPENAI_API_KEY; repeatable."
DEFAULT_UNITS = RunConfig.model_fields["units"].default
STORE_HELP = (
    "The run's memory store (-m store=) when it lies outside the run directory: it will be written. A database's "
    "password may be given here (postgresql://USER:PASSWORD@…) or in PGPASSWORD; it is never recorded."
)


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
    with prepare(out, config, concurrency or 1) as run:
        if how == "resumed":
            done = f"already complete ({run.done} units)"
            console.print(f"resuming {out}: {done if run.finished else f'at unit {run.done + 1} of {run.total}'}")
        if how:
            warn_inexact(run.config.env, how)
        summary = play_with_bar(run, concurrency, replay)
    print_summary(summary)
    return run


def play_with_bar(run: Run, concurrency: int | None, replay: ReplayBook | None) -> dict[str, Any]:
    """`play` under a progress bar; an interrupt says how to resume."""
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
        console.print(styled(stopped, "yellow", f" ttlearn resume {run.path}"))
        raise typer.Exit(130) from None
    return summary


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
    memory: Optional[str] = typer.Option(
        None, help="Memory method: none (the default), history, reflexion, memrl, lamer, … (`ttlearn list`)."
    ),
    memory_opt: list[str] = typer.Option([], "--memory-opt", "-m", help="A memory option, KEY=VALUE."),
    memory_from: Optional[Path] = typer.Option(
        None,
        help="Start from the memory of a run directory, fork or snapshot file (every unit, or the first when it "
        "carries).",
    ),
    units: Optional[int] = typer.Option(
        None,
        "--units",
        "--tasks",
        min=1,
        help=f"Units to play: task instances, each tried --attempts times (default {DEFAULT_UNITS}).",
    ),
    games: Optional[int] = typer.Option(
        None,
        min=1,
        help="A session of N games: the same as --units N --attempts 1 --carry-memory (either may still be given).",
    ),
    attempts: Optional[int] = typer.Option(
        None, min=1, help="Attempts per unit (default 1 when the memory carries from unit to unit, else LaMer's 3)."
    ),
    epochs: Optional[int] = typer.Option(
        None, min=1, help="Epochs: passes over the units, the memory carried over (MemRL's protocol; default 1)."
    ),
    carry_memory: Optional[bool] = typer.Option(
        None,
        "--carry-memory/--no-carry-memory",
        help="The memory carries from unit to unit (runtime learning). Default: yes for memories that learn across "
        "tasks (marked * by `ttlearn list`) and for --games, no for the others; implied by --epochs > 1.",
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
        f"(default: the environment's, shown by `ttlearn list`; {DEFAULT_LLM} where it names none).",
    ),
    writer: Optional[str] = typer.Option(
        None, help="LLM that writes the memory (default: the player's LLM); a folder means a trained hf: writer."
    ),
    temperature: Optional[float] = typer.Option(None, min=0.0, help="Player sampling temperature (default 0: greedy)."),
    retries: Optional[int] = typer.Option(
        None,
        min=0,
        help="LLM player writing text: more replies asked for before a move counts invalid (default 2; LaMer: 0).",
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
    seed: Optional[int] = typer.Option(
        None, help="Seed of the whole run (default 0); the same seed replays the same units."
    ),
    concurrency: Optional[int] = typer.Option(
        None,
        min=1,
        help="Units in flight sharing one back end (independent units only); same results. Default: "
        "as many as the embedded model runs side by side (one per idle core) where the units are independent, else 1.",
    ),
    out: Optional[Path] = typer.Option(None, help="Run directory (default runs/ENV-MEMORY-TIME)."),
) -> None:
    """Play units — task instances with their attempts (--units K), or a session of games (--games N) — with a frozen
    player and a memory, and record everything in a run directory that `resume`, `show` and `replay` read. A flag
    not given takes the run config's default: `ttlearn run ENV` is `ttlearn.run(RunConfig(env=ENV), OUT)`."""
    if units is not None and games is not None:
        raise ValueError("--games N is N units of one attempt with the memory carried: give --units or --games")
    options = {"opponent": opponent, "rounds": rounds, "hands": hands, "duplicate": duplicate}
    env_options = {**parse_options(env_opt, "--env-opt"), **{k: v for k, v in options.items() if v is not None}}
    fields = {
        "env": env,
        "env_options": env_options,
        "memory": memory,
        "memory_options": keep_key_out(parse_options(memory_opt, "--memory-opt")),
        "player": f"hf:{policy}" if policy else llm,
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
    preset = session_of(games) if games is not None else {}
    config = parse_config({**preset, **{k: v for k, v in fields.items() if v is not None}})
    out = out or default_run_dir(env, config.memory)
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
    stores = [keep_password_out(store) for store in trust_store]
    check_trusted(read_config(run_dir), trust_url, run_dir, stores=stores)  # before anything else is read
    play_with_progress(run_dir, None, concurrency, how="resumed")


def replay(
    run_dir: Path = typer.Argument(..., help="A finished run to replay from its recorded LLM calls."),
    out: Optional[Path] = typer.Option(None, help="Where to write the replayed run (default RUN_DIR-replay)."),
    trust_url: list[str] = typer.Option([], help=TRUST_HELP),
    trust_store: list[str] = typer.Option([], help=STORE_HELP),
) -> None:
    """Re-run a recorded run without calling any model, and check that every outcome is
    reproduced."""
    out = out or replay_dir(run_dir)
    stores = [keep_password_out(store) for store in trust_store]
    check_trusted(read_config(run_dir), trust_url, run_dir, stores=stores)  # before anything else is read
    source = Run.open(run_dir)
    if not source.finished:
        raise ValueError(f"{run_dir} is unfinished ({source.done} of {source.total} units); resume it first")
    target = play_with_progress(out, source.config, replay=ReplayBook(source.calls()), how="replayed")
    same = source.outcomes() == target.outcomes()
    verdict = ("scores reproduced exactly", "green") if same else ("scores differ from the recording", "red")
    console.print(styled(*verdict))
    if not same:
        raise typer.Exit(1)
