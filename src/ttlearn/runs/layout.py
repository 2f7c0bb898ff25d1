"""Every path of a run directory, an arena folder and a trainer's directory: the one place that knows file names.

    RUN_DIR/
      run.json             the RunConfig
      units.jsonl          one record per finished unit (`Run.finish`), its LLM calls inside it; a committed result
                           may hold it compressed as units.jsonl.gz or .xz (read only)
      snapshots.jsonl      the memory and player state after each unit, stored once by content (`SnapshotStore`)
      summary.json         written when the run finishes
      memrl.sqlite         MemRL's store, for memories that keep files of their own
      .lock                held by the one process that writes the run (`RunDir.hold_lock`)

    TRAINER_DIR/
      train.json           the trainer's config (config.json in directories written before it had a name of its own)
      metrics.jsonl        one line per step
      episodes.jsonl       every episode a step played, with its step; evaluation games marked (`RunDir.record_played`)
      step_NNNN/           a checkpoint: the adapter and trainer_state.pt
      final/               the adapter after the last step

    ARENA/
      arena.json           the arena config, ttlearn version and git commit of the last start
      runs/<label>/<opponent>/seed<k>/    one run directory per (contestant, opponent, seed)
      report.json, report.html

Directories written before one config existed (a session's config.json + events.jsonl, a trial run's trials.json +
tasks.jsonl, one snapshots/game_NNNN.json per game, forks of those) are read by `runs.legacy`, the one adapter.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar, Sequence

from ttlearn.runs.durable import PACKERS, SnapshotStore, append_durable
from ttlearn.types import Episode
from ttlearn.untrusted import open_descriptor, read_json, write_atomic

RUNS_DIR = "runs"
"""The folder of run directories: where a command writes when given no --out (runs/<name> under the current folder),
and inside an arena folder (runs/<label>/<opponent>/seed<k>)."""


class RunBusyError(ValueError):
    """Another process is writing the run directory (its lock is held); the message is one line."""


@dataclass
class RunDir:
    """One run directory (or fork, or trainer's directory): the names of its files, and the jobs that belong to the
    directory rather than to one reader — its write lock (`hold_lock`), a trainer's record of the episodes it played
    (`record_played`) and a fork's state (`fork_state`, `write_fork`)."""

    path: Path
    CONFIG: ClassVar[str] = "run.json"
    UNITS: ClassVar[str] = "units.jsonl"
    PACKED: ClassVar[tuple[str, ...]] = tuple(PACKERS)
    """The suffixes of a records file committed compressed (read only)."""
    SNAPSHOTS: ClassVar[str] = "snapshots.jsonl"
    SUMMARY: ClassVar[str] = "summary.json"
    FORK: ClassVar[str] = "fork.json"
    LOCK: ClassVar[str] = ".lock"
    MEMRL_STORE: ClassVar[str] = "memrl.sqlite"
    """MemRL's own store, one per run (`Memory.keeps_files`)."""
    TRAINER_CONFIG: ClassVar[str] = "train.json"
    OLD_TRAINER_CONFIG: ClassVar[str] = "config.json"
    """A trainer's config in directories written before it had a name of its own (`OldLayout.SESSION_CONFIG` is the
    same name: an old session is the one with an events file)."""
    METRICS: ClassVar[str] = "metrics.jsonl"
    TRAINER_STATE: ClassVar[str] = "trainer_state.pt"
    FINAL: ClassVar[str] = "final"
    PLAYED: ClassVar[str] = "episodes.jsonl"
    CHECKPOINT: ClassVar[str] = "step_{step:04d}"
    TRAINING_CURVE: ClassVar[str] = "curve.svg"
    """MemoPilot's learning curve, drawn from the metrics at the end of a run."""

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

    def records_file(self, name: str) -> Path | None:
        """The records file `name` of this directory, or its compressed copy (a committed result), whichever it
        holds; None for neither. Whatever stands at a name counts (a link, a FIFO): its reader refuses it."""
        for path in (self.path / name, *(self.path / (name + suffix) for suffix in self.PACKED)):
            if path.exists() or path.is_symlink():
                return path
        return None

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

    def hold_lock(self, wait: bool = False) -> IO[bytes]:
        """Take the directory's write lock and return its open file (closing it, dropping the last reference to it
        or the process ending releases the lock): one writer per run, so two `resume`s of one directory cannot both
        append a unit. `wait`: block until the holder is done (an arena worker behind an orphan of a killed arena);
        else refuse at once."""
        fd = open_descriptor(self.lock, os.O_WRONLY | os.O_CREAT)  # a link, FIFO or device is refused at once
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            raise RunBusyError(
                f"{self.path} is being written by another process (another run or resume of it holds its lock); "
                "wait until it ends, or stop it, then resume"
            ) from None
        return os.fdopen(fd, "wb", buffering=0)

    # ---- a trainer's directory ---------------------------------------------------------------------------------
    @property
    def trainer_config(self) -> Path:
        """A trainer's config file: train.json, or config.json in a trainer's directory written before."""
        old = self.path / self.OLD_TRAINER_CONFIG
        new = self.path / self.TRAINER_CONFIG
        return old if old.is_file() and not new.exists() else new

    @property
    def metrics(self) -> Path:
        return self.path / self.METRICS

    @property
    def played(self) -> Path:
        return self.path / self.PLAYED

    @property
    def final(self) -> Path:
        return self.path / self.FINAL

    def checkpoint(self, step: int) -> Path:
        return self.path / self.CHECKPOINT.format(step=step)

    def checkpoints(self) -> list[Path]:
        """A trainer's complete checkpoints, oldest first."""
        pattern = self.CHECKPOINT.partition("{")[0] + "*"
        return sorted(p for p in self.path.glob(pattern) if (p / self.TRAINER_STATE).is_file())

    def record_played(
        self, step: int, episodes: Sequence[Episode], evaluation: Sequence[tuple[dict[str, Any], Episode]] = ()
    ) -> None:
        """The episodes a trainer played in `step`: its training games ("episode" lines) and the games it played to
        evaluate itself ("evaluation" lines, each with its marks), made durable in one append (`read_durable` drops
        a torn tail; the trainer cuts the lines of steps after its last checkpoint when it resumes)."""
        lines = [{"type": "episode", "step": step, "episode": e.to_json()} for e in episodes]
        lines += [{"type": "evaluation", "step": step, **marks, "episode": e.to_json()} for marks, e in evaluation]
        append_durable(self.played, lines)

    # ---- a fork ------------------------------------------------------------------------------------------------
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


class OldLayout:
    """The file names of the directories written before one config existed, which `runs.legacy` reads."""

    SESSION_CONFIG: ClassVar[str] = "config.json"
    """A session's config; a trainer's directory written before `RunDir.TRAINER_CONFIG` shares the name, and has
    no EVENTS file."""
    EVENTS: ClassVar[str] = "events.jsonl"
    TRIAL_CONFIG: ClassVar[str] = "trials.json"
    TASKS: ClassVar[str] = "tasks.jsonl"
    SNAPSHOT_FILES: ClassVar[str] = "snapshots"
    """Sessions before content-addressed snapshots: snapshots/game_NNNN.json, one file per game."""
    GAME_SNAPSHOT: ClassVar[str] = "game_{game:04d}.json"

    @classmethod
    def game_snapshot(cls, run_dir: Path, game: int) -> Path:
        return Path(run_dir) / cls.SNAPSHOT_FILES / cls.GAME_SNAPSHOT.format(game=game)

    @classmethod
    def game_snapshots(cls, run_dir: Path) -> list[Path]:
        """The per-game snapshot files of an old session or fork, in game order."""
        return sorted((Path(run_dir) / cls.SNAPSHOT_FILES).glob(cls.GAME_SNAPSHOT.partition("{")[0] + "*.json"))


def default_run_dir(env: str, memory: str) -> Path:
    """Where `ttlearn run` writes without --out: runs/ENV-MEMORY-DATE-TIME."""
    return Path(RUNS_DIR) / f"{env}-{memory}-{time.strftime('%Y%m%d-%H%M%S')}"


def replay_dir(run_dir: Path) -> Path:
    """Where `ttlearn replay RUN_DIR` writes without --out: RUN_DIR-replay beside it."""
    return Path(f"{run_dir}-replay")


ARENA_FILE = "arena.json"
NO_OPPONENT = "default"
"""The opponent label of sequences in environments without opponents (puzzles): one directory level, same layout."""
REPORT_JSON, REPORT_HTML = "report.json", "report.html"
"""An arena's report, rebuilt from its runs' records alone."""


def default_arena_dir(name: str) -> Path:
    """Where `ttlearn arena` writes without --out: runs/arena-NAME."""
    return Path(RUNS_DIR) / f"arena-{name}"


def arena_run(out: Path, label: str, opponent: str, seed: int) -> Path:
    """The run directory of one contestant's sequence in an arena folder."""
    return Path(out) / RUNS_DIR / label / opponent / f"seed{seed}"


def arena_runs(out: Path) -> list[Path]:
    """The run directories of an arena folder (`arena_run`'s), in a stable order."""
    return sorted(p for p in (Path(out) / RUNS_DIR).glob("*/*/*") if p.is_dir())
