"""The end-of-run summary of a session, computed from its recorded episodes alone (so `show` and `resume` agree with
`run`)."""

from __future__ import annotations

from typing import Any

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
