"""A session: one sequence of games against fixed conditions, the memory carried from each game to the next.

For each game g: reset the environment with the game's own seed, let the player act with the memory's context until
the episode ends, let the memory observe the episode, then make the game durable (snapshot + events). Every seed is
derived from (run seed, game, step), so a resumed run plays exactly the games an uninterrupted one would have played.
When the games are independent (memory `none`, a player that does not learn) `concurrency` plays several at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ttlearn.llm.base import LLM, make_llm
from ttlearn.llm.cache import ReplayBook
from ttlearn.memory.base import MEMORIES
from ttlearn.players.base import PLAYERS
from ttlearn.rollout.inflight import play_in_order
from ttlearn.rollout.loop import play_sequence_game
from ttlearn.rollout.parts import SCRIPTED, LLMPool, Parts, build_parts, validate_parts
from ttlearn.runs import Run, RunConfig, latest_state
from ttlearn.types import Episode, Step


def games_are_independent(cfg: RunConfig) -> bool:
    """True when no game can influence another: nothing carries over in the memory or the player."""
    learns = cfg.player.startswith(SCRIPTED) and PLAYERS.get(cfg.player[len(SCRIPTED) :]).learns
    return not MEMORIES.get(cfg.memory).carries_over and not learns


def validate(cfg: RunConfig, concurrency: int = 1) -> None:
    """Check every name and option of a config before any model loads or any directory is written."""
    with validate_parts(cfg):
        pass
    if MEMORIES.get(cfg.memory).needs_trials:
        raise ValueError(f"memory {cfg.memory!r} reflects between attempts at one task: add --tasks K (trial mode)")
    if cfg.memory_from and not Path(cfg.memory_from).exists():
        raise FileNotFoundError(f"--memory-from {cfg.memory_from} does not exist")
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if concurrency > 1 and not games_are_independent(cfg):
        raise ValueError(
            f"the games of one sequence depend on each other through memory {cfg.memory!r} (or a learning player), "
            "so they are played one at a time; --concurrency applies to memory none, to trial runs (--tasks) and to "
            "the arena"
        )


def play_game(parts: Parts, run_seed: int, index: int) -> tuple[Episode, dict[str, Any], list[dict[str, Any]]]:
    """Game `index` of the sequence seeded `run_seed`, then the memory's update; returns the episode (with its LLM
    accounting in `info`), the state to snapshot and the game's events."""
    start = time.perf_counter()
    parts.drain()
    steps = 0

    def record(step: Step, shown: str) -> None:
        nonlocal steps
        steps += 1
        parts.events.append({"type": "step", "step": steps, "memory": shown, **asdict(step)})

    episode = play_sequence_game(parts.env, parts.player, parts.memory.context, run_seed, index, record)
    parts.memory.observe(episode)
    events = parts.drain()
    calls = [e for e in events if e.get("type") == "call"]
    episode.info.update(
        wall_s=time.perf_counter() - start,
        llm_s=sum(c["wall_s"] for c in calls),
        llm_calls=len(calls),
        prompt_tokens=sum(c["completion"]["prompt_tokens"] for c in calls),
        completion_tokens=sum(c["completion"]["completion_tokens"] for c in calls),
    )
    return episode, {"memory": parts.memory.state(), "player": parts.player.state()}, events


@dataclass
class Session:
    """A run directory and the live parts that play its missing games (one `Parts` per game in flight)."""

    run: Run
    pool: LLMPool
    workers: list[Parts]

    def play(self, on_game: Callable[[Episode], None] | None = None) -> list[Episode]:
        """Play the games still missing from the run; returns all episodes of the run."""

        def finish(result: tuple[Episode, dict[str, Any], list[dict[str, Any]]]) -> None:
            episode, state, events = result
            self.run.finish_game(episode, state, events)
            if on_game is not None:
                on_game(episode)

        seed = self.run.config.seed
        jobs = range(len(self.run.episodes) + 1, self.run.config.games + 1)
        play_in_order(jobs, self.workers, lambda parts, index: play_game(parts, seed, index), finish)
        return self.run.episodes

    def close(self) -> None:
        for parts in self.workers:
            parts.env.close()
        self.pool.close()


def open_session(
    run: Run,
    replay: ReplayBook | None = None,
    llm_factory: Callable[[str], LLM] = make_llm,
    concurrency: int = 1,
    pool: LLMPool | None = None,
) -> Session:
    """Turn a run's config into live parts; on a reopened run, restore the state after its last finished game.
    `pool`: back ends already loaded (shared with other sessions in flight); by default the session loads its own."""
    cfg = run.config
    validate(cfg, concurrency)
    pool = pool or LLMPool(llm_factory, replay)
    workers = [build_parts(cfg, pool, run_dir=run.path) for _ in range(concurrency)]
    state = None
    if run.episodes:
        state = run.snapshot(len(run.episodes))["state"]
    elif cfg.memory_from:
        state = latest_state(Path(cfg.memory_from))
    if state is not None:
        for parts in workers:
            parts.memory.load(state["memory"])
            parts.player.load(state.get("player", {}))
    return Session(run, pool, workers)
