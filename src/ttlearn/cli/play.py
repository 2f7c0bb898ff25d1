"""`ttlearn run`, `resume` and `replay`: play into a run directory, finish an interrupted one, or re-play a recording.

`run` has two modes, named by their flags: a *session* (`--games N`: one sequence of games, the memory carried from
each game to the next) and a *trial run* (`--tasks K`: K task instances, each tried up to `--attempts` times with the
memory's reflections in between; LaMer, and MemRL's protocol with `--epochs`). Trial-only flags without `--tasks`
are an error, never a silent switch of mode.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import typer

from ttlearn.cli.common import (
    console,
    format_trial_summary,
    friendly,
    keep_key_out,
    parse_options,
    print_summary,
    progress_bar,
)
from ttlearn.envs.base import ENVS
from ttlearn.eval.summary import summarize
from ttlearn.llm.base import DEFAULT_LLM
from ttlearn.llm.cache import ReplayBook
from ttlearn.rollout.parts import default_player
from ttlearn.rollout.session import open_session, validate
from ttlearn.rollout.trials import resolved_for, run_trials, validate_trials
from ttlearn.runs import Run, RunConfig, TrialConfig, check_trusted, is_trial_dir, load_trial_config, read_tasks

TRUST_HELP = "A URL of the run (-m url=, openai:URL) that may receive TTLEARN_MEMORY_KEY / OPENAI_API_KEY; repeatable."


def play_session(run: Run, replay: ReplayBook | None = None, concurrency: int = 1) -> None:
    """Play the missing games of `run` with a progress bar, then print and store the summary."""
    with console.status("loading models…"):
        session = open_session(run, replay, concurrency=concurrency)
    start = time.perf_counter()
    try:
        with progress_bar(f"{run.config.env} · {run.config.memory}", run.config.games, len(run.episodes)) as update:
            session.play(lambda ep: update(advance=1, last=f"game {ep.index}: {ep.score:+g}"))
    except KeyboardInterrupt:
        console.print(
            f"[yellow]interrupted after {len(run.episodes)} games; continue with:[/] ttlearn resume {run.path}"
        )
        raise typer.Exit(130) from None
    finally:
        session.close()
    summary = summarize(run, wall_s=time.perf_counter() - start)
    run.write_summary(summary)
    print_summary(summary, run.path)


def play_trials(config: TrialConfig, out: Path, concurrency: int = 1, replay: ReplayBook | None = None) -> None:
    """Run (or resume) a trial run with a progress bar, then print success@k."""
    config = resolved_for(config, out)
    validate_trials(config, concurrency)
    with progress_bar(f"{config.env} · {config.memory} · {config.attempts} attempts", config.total) as update:

        def advance(done: int, total: int, record: dict[str, Any]) -> None:
            solved = record.get("first_success")
            update(completed=done, last=f"task {done}: {'solved at ' + str(solved) if solved else 'unsolved'}")

        try:
            summary = run_trials(config, out, progress=advance, concurrency=concurrency, replay=replay)
        except KeyboardInterrupt:
            console.print(f"[yellow]interrupted; continue with:[/] ttlearn resume {out}")
            raise typer.Exit(130) from None
    console.print(format_trial_summary(summary), markup=False, highlight=False)
    console.print(f"run directory: [bold]{out}[/]")


def warn_inexact(env: str, how: str) -> None:
    """Say so when a run's environment declares it is not deterministic: its games cannot be reproduced exactly."""
    if not ENVS.get(env).deterministic:
        console.print(
            f"[yellow]warning:[/] environment {env!r} declares deterministic = False, so a {how} run is not exact: "
            "games may differ from an uninterrupted run, and a replay may ask questions the recording never saw"
        )


def register(app: typer.Typer) -> None:
    app.command()(friendly(run))
    app.command()(friendly(resume))
    app.command()(friendly(replay))


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
        help="Trial mode: also play every task without memory (same seeds) and report the paired difference.",
    ),
    validation_tasks: Optional[int] = typer.Option(
        None, min=1, help="Trial mode, MemRL protocol: after each epoch, play N held-out instances from its memory."
    ),
    validation_opt: list[str] = typer.Option(
        [], "--validation-opt", help="Environment option of the held-out instances, KEY=VALUE (e.g. split=test)."
    ),
    policy: Optional[Path] = typer.Option(
        None, help="Trial mode: play with a trained LaMer policy folder (hf adapter)."
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
    seed: int = typer.Option(0, help="Seed of the whole run; the same seed replays the same games."),
    concurrency: int = typer.Option(
        1, min=1, help="Episodes in flight sharing one back end (independent games, or trial tasks); same results."
    ),
    out: Optional[Path] = typer.Option(None, help="Run directory (default runs/ENV-MEMORY-TIME)."),
) -> None:
    """Play a session of games (--games) or a trial run (--tasks) with a frozen player and a memory; record everything
    in a run directory that `resume`, `show` and `replay` read."""
    llm = llm or default_player(env)
    env_options = parse_options(env_opt, "--env-opt")
    for key, value in {"opponent": opponent, "rounds": rounds, "hands": hands, "duplicate": duplicate}.items():
        if value is not None:
            env_options[key] = value
    if writer and Path(writer).is_dir():
        writer = f"hf:{writer}"
    parts = dict(
        env=env,
        env_options=env_options,
        memory=memory,
        memory_options=keep_key_out(parse_options(memory_opt, "--memory-opt")),
        writer=writer,
        seed=seed,
        temperature=temperature,
        retries=retries,
        free_text_tokens=free_text,
    )
    out = out or Path("runs") / f"{env}-{memory}-{time.strftime('%Y%m%d-%H%M%S')}"
    trial_flags = {
        "--attempts": attempts,
        "--epochs": epochs,
        "--carry-memory": carry_memory,
        "--control": control,
        "--policy": policy,
        "--validation-tasks": validation_tasks,
        "--validation-opt": validation_opt or None,
    }
    if tasks is None:
        given = [flag for flag, value in trial_flags.items() if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} belong to trial mode: add --tasks K (how many task instances)")
        config = RunConfig(**parts, player=llm, games=games or 6, memory_from=str(memory_from) if memory_from else None)
        validate(config, concurrency)
        play_session(Run.create(out, config), concurrency=concurrency)
        return
    if games is not None or memory_from is not None:
        raise ValueError("--games and --memory-from belong to session mode; trial mode (--tasks) plays tasks")
    config = TrialConfig(
        **parts,
        player=f"hf:{policy}" if policy else llm,
        tasks=tasks,
        **({"attempts": attempts} if attempts else {}),
        epochs=epochs or 1,
        carry_memory=carry_memory,
        control=bool(control),
        validation_tasks=validation_tasks or 0,
        validation_env_options=parse_options(validation_opt, "--validation-opt"),
    )
    play_trials(config, out, concurrency)


def resume(
    run_dir: Path = typer.Argument(..., help="A run directory left by an interrupted `ttlearn run`."),
    concurrency: int = typer.Option(1, min=1, help="Episodes in flight, as for `run`."),
    memory_opt: list[str] = typer.Option([], "--memory-opt", "-m", help="Only key=KEY: the memory service's key."),
    trust_url: list[str] = typer.Option([], help=TRUST_HELP),
) -> None:
    """Finish an interrupted run: no game (or trial task) is lost or played twice. Credentials go only to URLs
    named again with --trust-url: the run directory may have been written by anyone."""
    if keep_key_out(parse_options(memory_opt, "--memory-opt")):
        raise ValueError("resume takes only -m key=KEY; the run's other memory options are in its directory")
    if is_trial_dir(run_dir):
        config = load_trial_config(run_dir)
        warn_inexact(config.env, "resumed")
        check_trusted(config, trust_url, run_dir)
        play_trials(config, run_dir, concurrency)
        return
    run = Run.open(run_dir)
    warn_inexact(run.config.env, "resumed")
    check_trusted(run.config, trust_url, run_dir)
    if run.finished:
        console.print(f"{run_dir} is already complete ({len(run.episodes)} games).")
        print_summary(summarize(run), run.path)
        return
    console.print(f"resuming {run_dir} at game {len(run.episodes) + 1} of {run.config.games}")
    play_session(run, concurrency=concurrency)


def replay(
    run_dir: Path = typer.Argument(..., help="A finished run to replay from its recorded LLM calls."),
    out: Optional[Path] = typer.Option(None, help="Where to write the replayed run (default RUN_DIR-replay)."),
    trust_url: list[str] = typer.Option([], help=TRUST_HELP),
) -> None:
    """Re-run a recorded session or trial run without calling any model, and check that every score is reproduced."""
    out = out or Path(f"{run_dir}-replay")
    if is_trial_dir(run_dir):
        config, recorded = load_trial_config(run_dir), read_tasks(run_dir, repair=False)
        warn_inexact(config.env, "replayed")
        check_trusted(config, trust_url, run_dir)
        if len(recorded) < config.total:
            raise ValueError(f"{run_dir} is unfinished ({len(recorded)} of {config.total} tasks); resume it first")
        book = ReplayBook(c for r in recorded for c in r["calls"] if c.get("type") == "call")
        play_trials(config, out, replay=book)
        same = _trial_scores(recorded) == _trial_scores(read_tasks(out))
    else:
        source = Run.open(run_dir)
        warn_inexact(source.config.env, "replayed")
        check_trusted(source.config, trust_url, run_dir)
        book = ReplayBook(e for e in source.events() if e.get("type") == "call")
        target = Run.create(out, source.config)
        play_session(target, replay=book)
        same = [a.score for a in source.episodes] == [b.score for b in target.episodes]
    console.print("[green]scores reproduced exactly[/]" if same else "[red]scores differ from the recording[/]")
    if not same:
        raise typer.Exit(1)


def _trial_scores(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What a trial replay must reproduce: each task's first success (and its control's) and attempt scores."""
    return [
        (r["first_success"], r.get("control_first_success"), [a["score"] for a in r["attempts"]]) for r in records
    ]
