"""Every path of a run directory, an arena folder and a trainer's directory: the one place that knows file names.

    RUN_DIR/
      run.json             the RunConfig
      units.jsonl          one record per finished unit (`Run.finish`), its LLM calls inside it
      snapshots.jsonl      the memory and player state after each unit, stored once by content (`SnapshotStore`)
      summary.json         written when the run finishes
      memrl.sqlite         MemRL's store, for memories that keep files of their own

Directories written before one config existed (a session's config.json + events.jsonl, a trial run's trials.json +
tasks.jsonl, one snapshots/game_NNNN.json per game, forks of those) are read by `runs.legacy`, the one adapter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Sequence

from ttlearn.runs.durable import SnapshotStore, append_durable
from ttlearn.types import Episode
from ttlearn.untrusted import read_json, write_atomic


@dataclass
class RunDir:
    """The paths of one run directory (or fork, or trainer's directory), and what a fork holds."""

    path: Path
    CONFIG: ClassVar[str] = "run.json"
    UNITS: ClassVar[str] = "units.jsonl"
    SNAPSHOTS: ClassVar[str] = "snapshots.jsonl"
    SUMMARY: ClassVar[str] = "summary.json"
    FORK: ClassVar[str] = "fork.json"
    LOCK: ClassVar[str] = ".lock"
    MEMRL_STORE: ClassVar[str] = "memrl.sqlite"
    """MemRL's own store, one per run (`Memory.keeps_files`)."""
    TRAINER_CONFIG: ClassVar[str] = "config.json"
    METRICS: ClassVar[str] = "metrics.jsonl"
    TRAINER_STATE: ClassVar[str] = "trainer_state.pt"
    FINAL: ClassVar[str] = "final"
    PLAYED: ClassVar[str] = "episodes.jsonl"
    """A trainer's directory: its config, one metrics line per step, step_NNNN/ checkpoints with the trainer's
    state, the final adapter, and every episode it played, one record each with its training step."""

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.store = SnapshotStore(self.path / self.SNAPSHOTS)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    @property
    def config_file(self) -> Path:
        return self.path / self.CONFIG

    @property
    def units(self) -> Path:
        return self.path / self.UNITS

    @property
    def summary(self) -> Path:
        return self.path / self.SUMMARY

    @property
    def fork(self) -> Path:
        return self.path / self.FORK

    @property
    def lock(self) -> Path:
        return self.path / self.LOCK

    @property
    def memrl_store(self) -> Path:
        return self.path / self.MEMRL_STORE

    @property
    def played(self) -> Path:
        return self.path / self.PLAYED

    def checkpoint(self, step: int) -> Path:
        return self.path / f"step_{step:04d}"

    def checkpoints(self) -> list[Path]:
        """A trainer's complete checkpoints, oldest first."""
        return sorted(p for p in self.path.glob("step_*") if (p / self.TRAINER_STATE).is_file())

    def record_played(self, step: int, episodes: Sequence[Episode]) -> None:
        """The episodes a trainer played in `step`, made durable in one append (`read_durable` drops a torn tail;
        the trainer cuts the lines of steps after its last checkpoint when it resumes)."""
        append_durable(self.played, [{"type": "episode", "step": step, "episode": e.to_json()} for e in episodes])

    def fork_state(self) -> dict[str, Any] | None:
        """The state a fork holds (None where this is no fork)."""
        if not self.fork.is_file():
            return None
        key = read_json(self.fork)["hash"]
        return self.store.get(key) if key in self.store else None

    def write_fork(self, source: Path, index: int, snapshot: dict[str, Any]) -> None:
        """Make this (new) directory a fork holding `snapshot`, to start a run from with `--memory-from`."""
        self.path.mkdir(parents=True, exist_ok=False)
        key = self.store.put(snapshot["state"])
        write_atomic(self.fork, json.dumps({"source": str(source), "unit": index, "hash": key}))


ARENA_FILE = "arena.json"
RUNS_DIR = "runs"
"""An arena folder holds ARENA_FILE and RUNS_DIR/<label>/<opponent>/seed<k>/, one run directory each."""
NO_OPPONENT = "default"
"""The opponent label of sequences in environments without opponents (puzzles): one directory level, same layout."""
REPORT_JSON, REPORT_HTML = "report.json", "report.html"
"""An arena's report, rebuilt from its runs' records alone."""


def arena_runs(out: Path) -> list[Path]:
    """The run directories of an arena folder (RUNS_DIR/<label>/<opponent>/seed<k>), in a stable order."""
    return sorted(p for p in (Path(out) / RUNS_DIR).glob("*/*/*") if p.is_dir())
