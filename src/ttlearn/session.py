"""The test-time-learning loop: the one place where environment, player, memory and run directory meet.

For each game g: reset the environment with the game's own seed, let the player act with the memory's context until
the episode ends, let the memory observe the episode, then make the game durable (snapshot + events). Every seed is
derived from (run seed, game, step), never from the order of earlier calls, so a resumed run plays exactly the games
an uninterrupted one would have played.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ttlearn.agent import PLAYERS, LLMPlayer, Player
from ttlearn.envs.base import Env, make_env
from ttlearn.llm.base import DEFAULT_LLM, LLM, LLMS, make_llm
from ttlearn.llm.cache import RecordingLLM, ReplayBook
from ttlearn.memory.base import MEMORIES, Memory, make_memory
from ttlearn.runs import PartsConfig, Run, RunConfig
from ttlearn.types import Episode, Step

SCRIPTED = "scripted:"


def derive_seed(*parts: Any) -> int:
    """A 31-bit seed from any tuple of values, stable across processes and Python versions."""
    digest = hashlib.sha256(json.dumps(parts).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@dataclass
class GameStats:
    """Accounting of the LLM calls of the game in progress, filled by the recording sink."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_s: float = 0.0

    def add(self, call: dict[str, Any]) -> None:
        self.calls += 1
        self.prompt_tokens += call["completion"]["prompt_tokens"]
        self.completion_tokens += call["completion"]["completion_tokens"]
        self.llm_s += call["wall_s"]


@dataclass
class Session:
    run: Run
    env: Env
    player: Player
    memory: Memory
    llms: list[LLM] = field(default_factory=list)
    stats: GameStats = field(default_factory=GameStats)

    def _sink(self, event: dict[str, Any]) -> None:
        self.stats.add(event)
        self.run.record(event)

    # ---- the loop ---------------------------------------------------------------------------------------------
    def play_game(self, index: int) -> Episode:
        self.stats = GameStats()
        start = time.perf_counter()

        def record(number: int, step: Step, context: str) -> None:
            self.run.record({"type": "step", "step": number, "memory": context, **step.__dict__})

        episode = play_episode(self.env, self.player, self.memory.context, self.run.config.seed, index, record)
        info = episode.info
        self.memory.observe(episode)
        info.update(
            wall_s=time.perf_counter() - start,
            llm_s=self.stats.llm_s,
            llm_calls=self.stats.calls,
            prompt_tokens=self.stats.prompt_tokens,
            completion_tokens=self.stats.completion_tokens,
        )
        self.run.finish_game(episode, {"memory": self.memory.state(), "player": self.player.state()})
        return episode

    def play(self, on_game: Callable[[Episode], None] | None = None) -> list[Episode]:
        """Play the games still missing from the run; returns all episodes of the run."""
        for index in range(len(self.run.episodes) + 1, self.run.config.games + 1):
            episode = self.play_game(index)
            if on_game is not None:
                on_game(episode)
        return self.run.episodes

    def close(self) -> None:
        for llm in self.llms:
            llm.close()


def play_episode(
    env: Env,
    player: Player,
    context: Callable[[str], str],
    run_seed: int,
    index: int,
    on_step: Callable[[int, Step, str], None] | None = None,
) -> Episode:
    """Episode `index` (1-based) of the sequence seeded `run_seed`; `context(env.task())` is the memory shown.

    Training plays its games through this same function, so a training sequence replays exactly as `ttlearn run
    --seed s` would play it with the same memories.
    """
    seed = derive_seed(run_seed, "game", index)
    obs = env.reset(seed)
    player.begin_episode(env)
    task = env.task()
    steps: list[Step] = []
    done = False
    while not done:
        shown = context(env.task())
        decision = player.act(env, obs, shown, seed=derive_seed(run_seed, "act", index, len(steps)))
        result = env.step(decision.action)
        steps.append(Step(obs.text, decision.action, result.reward, decision.valid, decision.raw, dict(result.info)))
        if on_step is not None:
            on_step(len(steps), steps[-1], shown)
        obs, done = result.observation, result.done
    player.end_episode(env, obs)
    info = {"rules": env.describe(), "transcript": env.transcript()}
    return Episode(index, seed, task, tuple(steps), env.score(), env.success(), info)


def make_player(spec: str, llm_factory: Callable[[str], LLM] = make_llm, temperature: float = 0.0) -> Player:
    """`scripted:NAME` → a registered scripted player; anything else → the frozen LLM player on that LLM spec."""
    if spec.startswith(SCRIPTED):
        return PLAYERS.build(spec[len(SCRIPTED) :])
    return LLMPlayer(llm_factory(spec), temperature=temperature)


# ---- building a session from its config --------------------------------------------------------------------------
def _latest_state(source: Path) -> dict[str, Any]:
    """The state of a snapshot file, or of the latest snapshot of a run directory."""
    source = Path(source)
    if source.is_dir():
        snaps = sorted((source / "snapshots").glob("game_*.json"))
        if not snaps:
            raise FileNotFoundError(f"{source} holds no memory snapshot")
        source = snaps[-1]
    return json.loads(source.read_text())["state"]


def validate_parts(cfg: PartsConfig) -> Env:
    """Check the environment, memory and LLM specs of a run or trial config; returns the built environment."""
    env = make_env(cfg.env, **{"seed": cfg.seed, **cfg.env_options})
    MEMORIES.check(cfg.memory, cfg.memory_options, reserved=("llm",))
    for spec in (cfg.player, cfg.writer):
        if spec is None:
            continue
        if spec.startswith(SCRIPTED):
            PLAYERS.get(spec[len(SCRIPTED) :])
        else:
            LLMS.get(spec.partition(":")[0])
    return env


def writer_spec(cfg: PartsConfig) -> str:
    """The memory writer's LLM: the configured one, else the player's LLM, else (scripted player) the default."""
    return cfg.writer or (DEFAULT_LLM if cfg.player.startswith(SCRIPTED) else cfg.player)


def validate(cfg: RunConfig) -> Env:
    """Check every name and option of a config before any model loads or any directory is written."""
    env = validate_parts(cfg)
    if cfg.memory_from and not Path(cfg.memory_from).exists():
        raise FileNotFoundError(f"--memory-from {cfg.memory_from} does not exist")
    return env


def build_session(run: Run, replay: ReplayBook | None = None, llm_factory: Callable[[str], LLM] = make_llm) -> Session:
    """Turn a run's config into live parts; on a reopened run, restore the state after its last finished game."""
    cfg = run.config
    env = validate(cfg)
    loaded: dict[str, LLM] = {}
    session_llms: list[LLM] = []

    def recorded(spec: str, role: str) -> LLM:
        if replay is None and spec not in loaded:
            loaded[spec] = llm_factory(spec)
        wrapper = RecordingLLM(loaded.get(spec), role, lambda e: session._sink(e), spec, replay)
        return wrapper

    player = make_player(cfg.player, lambda spec: recorded(spec, "player"), cfg.temperature)
    writer: LLM | None = None
    if MEMORIES.get(cfg.memory).needs_llm:
        spec = writer_spec(cfg)
        writer = recorded(spec, "memory")
    memory = make_memory(cfg.memory, writer, **cfg.memory_options)
    memory.bind_run(run.path, run.path.name)
    session_llms.extend(loaded.values())
    session = Session(run, env, player, memory, session_llms)
    state = None
    if run.episodes:
        state = run.snapshot(len(run.episodes))["state"]
    elif cfg.memory_from:
        state = _latest_state(Path(cfg.memory_from))
    if state is not None:
        memory.load(state["memory"])
        player.load(state.get("player", {}))
    return session
