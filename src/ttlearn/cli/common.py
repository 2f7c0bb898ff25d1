"""What every command shares: the console, one-red-line errors, KEY=VALUE options, the progress bar, and printing
the summaries and records that `run`, `resume` and `show` display."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sqlite3
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console, ConsoleOptions, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from ttlearn.errors import UserError
from ttlearn.eval.paired import Comparison, success_table
from ttlearn.eval.summary import RunSummary
from ttlearn.llm.base import LLMError
from ttlearn.memory.base import MEMORY_KEY_ENV, STORE_PASSWORD_ENV, url_password, without_password
from ttlearn.registry import PluginShadowWarning, UnknownNameError, load_plugins
from ttlearn.types import REJECTED, Step
from ttlearn.untrusted import printable


class EscapingConsole(Console):
    """A console whose every printed character is shown, not acted on: the text of each segment it renders has its
    control characters escaped (`untrusted.printable`), while the style and control codes rich adds itself (colours,
    the progress bar's cursor moves) are untouched. A run directory, a store or a model's reply may hold an OSC 52
    (clipboard write), an OSC 8 (hidden link) or a CSI 2J: they print as `\\x1b]52;…`. Strings are escaped before
    rich reads them too, so the few controls it drops (BEL, backspace, CR) are shown as well."""

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(printable(text), **options)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None):  # type: ignore[override]
        for segment in super().render(renderable, options):
            yield segment if segment.control else Segment(printable(segment.text), segment.style)


console = EscapingConsole(markup=False)
"""Markup off: every string printed — a path, a config value, a model's reply, an error naming a file — is literal
text, so a `[/]` or `[link=…]` read from a run directory is just text; and control characters are escaped
(`EscapingConsole`). Styles come from `styled` (`Text`)."""
USER_ERRORS = (
    UserError,
    ValueError,
    LLMError,
    FileNotFoundError,
    FileExistsError,
    UnknownNameError,
    ValidationError,
    ImportError,
)
"""Errors a user can cause or fix (bad input, a missing file, server or optional dependency); one red line each.
The domain errors of each cause are `ttlearn.errors`."""


def friendly(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the errors a user can cause into one red line and exit code 2, instead of a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except USER_ERRORS as exc:
            console.print(styled("error:", "bold red", f" {exc}"), highlight=False)
            raise typer.Exit(2) from None

    return wrapper


def print_plain(text: str) -> None:
    """Long plain text (a diff of two memories) written as it is, control characters escaped, without rich's layout:
    rich lays out a line in about 0.1 ms, and a diff may have a million lines."""
    console.file.write(printable(text) + "\n")
    console.file.flush()


def styled(*parts: str) -> Text:
    """Text from (text, style) pairs given flat: `styled("error:", "bold red", " the rest")`; never markup."""
    pairs = [(parts[i], parts[i + 1] if i + 1 < len(parts) else "") for i in range(0, len(parts), 2)]
    return Text.assemble(*pairs)


MALFORMED = (KeyError, TypeError, IndexError, AttributeError, UnicodeDecodeError, RecursionError, sqlite3.Error)
"""What a record of the wrong shape raises deep in a reader: for commands that read a run directory, a file that
was edited or crafted, not a bug to show a traceback for."""


def reads_runs(command: Callable[..., Any]) -> Callable[..., Any]:
    """For commands that read run directories (untrusted input): a malformed record is one line, not a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except UnknownNameError:
            raise  # a KeyError that already is one clear line
        except MALFORMED as exc:
            raise ValueError(
                f"a malformed record ({type(exc).__name__}: {exc}); was the directory edited or written by another "
                "program?"
            ) from None

    return wrapper


@contextlib.contextmanager
def stops_at_once() -> Iterator[None]:
    """SIGTERM ends the command as SIGINT does, with an exception in the main thread: what it started (a sandboxed
    query, `sandbox.python.run_python`) is killed on the way out instead of outliving it."""

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"stopped by signal {signum}")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def load_plugin_flags(specs: list[str]) -> None:
    """Import the `--plugin` modules, printing a yellow line for each name one takes over (`PluginShadowWarning`)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PluginShadowWarning)
        load_plugins(specs)
    for warning in caught:
        console.print(styled("warning:", "yellow", f" {warning.message}"), highlight=False)


def parse_options(pairs: list[str], flag: str) -> dict[str, Any]:
    """`KEY=VALUE` pairs → a dict, values read as YAML scalars (so 3 is an int and true a bool)."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} takes KEY=VALUE, got {pair!r}")
        options[key.replace("-", "_")] = yaml.safe_load(value)
    return options


def keep_key_out(options: dict[str, Any]) -> dict[str, Any]:
    """`-m key=KEY` is a credential: it becomes this process's TTLEARN_MEMORY_KEY and leaves the options, which a
    run records in its directory; so does the password of `-m store=postgresql://user:PASSWORD@…` (PGPASSWORD, as
    libpq reads it), the URL staying without it."""
    if "key" in options:
        os.environ[MEMORY_KEY_ENV] = str(options.pop("key"))
    if isinstance(options.get("store"), str):
        options["store"] = keep_password_out(options["store"])
    return options


def keep_password_out(location: str) -> str:
    """A store location named on the command line, as it may be recorded and shown: a database URL's password
    becomes this process's PGPASSWORD (libpq reads it there) and the URL is returned without it."""
    password = url_password(location)
    if password is not None:
        os.environ[STORE_PASSWORD_ENV] = password
    return without_password(location)


def csv(text: str | None) -> list[str] | None:
    return None if text is None else [part.strip() for part in text.split(",") if part.strip()]


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}", markup=False),
        console=console,
    )


@contextlib.contextmanager
def progress_bar(description: str, total: int, completed: int = 0) -> Iterator[Callable[..., None]]:
    """A bar with a done/total count, elapsed time and a free-text last event; yields `update(completed=…,
    advance=…, last=…)`."""
    with _progress() as progress:
        bar = progress.add_task(description, total=total, completed=completed, last="")
        yield functools.partial(progress.update, bar)


@contextlib.contextmanager
def stage_bars() -> Iterator[Callable[[str, int, int], None]]:
    """One bar per stage of a long job (download, convert, verify); yields `report(stage, done, total)`, the
    progress callback the data and model builders take."""
    with _progress() as progress:
        bars: dict[str, Any] = {}

        def report(stage: str, done: int, total: int) -> None:
            if stage not in bars:
                bars[stage] = progress.add_task(stage, total=total, last="")
            progress.update(bars[stage], completed=done)

        yield report


UNIT_ROWS_SHOWN = 30
"""A run of at most this many units prints one table row per unit; a longer one its totals only."""


def print_summary(summary: RunSummary) -> None:
    """Any run's summary: its units (a table when they are few), its figures and the sections it holds, how much of
    the run is done, and where it lives."""
    if summary.units:
        if len(summary.units) <= UNIT_ROWS_SHOWN:
            print_units(summary)
        console.print(format_run_summary(summary), markup=False, highlight=False)
    console.print(f"{summary.done} of {summary.total} units finished")
    console.print(styled("run directory: ", "", summary.run_dir, "bold"))


def print_units(summary: RunSummary) -> None:
    """One row per unit: score, cumulative mean score, solved, steps, invalid steps and cost."""
    config = summary.config
    table = Table(title=f"{config.env} · memory {config.memory} · {config.player}")
    for column in ("unit", "score", "cumulative", "solved", "steps", "invalid", "tokens", "LLM s", "wall s"):
        table.add_column(column, justify="right")
    for u in summary.units:
        table.add_row(
            str(u.unit),
            f"{u.score:+g}",
            f"{u.cumulative:+.2f}",
            {True: "yes", False: "no", None: "–"}[u.solved],
            str(u.steps),
            str(u.invalid),
            str(u.tokens),
            f"{u.llm_s:.1f}",
            f"{u.wall_s:.1f}",
        )
    console.print(table)


def progress_line(record: dict[str, Any]) -> str:
    """The progress bar's note on a finished unit: its score, and whether and when it was solved."""
    solved = record["first_success"]
    return f"unit {record['index']}: {record['score']:+g}, {'solved at ' + str(solved) if solved else 'unsolved'}"


def print_call(call: dict[str, Any], prompts: bool) -> None:
    """One recorded LLM call: its role and latency, the prompt messages when asked, and the reply. Everything read
    from the record is printed literally (`Text`, never markup): a model's `[/]` or `[link=...]` is just text."""
    console.rule(Text(f"LLM call ({call['role']}) · {call['completion']['latency_s']:.2f}s"))
    if prompts:
        for message in call["messages"]:
            console.print(Text.assemble((f"{message['role']}:", "bold"), f" {message['content']}"), highlight=False)
    console.print(Text.assemble(("reply:", "bold"), f" {call['completion']['text']!r}"), highlight=False)


def format_run_summary(summary: RunSummary) -> str:
    """A run's figures and success@k (and pass@k) as plain text, then the sections the summary holds."""
    config = summary.config
    options = "".join(f" {k}={v}" for k, v in config.memory_options.items())
    memory = f"{config.memory}{f' ({options.strip()})' if options else ''}"
    epochs = len(summary.protocol.epoch_success) if summary.protocol else 1  # those played so far
    count = f"{summary.tasks} units" if epochs == 1 else f"{summary.tasks // epochs} units × {epochs} epochs"
    lines = [f"{config.env} · memory {memory} · {config.player} · {count}"]
    lines.append(
        f"mean score {summary.mean_score:+.2f} · {summary.tokens} tokens · LLM {summary.llm_s:.1f}s (every arm)"
        f" · units played in {summary.played_s:.1f}s · ttlearn {config.version}"
    )
    if summary.success_at_k is not None and summary.success_at_k_ci95 is not None:
        head = f"{'k':<3}{'success@k':<11}{'95% CI':<15}" + ("pass@k" if summary.pass_at_k else "")
        lines.append(head.rstrip() + ("   (all epochs)" if epochs > 1 else ""))
        for k, (value, (low, high)) in enumerate(zip(summary.success_at_k, summary.success_at_k_ci95), start=1):
            extra = f"{summary.pass_at_k[k - 1]:.3f}" if summary.pass_at_k else ""
            lines.append(f"{k:<3}{value:<11.3f}{f'{low:.3f}–{high:.3f}':<15}{extra}".rstrip())
    invalid = summary.invalid.text() if summary.invalid else "–"
    lines.append(
        f"trajectory entropy {summary.trajectory_entropy:.3f} bits · invalid {invalid}"
        f" · {summary.wall_s_per_unit:.1f} s/unit"
    )
    for section in summary.sections():
        lines.extend(section.lines(summary))
    if summary.instances:
        lines.append("instances: " + json.dumps(summary.instances))
    if summary.rejudged:
        lines.append(
            f"verdicts: judged again with {summary.rejudged} from the recorded replies (`ttlearn rejudge`); the "
            "memory learned from the verdicts it was played with"
        )
    return "\n".join(lines)


def format_unit(record: dict[str, Any]) -> str:
    """One finished unit as plain text: its instance facts, then each attempt's context, moves and outcome."""
    facts = f"(epoch {record['epoch']}, seed {record['seed']}) · {json.dumps(record['instance'])}"
    lines = [f"unit {record['index']} score {record['score']:+g} {facts}"]
    for number, attempt in enumerate(record["attempts"], start=1):
        outcome = "solved" if attempt["success"] else "unsolved"
        lines.append(f"attempt {number}: score {attempt['score']:+g}, {outcome}")
        context = attempt["info"].get("context", "")
        if context:
            lines.append("  saw: " + " ".join(context.split()))
        for step_number, step in enumerate(attempt["steps"], start=1):
            flag = "" if step["valid"] else f" (invalid: {invalid_reason(step)})"
            lines.append(f"  step {step_number}: {step['action'] or '(no move)'} → {step['reward']:+g}{flag}")
    return "\n".join(lines)


def invalid_reason(step: dict[str, Any]) -> str:
    """Why a recorded step is invalid, with the simulator's words where it rejected the command."""
    cause = Step(**step).invalid_cause
    rejected = step.get("info", {}).get("rejected")
    return f"{cause}: {' '.join(str(rejected).split())}" if cause == REJECTED and rejected else str(cause)


def format_comparison(comparison: Comparison, name_a: str, name_b: str) -> str:
    header = f"paired on {comparison.tasks} shared tasks · A = {name_a} · B = {name_b}"
    text = header + "\n" + success_table(comparison.rows, "A", "B")
    if comparison.scores is not None:
        text += "\n\nscore of attempt k (a task solved earlier keeps its solving attempt's)\n"
        lines = [f"{'k':<3}{'A':<10}{'B':<10}{'diff':<10}{'A higher':<10}{'B higher':<10}sign-flip p"]
        for row in comparison.scores:
            lines.append(
                f"{row.k:<3}{row.a:<+10.2f}{row.b:<+10.2f}{row.a - row.b:<+10.2f}"
                f"{row.a_higher:<10}{row.b_higher:<10}{row.p_value:.3g}"
            )
        text += "\n".join(lines)
    return text
