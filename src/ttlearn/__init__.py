"""ttlearn: test-time learning for LLM agents.

Rooms: `envs` (what is played), `llm` (who answers), `memory` (what carries over between episodes), `players`
(who decides), `rollout` (where they meet: the episode loop, the unit player, the driver, the arena), `runs` (what is
recorded), `train` (RL over memories and policies), `eval` (what it all means), `serve` (a memory over HTTP),
`cli` (the commands).

From Python, `ttlearn.run(RunConfig(env="sokoban", memory="lamer"), "runs/demo")` plays what `ttlearn run sokoban
--memory lamer --out runs/demo` plays.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ttlearn.version import __version__

if TYPE_CHECKING:
    from ttlearn.eval.summary import RunSummary
    from ttlearn.runs import RunConfig

__all__ = ["__version__", "run"]


def run(config: RunConfig | None, out: str | Path, **options: Any) -> RunSummary:
    """Play `config` into the run directory `out` — created, or resumed where it already holds this config (None:
    resume it with its own) — and return its summary: `ttlearn run` without the progress bar. `options` are
    `rollout.run.play`'s: `concurrency`, `progress` (called with done, total and each finished unit's record),
    `llm_factory` (build the back ends yourself), `replay`, `pool`."""
    from ttlearn.rollout.run import play, prepare

    with prepare(Path(out), config, options.get("concurrency") or 1) as opened:
        return play(opened, **options)
