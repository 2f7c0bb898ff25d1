"""The `ttlearn` command line: one small module per command group, sharing `common` (errors, options, progress)."""

from __future__ import annotations

from typing import Any

import typer

from ttlearn.cli import arena, check, data, memory, play, proxy, results, serve, show, train
from ttlearn.cli.common import console, friendly, load_plugin_flags, reads_runs, styled

app = typer.Typer(
    help="Test-time learning for LLM agents: a frozen LLM plays a sequence of episodes and improves through a memory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def plugins(
    plugin: list[str] = typer.Option(
        [],
        "--plugin",
        metavar="MODULE",
        help="Import a plug-in module (a module name or a .py file) that registers environments, memories, LLM back "
        "ends or players; repeatable. Also $TTLEARN_PLUGINS (comma-separated). Runs record it for resume and replay "
        "(a module of the current folder as NAME@FOLDER, found again from anywhere).",
    ),
) -> None:
    """Test-time learning for LLM agents: a frozen LLM plays a sequence of episodes and improves through a memory."""
    load_plugin_flags(plugin)


app.callback()(friendly(plugins))
play.register(app)
app.command()(friendly(reads_runs(show.show)))
app.command()(friendly(reads_runs(show.rejudge)))
app.command()(friendly(serve.serve))
app.command()(friendly(proxy.proxy))
app.command()(friendly(reads_runs(results.results)))
app.command()(friendly(check.check))
arena.register(app)
app.add_typer(memory.memory_app, name="memory")
app.add_typer(train.train_app, name="train")
app.add_typer(data.data_app, name="data")


@app.command("list")
def list_parts() -> None:
    """List the registered environments, memory methods, LLM back ends, scripted players and trainers."""
    from ttlearn.envs.base import ENVS
    from ttlearn.llm.base import LLMS
    from ttlearn.memory.base import MEMORIES
    from ttlearn.players.base import PLAYERS
    from ttlearn.runs import default_player
    from ttlearn.train.base import TRAINERS

    envs = ", ".join(f"{name} ({default_player(name)})" for name in loadable(ENVS))
    console.print(styled("environments", "bold", f" (default player): {envs}"))
    memories = ", ".join(name + "*" * MEMORIES.get(name).learns_across_tasks for name in loadable(MEMORIES))
    console.print(styled("memories", "bold", f" (* learns across tasks: carried from unit to unit): {memories}"))
    for title, registry in (("llms", LLMS), ("scripted players", PLAYERS), ("trainers", TRAINERS)):
        console.print(styled(f"{title}:", "bold", f" {', '.join(registry.names())}"))
    for registry in (ENVS, MEMORIES, LLMS, PLAYERS, TRAINERS):
        for reason in registry.broken().values():
            console.print(styled("unavailable:", "yellow", f" {reason}"), highlight=False)


def loadable(registry: Any) -> list[str]:
    """The names of a registry whose plug-in loads (the others are listed as unavailable)."""
    broken = registry.broken()
    return [name for name in registry.names() if name not in broken]


def main() -> None:  # pragma: no cover - console entry for `python -m ttlearn`
    app()
