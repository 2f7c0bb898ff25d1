"""The `ttlearn` command line: run, resume, replay and inspect test-time-learning sessions."""

from __future__ import annotations

import difflib
import functools
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ttlearn import summary as summary_mod
from ttlearn.llm.base import DEFAULT_LLM, LLMError
from ttlearn.llm.cache import ReplayBook
from ttlearn.registry import UnknownNameError
from ttlearn.runs import Run, RunConfig
from ttlearn.serve import DEFAULT_BURST, DEFAULT_MAX_BODY, DEFAULT_RATE
from ttlearn.session import build_session, validate
from ttlearn.trials import (
    TrialConfig,
    compare_trials,
    format_comparison,
    format_summary,
    format_task,
    is_trial_dir,
    load_trial_config,
    read_tasks,
    run_trials,
    summarize_trials,
    validate_trials,
)

app = typer.Typer(
    help="Test-time learning for LLM agents: a frozen LLM plays a sequence of episodes and improves through a memory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
USER_ERRORS = (ValueError, LLMError, FileNotFoundError, FileExistsError, UnknownNameError, ValidationError)


def friendly(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the errors a user can cause into one red line and exit code 2, instead of a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except USER_ERRORS as exc:
            console.print(f"[bold red]error:[/] {exc}")
            raise typer.Exit(2) from None

    return wrapper


def parse_options(pairs: list[str], flag: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} takes KEY=VALUE, got {pair!r}")
        options[key.replace("-", "_")] = yaml.safe_load(value)
    return options


def play(run: Run, replay: ReplayBook | None = None) -> None:
    """Play the missing games of `run` with a progress bar, then print and store the summary."""
    with console.status("loading models…"):
        session = build_session(run, replay)
    start = time.perf_counter()
    try:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[last]}"),
            console=console,
            transient=False,
        ) as progress:
            bar = progress.add_task(
                f"{run.config.env} · {run.config.memory}", total=run.config.games, completed=len(run.episodes), last=""
            )
            session.play(lambda ep: progress.update(bar, advance=1, last=f"game {ep.index}: {ep.score:+g}"))
    except KeyboardInterrupt:
        console.print(
            f"[yellow]interrupted after {len(run.episodes)} games; continue with:[/] ttlearn resume {run.path}"
        )
        raise typer.Exit(130) from None
    finally:
        session.close()
    summary = summary_mod.summarize(run, wall_s=time.perf_counter() - start)
    run.write_summary(summary)
    summary_mod.print_summary(console, summary, run.path)


@app.command()
@friendly
def run(
    env: str = typer.Argument(..., help="Environment: rps, holdem, sokoban, minesweeper (see `ttlearn list`)."),
    opponent: Optional[str] = typer.Option(None, help="Opponent of a game env, e.g. cycle3, beat-last, probe."),
    rounds: Optional[int] = typer.Option(None, help="RPS: rounds per game (default 20)."),
    hands: Optional[int] = typer.Option(None, help="Hold'em: hands per game."),
    duplicate: Optional[bool] = typer.Option(
        None, "--duplicate", help="Hold'em: replay every deal with seats swapped."
    ),
    env_opt: list[str] = typer.Option([], "--env-opt", "-e", help="Any other environment option, KEY=VALUE."),
    memory: str = typer.Option("none", help="Memory method: none, history, reflexion, … (see `ttlearn list`)."),
    memory_opt: list[str] = typer.Option([], "--memory-opt", "-m", help="A memory option, KEY=VALUE."),
    memory_from: Optional[Path] = typer.Option(None, help="Start from the memory of a run dir or snapshot file."),
    games: int = typer.Option(6, min=1, help="Games (episodes) in the sequence."),
    attempts: Optional[int] = typer.Option(
        None, min=1, help="Trials mode (LaMer): attempts per task, with the memory between attempts."
    ),
    tasks: Optional[int] = typer.Option(None, min=1, help="Trials mode: how many task instances (default 10)."),
    epochs: Optional[int] = typer.Option(
        None, min=1, help="Trials mode, MemRL protocol: replay the task set N times, the memory carried over."
    ),
    policy: Optional[Path] = typer.Option(None, help="Trials mode: a trained LaMer policy folder (hf: adapter)."),
    llm: str = typer.Option(
        DEFAULT_LLM, help="Player: smollm2, gemma270m, gguf:PATH, openai:URL#MODEL, or scripted:random|oracle|learner."
    ),
    writer: Optional[str] = typer.Option(
        None, help="LLM that writes the memory (default: the player's LLM); a folder means a trained hf: writer."
    ),
    temperature: float = typer.Option(0.0, min=0.0, help="Player sampling temperature (0 = greedy)."),
    seed: int = typer.Option(0, help="Seed of the whole run; the same seed replays the same games."),
    out: Optional[Path] = typer.Option(None, help="Run directory (default runs/ENV-MEMORY-TIME)."),
) -> None:
    """Play a sequence of games with a frozen player and a memory; record everything in a run directory."""
    env_options = parse_options(env_opt, "--env-opt")
    if writer and Path(writer).is_dir():
        writer = f"hf:{writer}"
    for key, value in {"opponent": opponent, "rounds": rounds, "hands": hands, "duplicate": duplicate}.items():
        if value is not None:
            env_options[key] = value
    config = RunConfig(
        env=env,
        env_options=env_options,
        memory=memory,
        memory_options=parse_options(memory_opt, "--memory-opt"),
        player=llm,
        writer=writer,
        games=games,
        seed=seed,
        temperature=temperature,
        memory_from=str(memory_from) if memory_from else None,
    )
    out = out or Path("runs") / f"{env}-{memory}-{time.strftime('%Y%m%d-%H%M%S')}"
    if attempts or tasks or epochs or policy or memory == "lamer":
        trials = TrialConfig(
            env=env,
            env_options=env_options,
            memory=memory,
            memory_options=config.memory_options,
            player=f"hf:{policy}" if policy else llm,
            writer=writer,
            tasks=tasks or 10,
            attempts=attempts or 3,
            epochs=epochs or 1,
            seed=seed,
            temperature=temperature,
        )
        play_trials(trials, out)
        return
    validate(config)
    play(Run.create(out, config))


def play_trials(config: TrialConfig, out: Path) -> None:
    """Run (or resume) a multi-attempt trial run with a progress bar, then print success@k."""
    validate_trials(config)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
        console=console,
    ) as progress:
        bar = progress.add_task(
            f"{config.env} · {config.memory} · {config.attempts} attempts", total=config.tasks, last=""
        )

        def advance(done: int, total: int, record: dict[str, Any]) -> None:
            solved = record.get("first_success")
            progress.update(
                bar, completed=done, last=f"task {done}: {'solved at ' + str(solved) if solved else 'unsolved'}"
            )

        try:
            summary = run_trials(config, out, progress=advance)
        except KeyboardInterrupt:
            console.print(f"[yellow]interrupted; continue with:[/] ttlearn resume {out}")
            raise typer.Exit(130) from None
    console.print(format_summary(summary), markup=False, highlight=False)
    console.print(f"run directory: [bold]{out}[/]")


@app.command()
@friendly
def resume(run_dir: Path = typer.Argument(..., help="A run directory left by an interrupted `ttlearn run`.")) -> None:
    """Finish an interrupted run: no game (or trial task) is lost or played twice."""
    if is_trial_dir(run_dir):
        play_trials(load_trial_config(run_dir), run_dir)
        return
    run = Run.open(run_dir)
    if run.finished:
        console.print(f"{run_dir} is already complete ({len(run.episodes)} games).")
        summary_mod.print_summary(console, summary_mod.summarize(run), run.path)
        return
    console.print(f"resuming {run_dir} at game {len(run.episodes) + 1} of {run.config.games}")
    play(run)


@app.command()
@friendly
def replay(
    run_dir: Path = typer.Argument(..., help="A finished run to replay from its recorded LLM calls."),
    out: Optional[Path] = typer.Option(None, help="Where to write the replayed run (default RUN_DIR-replay)."),
) -> None:
    """Re-run a recorded run without calling any model, and check that every score is reproduced."""
    source = Run.open(run_dir)
    book = ReplayBook(e for e in source.events() if e.get("type") == "call")
    target = Run.create(out or Path(f"{run_dir}-replay"), source.config)
    play(target, replay=book)
    same = [a.score for a in source.episodes] == [b.score for b in target.episodes]
    console.print("[green]scores reproduced exactly[/]" if same else "[red]scores differ from the recording[/]")
    if not same:
        raise typer.Exit(1)


@app.command()
@friendly
def show(
    run_dir: Path = typer.Argument(..., help="A run directory."),
    game: Optional[int] = typer.Option(None, help="Show this game's steps, prompts and replies."),
    prompts: bool = typer.Option(False, help="With --game: print the full prompts too."),
    against: Optional[Path] = typer.Option(
        None, help="Trial runs: another run on the same tasks; prints paired success@k with McNemar p-values."
    ),
) -> None:
    """Print a run's summary, or one game's prompts and replies (in a trial run: one task's attempts)."""
    if is_trial_dir(run_dir):
        show_trials(run_dir, game, prompts, against)
        return
    if against is not None:
        raise ValueError("--against compares trial runs (ttlearn run ENV --attempts N)")
    run = Run.open(run_dir)
    if game is None:
        summary_mod.print_summary(console, summary_mod.summarize(run), run.path)
        return
    if not 1 <= game <= len(run.episodes):
        raise ValueError(f"game must be between 1 and {len(run.episodes)}")
    for event in run.events(game):
        if event["type"] == "call":
            print_call(event, prompts)
        elif event["type"] == "step":
            flag = "" if event["valid"] else " [red](invalid → fallback)[/]"
            console.print(f"step {event['step']}: {event['action']} → {event['reward']:+g}{flag}")
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
        console.print(format_summary(summarize_trials(records, config)), highlight=False)
        console.print(f"{len(records)} of {config.total} tasks finished")
        return
    if not 1 <= task <= len(records):
        raise ValueError(f"--game must be a finished task, between 1 and {len(records)}")
    record = records[task - 1]
    console.print(format_task(record), markup=False, highlight=False)
    for call in record["calls"] if prompts else []:
        print_call(call, prompts=True)


def print_call(call: dict[str, Any], prompts: bool) -> None:
    """One recorded LLM call: its role and latency, the prompt messages when asked, and the reply."""
    console.rule(f"LLM call ({call['role']}) · {call['completion']['latency_s']:.2f}s")
    if prompts:
        for message in call["messages"]:
            console.print(f"[bold]{message['role']}:[/] {message['content']}", markup=False, highlight=False)
    console.print(f"[bold]reply:[/] {call['completion']['text']!r}", highlight=False)


memory_app = typer.Typer(help="Inspect, fork and compare the memory snapshots of a run.", no_args_is_help=True)
app.add_typer(memory_app, name="memory")


@memory_app.command("fork")
@friendly
def memory_fork(
    run_dir: Path = typer.Argument(..., help="The run whose memory to fork."),
    game: int = typer.Option(..., help="Fork the memory as it was after this game."),
    out: Path = typer.Option(..., help="Folder for the fork; pass it to `ttlearn run --memory-from`."),
) -> None:
    """Copy the memory after game N into a new folder, to continue from it with `run --memory-from` (new seed)."""
    snapshot = Run.open(run_dir).snapshot(game)
    (out / "snapshots").mkdir(parents=True, exist_ok=False)
    (out / "snapshots" / f"game_{game:04d}.json").write_text(json.dumps(snapshot, ensure_ascii=False))
    (out / "fork.json").write_text(json.dumps({"source": str(run_dir), "game": game, "hash": snapshot["hash"]}))
    console.print(f"forked memory of {run_dir} after game {game} (hash {snapshot['hash'][:12]}) → {out}")


@memory_app.command("diff")
@friendly
def memory_diff(
    run_dir: Path = typer.Argument(..., help="A run directory."),
    a: int = typer.Option(..., "--from", help="Earlier game."),
    b: int = typer.Option(..., "--to", help="Later game."),
) -> None:
    """Show what changed in the memory between two games (a unified diff of the snapshots)."""
    run = Run.open(run_dir)
    before, after = (json.dumps(run.snapshot(g)["state"], indent=1, sort_keys=True).splitlines() for g in (a, b))
    lines = list(difflib.unified_diff(before, after, f"after game {a}", f"after game {b}", lineterm=""))
    console.print("\n".join(lines) if lines else "no change", markup=False, highlight=False)


def _memrl_store(run_dir: Path) -> tuple[Any, str, str]:
    """The MemRL store of a run, its namespace and the run id the session gave it."""
    from ttlearn.memory.store import MemoryStore

    run = Run.open(run_dir, repair=False)
    options = run.config.memory_options
    path = Path(options.get("store") or run.path / "memrl.sqlite")
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} has no MemRL store ({path}); was it run with --memory memrl/memp/rag?")
    return MemoryStore(path), options.get("namespace", "default"), run.path.name


@memory_app.command("inspect")
@friendly
def memory_inspect(
    run_dir: Path = typer.Argument(..., help="A run made with a MemRL-family memory."),
    limit: int = typer.Option(20, help="How many memories to show."),
) -> None:
    """List the memories of a MemRL store, newest first, with Q-value, visits and last reward."""
    store, namespace, _ = _memrl_store(run_dir)
    table = Table(title=f"MemRL store · namespace {namespace}")
    for column in ("id", "episode", "Q", "visits", "last r", "intent", "experience"):
        table.add_column(column, overflow="fold")
    for item in store.inspect(namespace, limit=limit):
        last = "" if item.last_reward is None else f"{item.last_reward:+g}"
        table.add_row(
            str(item.id),
            str(item.episode),
            f"{item.q_value:+.3f}",
            str(item.visits),
            last,
            item.intent[:60],
            item.experience[:120],
        )
    console.print(table)


@memory_app.command("explain")
@friendly
def memory_explain(
    run_dir: Path = typer.Argument(..., help="A run made with a MemRL-family memory."),
    game: int = typer.Option(..., help="The game whose retrievals to show."),
) -> None:
    """Show which memories were retrieved for a game, with similarity, Q and the combined score."""
    store, namespace, run_id = _memrl_store(run_dir)
    records = store.retrievals(namespace, run_id=run_id, episode=game)
    if not records:
        console.print(f"no retrieval was recorded for game {game}")
    for number, record in enumerate(records, start=1):
        console.rule(f"retrieval {number} of game {game}{' · ε-exploration' if record.explored else ''}")
        console.print(f"query: {record.query}", markup=False, highlight=False)
        for cand in record.candidates:
            mark = "→" if cand["id"] in record.chosen else " "
            console.print(
                f"{mark} #{cand['id']}  sim {cand['sim']:.3f}  Q {cand['q']:+.3f}  score {cand['score']:+.3f}",
                markup=False,
                highlight=False,
            )


@memory_app.command("reembed")
@friendly
def memory_reembed(
    store: Path = typer.Argument(..., help="A MemRL SQLite store."),
    namespace: str = typer.Option("default", help="Namespace to migrate."),
    embedder: str = typer.Option(..., help="The new embedder, e.g. minilm or hash."),
) -> None:
    """Re-embed every intent key of a namespace with another embedder (the explicit migration)."""
    from ttlearn.memory.embed import make_embedder
    from ttlearn.memory.store import MemoryStore

    if not store.exists():
        raise FileNotFoundError(f"no store at {store}")
    count = MemoryStore(store).reembed(namespace, make_embedder(embedder))
    console.print(f"re-embedded {count} intent keys of {namespace!r} with {embedder}")


def _csv(text: Optional[str]) -> Optional[list[str]]:
    return None if text is None else [part.strip() for part in text.split(",") if part.strip()]


def _seeds(text: Optional[str]) -> int | list[int] | None:
    """'5' → 5 seeds (0..4); '3,7,9' → exactly those."""
    if text is None:
        return None
    try:
        return int(text) if "," not in text else [int(s) for s in _csv(text) or []]
    except ValueError:
        raise ValueError(f"--seeds takes a count or a comma-separated list of integers, got {text!r}") from None


@app.command()
@friendly
def arena(
    config_file: Optional[Path] = typer.Argument(None, help="A YAML arena config; the options below override it."),
    env: Optional[str] = typer.Option(None, help="Environment: rps, holdem, sokoban, minesweeper."),
    memories: Optional[str] = typer.Option(None, help="Comma-separated memory methods, e.g. none,history,reflexion."),
    opponents: Optional[str] = typer.Option(None, help="Comma-separated opponents, e.g. cycle3,beat-last,probe."),
    seeds: Optional[str] = typer.Option(None, help="Sequences per opponent: a count (5 → seeds 0..4) or a list."),
    games: Optional[int] = typer.Option(None, min=1, help="Games per sequence (default 8)."),
    rounds: Optional[int] = typer.Option(None, help="RPS: rounds per game."),
    hands: Optional[int] = typer.Option(None, help="Hold'em: hands per game."),
    env_opt: list[str] = typer.Option([], "--env-opt", "-e", help="Any other environment option, KEY=VALUE."),
    llm: Optional[str] = typer.Option(None, help=f"Player of every method (default {DEFAULT_LLM})."),
    writer: Optional[str] = typer.Option(None, help="LLM that writes the memories (default: the player's LLM)."),
    temperature: Optional[float] = typer.Option(None, min=0.0, help="Player sampling temperature (default 0)."),
    out: Optional[Path] = typer.Option(None, help="Arena folder (default runs/arena-ENV, or runs/arena-CONFIG)."),
    workers: Optional[int] = typer.Option(None, min=1, help="Parallel worker processes (default min(2, CPUs))."),
    ray: bool = typer.Option(False, "--ray", help="Run the plan as Ray tasks (local Ray, or $RAY_ADDRESS)."),
    ray_address: Optional[str] = typer.Option(None, help="With --ray: the Ray cluster to use, e.g. ray://HOST:10001."),
) -> None:
    """Compare memory methods: every method plays the same (opponent, seed) sequences; rate them by Elo.

    Run the same command again to resume an interrupted arena: finished sequences are not replayed.
    """
    from ttlearn.eval import arena as arena_mod
    from ttlearn.eval import report as report_mod

    env_options = parse_options(env_opt, "--env-opt")
    env_options.update({k: v for k, v in {"rounds": rounds, "hands": hands}.items() if v is not None})
    config = arena_mod.load_arena_config(
        config_file,
        env=env,
        memories=_csv(memories),
        opponents=_csv(opponents),
        seeds=_seeds(seeds),
        games=games,
        player=llm,
        writer=writer,
        temperature=temperature,
        env_options=env_options,
    )
    out = out or Path("runs") / f"arena-{config_file.stem if config_file else config.env}"
    todo, finished = arena_mod.prepare(config, out)
    if finished:
        console.print(
            f"{len(finished)} of {len(todo) + len(finished)} runs already finished in {out}; playing the rest"
        )
    start = time.perf_counter()
    try:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[last]}"),
            console=console,
            transient=False,
        ) as progress:
            bar = progress.add_task(
                f"arena {config.env}", total=len(todo) + len(finished), completed=len(finished), last=""
            )
            for item, outcome in arena_mod.execute(todo, workers=workers, ray=ray, ray_address=ray_address):
                progress.update(bar, advance=1, last=f"{item.name}: mean {outcome['mean_score']:+.2f}")
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted; finished runs are kept. Resume with the same command (--out {out}).[/]")
        raise typer.Exit(130) from None
    except arena_mod.RunFailed as exc:
        console.print(f"[bold red]error:[/] {exc}\nfinished runs are kept; fix the cause and rerun to resume.")
        raise typer.Exit(1) from None
    console.print(f"played {len(todo)} runs in {time.perf_counter() - start:.1f}s")
    _print_report(report_mod.write_report(out), out)


def _print_report(report: dict[str, Any], out: Path) -> None:
    from ttlearn.eval.report import REPORT_HTML, elo_table

    console.print(elo_table(report))
    console.print(f"report: [bold]{out / REPORT_HTML}[/] (and report.json)")


@app.command()
@friendly
def report(out_dir: Path = typer.Argument(..., help="An arena folder (holding runs/).")) -> None:
    """Rebuild an arena's report.html and report.json from its run records alone (offline, deterministic)."""
    from ttlearn.eval.report import write_report

    _print_report(write_report(out_dir), out_dir)


train_app = typer.Typer(
    help="Train memory writers and agent policies by RL (needs the `train` extra).", no_args_is_help=True
)
app.add_typer(train_app, name="train")


def _train_progress(total: int) -> tuple[Progress, Callable[[int, dict[str, Any]], None]]:
    progress = Progress(
        TextColumn("[bold]training"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
        console=console,
    )
    bar = progress.add_task("train", total=total, last="")

    def advance(step: int, metrics: dict[str, Any]) -> None:
        shown = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and k in SHOWN_METRICS}
        progress.update(bar, completed=step, last=" ".join(f"{k} {v:.3g}" for k, v in shown.items()))

    return progress, advance


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
    out: Path = typer.Option(..., help="Output folder: checkpoints step_k/, final/, metrics.jsonl (resumable)."),
) -> None:
    """LaMer: cross-episode meta-RL of the agent policy over multi-attempt trials (LoRA on the embedded model)."""
    from ttlearn.train.lamer import LamerTrainConfig, train_lamer

    config = LamerTrainConfig(
        env=env,
        env_options=parse_options(env_opt, "--env-opt"),
        out=str(out),
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
    progress, advance = _train_progress(steps)
    with progress:
        train_lamer(config, progress=advance)
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
    out: Path = typer.Option(..., help="Output folder: step_k/, final/, metrics.jsonl (resumable)."),
) -> None:
    """MemoPilot: train the memory writer by multi-turn GRPO with turn-level, context-independent advantages."""
    from ttlearn.train.memopilot import MemoPilotTrainConfig, train_memopilot

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
    progress, advance = _train_progress(steps)
    with progress:
        train_memopilot(config, progress=advance)
    console.print(
        f"final writer: [bold]{out / 'final'}[/] (use: ttlearn run rps --memory memopilot --writer {out / 'final'})"
    )


@app.command("list")
def list_parts() -> None:
    """List the registered environments, memory methods, LLM back ends and scripted players."""
    from ttlearn.agent import PLAYERS
    from ttlearn.envs.base import ENVS
    from ttlearn.llm.base import LLMS
    from ttlearn.memory.base import MEMORIES

    for title, registry in (
        ("environments", ENVS),
        ("memories", MEMORIES),
        ("llms", LLMS),
        ("scripted players", PLAYERS),
    ):
        console.print(f"[bold]{title}:[/] {', '.join(registry.names())}")


@app.command("serve")
@friendly
def serve_command(
    store: Path = typer.Option(..., help="The MemRL SQLite store to serve (created if missing)."),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on; keep loopback unless behind a TLS proxy."),
    port: int = typer.Option(8765, min=1, max=65535, help="Port to listen on."),
    admin_key_file: Optional[Path] = typer.Option(
        None, help="File whose first line is the admin key (default: the TTLEARN_ADMIN_KEY environment variable)."
    ),
    max_body: int = typer.Option(DEFAULT_MAX_BODY, min=1, help="Largest request body in bytes; larger ones get 413."),
    rate: float = typer.Option(DEFAULT_RATE, min=0, help="Requests per second per key (token bucket; 0 = no limit)."),
    burst: float = typer.Option(DEFAULT_BURST, min=1, help="Requests a key may send at once before the rate applies."),
) -> None:
    """Serve a MemRL store over HTTP to deployed agents: a key per namespace, API docs at /docs (needs the `serve`
    extra). Stops cleanly on Ctrl-C or SIGTERM."""
    try:
        from ttlearn.serve.app import serve
        from ttlearn.serve.auth import read_admin_key
    except ImportError as exc:
        raise ValueError(f"ttlearn serve needs the `serve` extra ({exc}): pip install 'ttlearn[serve]'") from None
    admin_key = read_admin_key(admin_key_file)
    serve(store, host=host, port=port, admin_key=admin_key, max_body=max_body, rate=rate, burst=burst)


def main() -> None:  # pragma: no cover - console entry for `python -m ttlearn`
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
