"""The one builder from a config to live parts: environment, player, memory, and the LLMs behind them.

Runs, the arena and the trainers all build through here, so every run validates the same way, picks
the memory writer the same way and binds every memory to its run directory. LLMs are loaded once per spec into an
`LLMPool` and shared by all parts built from it (N episodes in flight share one back end); each `Parts` records its
own calls, so concurrent episodes never mix their records.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttlearn.envs.base import Env, make_env
from ttlearn.llm.base import DEFAULT_LLM, LLM, LLMS, make_llm, split_spec
from ttlearn.llm.cache import RecordingLLM, ReplayBook
from ttlearn.memory.base import MEMORIES, Memory, make_memory
from ttlearn.players.base import PLAYERS, Player
from ttlearn.players.llm import LLMPlayer
from ttlearn.players.turn import TurnPlayer
from ttlearn.runs import PartsConfig, RunDir

SCRIPTED = "scripted:"


@contextmanager
def validate_parts(cfg: PartsConfig) -> Iterator[Env]:
    """Check the environment, memory and LLM specs of a config before any model loads; yields the environment it
    built for the check, and closes it after."""
    env = _checked_env(cfg)
    try:
        yield env
    finally:
        env.close()


def _checked_env(cfg: PartsConfig) -> Env:
    """The config's environment, once its memory, player and writer specs are known to name registered parts."""
    env = make_env(cfg.env, **{"seed": cfg.seed, **cfg.env_options})
    try:
        MEMORIES.check(cfg.memory, cfg.memory_options, reserved=("llm",))
        for spec in (cfg.player, cfg.writer):
            if spec is None:
                continue
            if spec.startswith(SCRIPTED):
                PLAYERS.get(spec[len(SCRIPTED) :]).check_fit(env)
            else:
                LLMS.get(split_spec(spec)[0])
    except BaseException:
        env.close()
        raise
    return env


def writer_spec(cfg: PartsConfig) -> str:
    """The memory writer's LLM: the configured one, else the player's LLM, else (scripted player) the default."""
    return cfg.writer or (DEFAULT_LLM if cfg.player.startswith(SCRIPTED) else cfg.player)


def resolve_moves_per_turn(requested: int | None, env: Env) -> int:
    """Scored decisions per turn: `requested`, or all the moves the environment allows in one turn."""
    moves = env.actions_per_turn if requested is None else requested
    if moves > env.actions_per_turn:
        raise ValueError(
            f"moves_per_turn={moves} exceeds the {env.actions_per_turn} action(s) per turn {env.name} allows"
        )
    return moves


class LLMPool:
    """Back ends loaded once per spec (lazily, thread-safe) and closed together."""

    def __init__(self, factory: Callable[[str], LLM] = make_llm, replay: ReplayBook | None = None) -> None:
        self.factory, self.replay = factory, replay
        self._loaded: dict[str, LLM] = {}
        self._lock = threading.Lock()

    def get(self, spec: str) -> LLM | None:
        """The shared back end of `spec`; None when replaying (answers come from the recording)."""
        if self.replay is not None:
            return None
        with self._lock:
            if spec not in self._loaded:
                self._loaded[spec] = self.factory(spec)
            return self._loaded[spec]

    def close(self) -> None:
        for llm in self._loaded.values():
            llm.close()
        self._loaded.clear()


@dataclass
class Parts:
    """One player's live parts. `events` collects the recorded LLM calls (and whatever the caller adds) of the
    episode in progress; the caller drains it."""

    env: Env
    player: Player
    memory: Memory
    moves_per_turn: int
    events: list[dict[str, Any]] = field(default_factory=list)

    def drain(self) -> list[dict[str, Any]]:
        events, self.events = self.events, []
        return events


def side_by_side(cfg: PartsConfig, pool: LLMPool) -> int:
    """How many independent units of `cfg` may be played together with every record unchanged: the fewest calls
    side by side (`LLM.side_by_side`) among the LLMs it plays with; 1 for scripted players and replays."""
    specs = [] if cfg.player.startswith(SCRIPTED) else [cfg.player]
    if MEMORIES.get(cfg.memory).needs_llm:
        specs.append(writer_spec(cfg))
    loaded = [llm for llm in map(pool.get, specs) if llm is not None]
    return min((llm.side_by_side for llm in loaded), default=1)


def make_player(
    spec: str,
    llm: Callable[[str], LLM],
    temperature: float,
    env: Env,
    moves_per_turn: int | None = None,
    *,
    retries: int = 2,
    free_text_tokens: int | None = None,
    max_options: int | None = None,
    note_at: str = "system",
) -> tuple[Player, int]:
    """`scripted:NAME` → a registered scripted player (it writes whole turns itself); anything else → the frozen LLM
    player on that spec (`retries`, `free_text_tokens`, `max_options` — None: its default —, `note_at`: see
    `LLMPlayer`), composing multi-move turns from scored single moves where it scores choices. Returns the player and
    the moves it makes per turn."""
    if spec.startswith(SCRIPTED):
        return PLAYERS.build(spec[len(SCRIPTED) :]), env.actions_per_turn
    backend = llm(spec)
    shown = {} if max_options is None else {"max_options": max_options}
    player: Player = LLMPlayer(
        backend,
        temperature=temperature,
        retries=retries,
        free_text_tokens=free_text_tokens,
        note_at=note_at,
        **shown,
    )
    if not backend.supports_choices or free_text_tokens is not None:
        return player, env.actions_per_turn
    moves = resolve_moves_per_turn(moves_per_turn, env)
    return (TurnPlayer(player, moves) if moves > 1 else player), moves


def build_parts(cfg: PartsConfig, pool: LLMPool, *, run_dir: Path | None = None) -> Parts:
    """Live parts for `cfg`, their LLMs drawn from `pool` and recorded into the parts' own `events`; the memory is
    bound to `run_dir` (where memories that keep files put them)."""
    env = _checked_env(cfg)

    def recorded(spec: str, role: str) -> LLM:
        return RecordingLLM(pool.get(spec), role, lambda event: parts.events.append(event), spec, pool.replay)

    player, moves = make_player(
        cfg.player,
        lambda spec: recorded(spec, "player"),
        cfg.temperature,
        env,
        cfg.moves_per_turn,
        retries=cfg.retries,
        free_text_tokens=cfg.free_text_tokens,
        max_options=cfg.max_options,
        note_at=cfg.note_at,
    )
    writer = recorded(writer_spec(cfg), "memory") if MEMORIES.get(cfg.memory).needs_llm else None
    memory = make_memory(cfg.memory, writer, **cfg.memory_options)
    if run_dir is not None:
        memory.bind_run(RunDir(run_dir).memrl_store, Path(run_dir).name)
    parts = Parts(env, player, memory, moves)  # `recorded` files calls into parts.events from here on
    return parts
