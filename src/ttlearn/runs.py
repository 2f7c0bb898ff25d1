"""The run directory: everything a session did, on disk, append-only, so runs resume and evaluate offline.

    RUN_DIR/
      config.json            the RunConfig that built the session
      events.jsonl           every LLM call and step of every finished game, then one "game" record per game
      snapshots/game_0001.json   the memory (and player) state after game 1, with its content hash
      summary.json           written when the run finishes

A game becomes durable when its "game" record is on disk: its events are buffered in memory while it is played and
written in one append, snapshot first. A process killed mid-game leaves at worst a torn last line, which `open`
truncates; the game is then replayed from its own seed, so no game is ever lost or duplicated.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
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


def _write_atomic(path: Path, text: str) -> None:
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
    _buffer: list[dict[str, Any]] = field(default_factory=list)

    # ---- creation and reopening -------------------------------------------------------------------------------
    @classmethod
    def create(cls, path: Path, config: RunConfig) -> Run:
        path = Path(path)
        if (path / "config.json").exists():
            raise FileExistsError(f"{path} already holds a run; use `ttlearn resume {path}` or another --out")
        (path / "snapshots").mkdir(parents=True, exist_ok=True)
        _write_atomic(path / "config.json", config.model_dump_json(indent=2))
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
    def record(self, event: dict[str, Any]) -> None:
        """Buffer an event of the game in progress (LLM calls, steps); written when the game finishes."""
        self._buffer.append({"game": len(self.episodes) + 1, "t": time.time(), **event})

    def finish_game(self, episode: Episode, state: dict[str, Any]) -> None:
        """Make a finished game durable: snapshot, then its events and game record in one append."""
        snapshot = {
            "game": episode.index,
            "hash": canonical_hash(state),
            "config": self.config.model_dump(),
            "state": state,
        }
        _write_atomic(self.snapshot_path(episode.index), json.dumps(snapshot, ensure_ascii=False))
        self._buffer.append(
            {"type": "game", "game": episode.index, "episode": episode.to_json(), "memory_hash": snapshot["hash"]}
        )
        append_durable(self.path / "events.jsonl", self._buffer)
        self._buffer.clear()
        self.episodes.append(episode)

    def write_summary(self, summary: dict[str, Any]) -> None:
        _write_atomic(self.path / "summary.json", json.dumps(summary, indent=2))

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
