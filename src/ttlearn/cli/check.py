"""`ttlearn check ENV`: run the environment contract (`envs.check.check_env`) on a registered or plug-in environment
and report every rule — passed, skipped, or the one that failed — with the time taken, the size of its action lists,
and the shortlist the LLM player would show on its first observation."""

from __future__ import annotations

from collections import Counter
from typing import Any

import typer

from ttlearn.cli.common import console, load_plugin_flags, parse_options
from ttlearn.envs.base import Env, make_env
from ttlearn.envs.check import ContractError, check_env
from ttlearn.players.llm import MAX_OPTIONS, shortlist

PREVIEW = 12
"""How many of the shortlist's actions the report names."""


def check(
    env: str = typer.Argument(..., help="Environment (see `ttlearn list`), registered or from a --plugin module."),
    env_opt: list[str] = typer.Option([], "--env-opt", "-e", help="An environment option, KEY=VALUE."),
    plugin: list[str] = typer.Option(
        [], "--plugin", metavar="MODULE", help="Import a plug-in module (a module name or a .py file); repeatable."
    ),
    seeds: int = typer.Option(3, min=1, help="Instances to play: seeds 0 … N−1."),
    restarts: int = typer.Option(2, min=1, help="restart()s of each instance, each replayed and compared."),
    oracle: bool = typer.Option(False, "--oracle", help="Play the oracle's moves; it must solve every instance."),
    max_options: int = typer.Option(MAX_OPTIONS, "--max-options", min=1, help="Shortlist size to preview."),
) -> None:
    """Check an environment against the contract the runners rely on, over several seeds and restarts (catching
    undeclared non-determinism), and print what passed, what was skipped and what failed."""
    load_plugin_flags(plugin)
    options = {"seed": 0, **parse_options(env_opt, "--env-opt")}
    built = make_env(env, **options)
    try:
        shown = ", ".join(f"{k}={v}" for k, v in options.items())
        console.print(f"checking {env} ({shown}) on seeds 0–{seeds - 1}, {restarts} restart(s) each", highlight=False)
        try:
            report = check_env(built, seeds=range(seeds), restarts=restarts, use_oracle=oracle)
        except ContractError as error:
            print_rules(error.passed, [], str(error))
            raise typer.Exit(1) from None
        print_rules(report["passed"], report["skipped"], None, report["seconds"])
        print_actions(built, report, max_options)
    finally:
        built.close()


def print_rules(passed: list[str], skipped: list[str], failed: str | None, seconds: float | None = None) -> None:
    """One line per rule, then the counts (and the time, when the check finished)."""
    for rule in passed:
        console.print(f"  [green]passed[/]  {rule}", highlight=False)
    for rule in skipped:
        console.print(f"  [yellow]skipped[/] {rule} (declared deterministic = False)", highlight=False)
    if failed is not None:
        console.print(f"  [bold red]failed[/]  {failed}", highlight=False)
    took = f" in {seconds:.2f} s" if seconds is not None else ""
    console.print(
        f"{len(passed)} passed · {len(skipped)} skipped · {int(failed is not None)} failed{took}", highlight=False
    )


def print_actions(env: Env, report: dict[str, Any], max_options: int) -> None:
    """How many actions a step offered, and what the LLM player's shortlist shows on the first seed's first
    observation (the environment's ranked actions first, then those most like the observation)."""
    partial = " (a partial list: step() takes other commands too)" if report["partial_actions"] else ""
    console.print(f"legal actions: up to {report['most_actions']} a step{partial}", highlight=False)
    obs = env.reset(report["seeds"][0])
    if len(obs.legal_actions) <= max_options and all(env.action_tier(a) is not None for a in obs.legal_actions):
        return
    options = shortlist(obs.legal_actions, obs.text, max_options, env.action_tier)
    hidden = sum(env.action_tier(a) is None for a in obs.legal_actions)
    tiers = Counter(env.action_tier(a) for a in options)
    by_tier = ", ".join(f"tier {tier}: {count}" for tier, count in sorted(tiers.items()))
    first = ", ".join(options[:PREVIEW]) + (", …" if len(options) > PREVIEW else "")
    console.print(
        f"the LLM player's shortlist on seed {report['seeds'][0]}'s first observation: {len(options)} of "
        f"{len(obs.legal_actions)} actions ({by_tier}; {hidden} hidden by action_tier): {first}",
        highlight=False,
    )
