"""The end-of-run summary, computed from the recorded episodes alone (so `show` and `resume` agree with `run`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ttlearn.eval.metrics import cumulative_performance
from ttlearn.runs import Run


def summarize(run: Run, wall_s: float | None = None) -> dict[str, Any]:
    episodes = run.episodes
    scores = [e.score for e in episodes]
    steps = sum(len(e.steps) for e in episodes)
    invalid = sum(e.invalid_actions for e in episodes)
    played_s = sum(e.info.get("wall_s", 0.0) for e in episodes)
    llm_s = sum(e.info.get("llm_s", 0.0) for e in episodes)
    return {
        "run_dir": str(run.path),
        "config": run.config.model_dump(),
        "games": [
            {
                "game": e.index,
                "score": e.score,
                "cumulative": float(c),
                "success": e.success,
                "steps": len(e.steps),
                "invalid": e.invalid_actions,
                "tokens": e.info.get("prompt_tokens", 0) + e.info.get("completion_tokens", 0),
                "llm_s": e.info.get("llm_s", 0.0),
                "wall_s": e.info.get("wall_s", 0.0),
            }
            for e, c in zip(episodes, cumulative_performance(scores))
        ],
        "mean_score": sum(scores) / len(scores) if scores else 0.0,
        "invalid_rate": invalid / steps if steps else 0.0,
        "tokens": sum(e.info.get("prompt_tokens", 0) + e.info.get("completion_tokens", 0) for e in episodes),
        "llm_s": llm_s,
        "played_s": played_s,
        "wall_s": wall_s if wall_s is not None else played_s,
    }


def print_summary(console: Console, summary: dict[str, Any], path: Path) -> None:
    table = Table(
        title=f"{summary['config']['env']} · memory {summary['config']['memory']} · {summary['config']['player']}"
    )
    for column in ("game", "score", "cumulative", "steps", "invalid", "tokens", "LLM s", "wall s"):
        table.add_column(column, justify="right")
    for g in summary["games"]:
        table.add_row(
            str(g["game"]),
            f"{g['score']:+g}",
            f"{g['cumulative']:+.2f}",
            str(g["steps"]),
            str(g["invalid"]),
            str(g["tokens"]),
            f"{g['llm_s']:.1f}",
            f"{g['wall_s']:.1f}",
        )
    console.print(table)
    share = summary["llm_s"] / summary["played_s"] if summary["played_s"] else 0.0
    console.print(
        f"mean score {summary['mean_score']:+.2f} · invalid actions {summary['invalid_rate']:.1%} · "
        f"{summary['tokens']} tokens · LLM {summary['llm_s']:.1f}s of {summary['played_s']:.1f}s played ({share:.0%})"
    )
    console.print(f"run directory: [bold]{path}[/]")
