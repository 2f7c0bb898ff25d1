"""Run records: the configs and the append-only directories that sessions and trial runs write, so that runs resume
exactly and every number can be recomputed offline. This is the layer both the playing code and `eval` stand on.

A session (a sequence of games, the memory carried over):

    RUN_DIR/
      config.json            the RunConfig that built the session
      events.jsonl           every LLM call and step of every finished game, then one "game" record per game
      snapshots/game_0001.json   the memory (and player) state after game 1, with its content hash
      summary.json           written when the run finishes

A game becomes durable when its "game" record is on disk: its events are buffered in memory while it is played and
written in one append, snapshot first. A process killed mid-game leaves at worst a torn last line, which `open`
truncates; the game is then replayed from its own seed, so no game is ever lost or duplicated.

A trial run (K task instances, N attempts each, LaMer's reflections in between; MemRL's epochs):

    OUT/trials.json     the TrialConfig
    OUT/tasks.jsonl     one record per finished instance: its attempts (steps, rewards, success), LLM calls, facts
    OUT/summary.json    success@1..N, pass@1..N (memory off), trajectory entropy, instance-set ceilings

A task becomes durable in one appended line; a killed run leaves at most a torn last line, which reopening drops.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from pydantic import BaseModel, ConfigDict, Field

from ttlearn import __version__
from ttlearn.llm.base import DEFAULT_LLM
from ttlearn.types import Episode


class PartsConfig(BaseModel):
    """What every way of playing shares: the environment, the memory, the player and writer LLMs, seed and
    temperature. `session.validate_parts` checks these before any model loads."""

    model_config = ConfigDict(extra="forbid")

    env: str
    env_options: dict[str, Any] = Field(default_factory=dict)
    memory: str = "none"
    memory_options: dict[str, Any] = Field(default_factory=dict)
    player: str = DEFAULT_LLM
    writer: str | None = None
    """LLM spec of the memory writer; None means the player's LLM (or the default model for scripted players)."""
    seed: int = 0
    temperature: float = Field(0.0, ge=0.0)
    retries: int = Field(2, ge=0)
    """LLM players on generated text: more replies asked for before a move counts invalid (LaMer: 0)."""
    free_text_tokens: int | None = Field(None, ge=1)
    """LaMer's free-text policy: one reply of up to this many tokens, reasoning then the action, never choice
    scoring; None: score the legal actions where the back end can."""


class TrialConfig(PartsConfig):
    """A multi-attempt run: `tasks` instances, `attempts` attempts each. Validated before any model loads."""

    memory: str = "lamer"
    tasks: int = Field(10, ge=1)
    attempts: int = Field(3, ge=1)
    early_stop: bool | None = None
    """Stop a trial at its first success; None: stop with a memory, play every attempt with memory "none"."""
    epochs: int = Field(1, ge=1)
    """MemRL's protocol: play the same task set this many times; the memory then carries over between tasks and
    epochs (runtime learning) instead of starting fresh for every task, and the summary adds last-epoch and
    cumulative success."""
    carry_memory: bool = False
    """MemRL's runtime learning within one pass: the memory carries over from task to task instead of starting
    fresh for every task (always so with `epochs` > 1 or held-out validation)."""
    control: bool = False
    """Also play every task without memory — the same instance and decision seeds, nothing in the memory slot —
    as the paired control the summary compares against (exact McNemar)."""
    validation_tasks: int = Field(0, ge=0)
    """MemRL's transfer measure: after every epoch, play this many held-out instances from the epoch's memory
    (their own writes are not carried on); the summary adds best-validation success. Implies a carried memory."""
    validation_env_options: dict[str, Any] = Field(default_factory=dict)
    """Environment options of the held-out instances, over `env_options` (e.g. {"split": "test"})."""
    moves_per_turn: int | None = Field(None, ge=1)
    """Scored decisions per turn for LLM players on choice-scoring back ends (Sokoban takes up to 3 moves a turn,
    scoring picks one); None: the environment's `actions_per_turn` (1 where it has none)."""

    @property
    def carries_memory(self) -> bool:
        return self.carry_memory or self.epochs > 1 or self.validation_tasks > 0

    @property
    def total(self) -> int:
        return (self.tasks + self.validation_tasks) * self.epochs

    def position(self, index: int) -> tuple[str, int, int]:
        """(kind, epoch, task) of the index-th job (1-based): each epoch plays tasks 1..K ("task"), then its held-out
        instances 1..V ("validation")."""
        per_epoch = self.tasks + self.validation_tasks
        epoch, offset = (index - 1) // per_epoch + 1, (index - 1) % per_epoch + 1
        return ("task", epoch, offset) if offset <= self.tasks else ("validation", epoch, offset - self.tasks)

    def validation_config(self) -> TrialConfig:
        """The parts config of the held-out instances."""
        return self.model_copy(update={"env_options": {**self.env_options, **self.validation_env_options}})

    @property
    def stops_early(self) -> bool:
        return self.memory != "none" if self.early_stop is None else self.early_stop


class RunConfig(PartsConfig):
    """Everything needed to rebuild a session. Validated, so a bad value fails before any model loads."""

    games: int = Field(6, ge=1)
    memory_from: str | None = None
    """A snapshot file or run directory whose latest memory state seeds this run."""
    version: str = __version__


def canonical_hash(data: Any) -> str:
    blob = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def append_durable(path: Path, records: Sequence[dict[str, Any]]) -> None:
    """Append records as JSON lines in one write, flushed and fsynced: a crash leaves whole lines plus at most one
    torn last line, which `read_durable` skips."""
    block = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(block)
        fh.flush()
        os.fsync(fh.fileno())


def read_durable(
    path: Path, *, repair: bool, ends_block: Callable[[dict[str, Any]], bool] = lambda record: True
) -> list[dict[str, Any]]:
    """The records of an append-only JSON-lines file up to its last complete block (a block ends with a record for
    which `ends_block` holds). A torn or unfinished tail is skipped, and cut off when `repair` — only the writer
    may repair: a reader of a live run would cut a block being appended."""
    records: list[dict[str, Any]] = []
    kept, good_end, offset = 0, 0, 0
    with open(path, "rb") as fh:
        for line in fh:
            offset += len(line)
            if not line.endswith(b"\n"):
                break
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
            if ends_block(records[-1]):
                kept, good_end = len(records), offset
    if repair and good_end < path.stat().st_size:
        with open(path, "r+b") as fh:
            fh.truncate(good_end)
    return records[:kept]


def _is_game(record: dict[str, Any]) -> bool:
    """A game's last record, the one that makes it durable."""
    return record.get("type") == "game"


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@dataclass
class Run:
    path: Path
    config: RunConfig
    episodes: list[Episode] = field(default_factory=list)

    # ---- creation and reopening -------------------------------------------------------------------------------
    @classmethod
    def create(cls, path: Path, config: RunConfig) -> Run:
        path = Path(path)
        if (path / "config.json").exists():
            raise FileExistsError(f"{path} already holds a run; use `ttlearn resume {path}` or another --out")
        (path / "snapshots").mkdir(parents=True, exist_ok=True)
        write_atomic(path / "config.json", config.model_dump_json(indent=2))
        (path / "events.jsonl").touch()
        return cls(path, config)

    @classmethod
    def open(cls, path: Path, repair: bool = True) -> Run:
        """Reopen a run, dropping any torn tail after its last finished game.

        Readers of a run that may still be playing (reports) pass `repair=False`: they skip the tail, never cut it.
        """
        path = Path(path)
        cfg_file = path / "config.json"
        if not cfg_file.exists():
            raise FileNotFoundError(f"{path} is not a run directory (no config.json)")
        run = cls(path, RunConfig.model_validate_json(cfg_file.read_text()))
        records = read_durable(path / "events.jsonl", repair=repair, ends_block=_is_game)
        run.episodes = [Episode.from_json(r["episode"]) for r in records if _is_game(r)]
        return run

    # ---- recording -------------------------------------------------------------------------------------------
    def finish_game(self, episode: Episode, state: dict[str, Any], events: Sequence[dict[str, Any]] = ()) -> None:
        """Make the next game durable: snapshot, then its events (LLM calls, steps) and game record in one append.
        Games are appended in order, whoever played them."""
        if episode.index != len(self.episodes) + 1:
            raise ValueError(f"game {episode.index} finished out of order; game {len(self.episodes) + 1} is next")
        snapshot = {
            "game": episode.index,
            "hash": canonical_hash(state),
            "config": self.config.model_dump(),
            "state": state,
        }
        write_atomic(self.snapshot_path(episode.index), json.dumps(snapshot, ensure_ascii=False))
        block = [{"game": episode.index, **event} for event in events]
        block.append(
            {"type": "game", "game": episode.index, "episode": episode.to_json(), "memory_hash": snapshot["hash"]}
        )
        append_durable(self.path / "events.jsonl", block)
        self.episodes.append(episode)

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_atomic(self.path / "summary.json", json.dumps(summary, indent=2))

    # ---- reading ---------------------------------------------------------------------------------------------
    def snapshot_path(self, game: int) -> Path:
        return self.path / "snapshots" / f"game_{game:04d}.json"

    def snapshot(self, game: int) -> dict[str, Any]:
        path = self.snapshot_path(game)
        if not path.exists():
            raise FileNotFoundError(f"no memory snapshot for game {game} in {self.path}")
        return json.loads(path.read_text())

    def events(self, game: int | None = None) -> Iterator[dict[str, Any]]:
        with open(self.path / "events.jsonl", encoding="utf-8") as fh:
            for line in fh:
                record = json.loads(line)
                if game is None or record.get("game") == game:
                    yield record

    @property
    def finished(self) -> bool:
        return len(self.episodes) >= self.config.games


# ---- arenas ------------------------------------------------------------------------------------------------------
ARENA_FILE = "arena.json"
RUNS_DIR = "runs"
"""An arena folder holds ARENA_FILE and RUNS_DIR/<label>/<opponent>/seed<k>/, one session run directory each."""
NO_OPPONENT = "default"
"""The opponent label of sequences in environments without opponents (puzzles): one directory level, same layout."""


# ---- trial runs ------------------------------------------------------------------------------------------------
CONFIG_FILE, TASKS_FILE, SUMMARY_FILE = "trials.json", "tasks.jsonl", "summary.json"


def read_tasks(out: Path, *, repair: bool = True) -> list[dict[str, Any]]:
    """The finished task records of a run directory (`read_durable`: a torn last line is dropped, and cut only when
    `repair`)."""
    path = Path(out) / TASKS_FILE
    return read_durable(path, repair=repair) if path.exists() else []


def append_task(out: Path, record: dict[str, Any]) -> None:
    append_durable(Path(out) / TASKS_FILE, [record])


def open_trial_dir(out: Path, config: TrialConfig) -> list[dict[str, Any]]:
    """Create the directory, or reopen it when it holds the same config; returns the tasks already finished."""
    out = Path(out)
    config_file = out / CONFIG_FILE
    if config_file.exists():
        saved = TrialConfig.model_validate_json(config_file.read_text())
        if saved != config:
            raise FileExistsError(
                f"{out} holds a different trial run; resume it with its own config or use another --out"
            )
        return read_tasks(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not a trial run directory")
    out.mkdir(parents=True, exist_ok=True)
    config_file.write_text(config.model_dump_json(indent=2))
    return []


def load_trial_config(out: Path) -> TrialConfig:
    """The config of a trial run directory, to resume it with `run_trials(load_trial_config(out), out)`."""
    path = Path(out) / CONFIG_FILE
    if not path.exists():
        raise FileNotFoundError(f"{out} is not a trial run directory (no {CONFIG_FILE})")
    return TrialConfig.model_validate_json(path.read_text())


def is_trial_dir(path: Path) -> bool:
    return (Path(path) / CONFIG_FILE).is_file()
