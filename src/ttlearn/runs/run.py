"""`Run`: one run read from and appended to its directory — its config and one record per finished unit. Every
driver, reader and summary goes through it.

A unit record (units.jsonl) is {index, type ("task" or held-out "validation"), epoch, task, seed, instance,
first_success, score, attempts[], calls[], control_*, wall_s, memory_hash}: `attempts` holds each attempt's
episode (steps, rewards, the memory it saw), `calls` every LLM call the unit made, and `memory_hash` names the
{memory, player} state after it in the snapshot store. A unit becomes durable in one appended line, its state
stored first; a killed run leaves at most a torn last line, which reopening drops, and the unit is played again
from its own seeds, so none is lost or played twice.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable

from ttlearn.runs import legacy
from ttlearn.runs.config import RunConfig, parse_recorded
from ttlearn.runs.durable import append_durable, canonical_hash, read_durable
from ttlearn.runs.layout import RunDir
from ttlearn.untrusted import UntrustedFileError, read_json, write_atomic

UNCOMPARED = frozenset({"version", "seeding"})
"""Config fields two runs of the same work may differ in: the ttlearn version, and the seeding rule of a run
recorded before one config existed (it plays as recorded)."""


def holds_run(path: Path) -> bool:
    run_dir = RunDir(path)
    return run_dir.config_file.is_file() or legacy.layout(run_dir) is not None


def run_files(path: Path) -> tuple[str, str]:
    """The names of the config and records files of the run at `path` (an old layout's own)."""
    run_dir = RunDir(path)
    old = None if run_dir.config_file.is_file() else legacy.files(run_dir)
    return old or (RunDir.CONFIG, RunDir.UNITS)


def read_config(path: Path) -> RunConfig:
    """The config of the run at `path` (an old layout's through `runs.legacy`)."""
    run_dir = RunDir(path)
    if run_dir.config_file.is_file():
        data = read_json(run_dir.config_file)
        if not isinstance(data, dict):
            raise UntrustedFileError(f"{run_dir.config_file} must hold a JSON object")
        return parse_recorded(data)
    old = legacy.read_config(run_dir)
    if old is None:
        raise FileNotFoundError(f"{path} is not a run directory (no {RunDir.CONFIG})")
    return old


@dataclass
class Run:
    """A run's config and finished unit records. Opened to read (any number of readers, a live run included) or to
    write (`create`, `open(write=True)`): a writer holds the directory's lock until `close`, so one process at a time
    appends units to it."""

    path: Path
    config: RunConfig
    records: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.dir = RunDir(self.path)
        self._lock: IO[bytes] | None = None

    # ---- creation and reopening -------------------------------------------------------------------------------
    @classmethod
    def create(cls, path: Path, config: RunConfig, wait: bool = False) -> Run:
        """A new run directory holding `config`, open for writing (refused where any run or other file already is)."""
        return cls._locked(path, config, wait, reopen=False)

    @classmethod
    def create_or_open(cls, path: Path, config: RunConfig, wait: bool = False) -> Run:
        """The run at `path` open for writing: reopened when it holds `config` (to resume it), else created."""
        return cls._locked(path, config, wait, reopen=True)

    @classmethod
    def open(cls, path: Path, write: bool = False, wait: bool = False) -> Run:
        """Reopen a run. To read (the default), a run that may still be playing included: a torn tail after the
        last finished unit is skipped, never cut. `write`: take the directory's lock first (`RunDir.hold_lock`:
        `wait` for it, else refuse at once), then cut the torn tail, which the next unit replaces."""
        if not write:
            return cls._read(path, write=False)
        return cls._holding(RunDir(path).hold_lock(wait), lambda: cls._read(path, write=True))

    @classmethod
    def _locked(cls, path: Path, config: RunConfig, wait: bool, reopen: bool) -> Run:
        """Create the run at `path`, or reopen it (`reopen`) when it holds `config`, with its lock taken first: of two
        processes creating one run, the second finds the first's."""
        run_dir = RunDir(path)
        if not holds_run(path):
            leftovers = (RunDir.LOCK, RunDir.CONFIG + ".tmp")  # a creation killed
            if run_dir.path.exists() and any(p.name not in leftovers for p in run_dir.path.iterdir()):
                raise FileExistsError(f"{path} exists and is not a run directory; use another --out")
            run_dir.path.mkdir(parents=True, exist_ok=True)

        def create_or_reopen() -> Run:
            if not holds_run(path):
                write_atomic(run_dir.config_file, config.model_dump_json(indent=2))
                append_durable(run_dir.units, [])
                return cls(run_dir.path, config)
            if not reopen:
                raise FileExistsError(f"{path} already holds a run; use `ttlearn resume {path}` or another --out")
            run = cls._read(path, write=True)
            differ = run.differs_from(config)
            if differ:
                raise FileExistsError(
                    f"{path} holds a different run (other {', '.join(differ)}); resume it with its own config or "
                    "use another --out"
                )
            return run

        return cls._holding(run_dir.hold_lock(wait), create_or_reopen)

    @classmethod
    def _holding(cls, lock: IO[bytes], make: Callable[[], Run]) -> Run:
        """The run `make` returns, holding `lock`; the lock is released when `make` fails."""
        try:
            run = make()
        except BaseException:
            lock.close()
            raise
        run._lock = lock
        return run

    @classmethod
    def _read(cls, path: Path, write: bool) -> Run:
        run = cls(Path(path), read_config(path))
        found = run.dir.records_file(RunDir.UNITS)
        run.records = legacy.read_records(run.dir, write) + (read_durable(found, repair=write) if found else [])
        return run

    def differs_from(self, config: RunConfig) -> list[str]:
        """The config fields in which `config` asks for another run than this one."""
        mine = self.config.model_dump(exclude=set(UNCOMPARED))
        return sorted(k for k, v in config.model_dump(exclude=set(UNCOMPARED)).items() if mine.get(k) != v)

    def close(self) -> None:
        """Release the write lock (a reader has none; dropping a writer releases it too); the records stay
        readable."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _check_writer(self) -> None:
        if self._lock is None:
            raise ValueError(f"{self.path} was opened to read; open it with write=True to change it")

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- what a run is made of ---------------------------------------------------------------------------------
    @property
    def total(self) -> int:
        return self.config.total

    @property
    def done(self) -> int:
        return len(self.records)

    @property
    def finished(self) -> bool:
        return self.done >= self.total

    # ---- recording -------------------------------------------------------------------------------------------
    def finish(self, record: dict[str, Any], state: dict[str, Any]) -> None:
        """Make the next unit durable: its state into the snapshot store, then its record, which names the state by
        hash, in one append. Units are appended in order, whoever played them, by the one writer."""
        self._check_writer()
        if record["index"] != self.done + 1:
            raise ValueError(f"unit {record['index']} finished out of order; unit {self.done + 1} is next")
        record = {**record, "memory_hash": self.dir.store.put(state)}
        append_durable(self.dir.units, [record])
        self.records.append(record)

    def rewrite(self, records: list[dict[str, Any]]) -> None:
        """Replace the finished records by `records` (the same units with something added: `ttlearn rejudge`'s
        verdicts), atomically per file; an old run's go back to their own file."""
        self._check_writer()
        old = [r for r in records if "legacy" in r]
        if old:
            legacy.rewrite(self.dir, old)
        new = [r for r in records if "legacy" not in r]
        if new or self.dir.units.exists():  # an old run that never resumed keeps only its own files
            write_atomic(self.dir.units, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in new))
        self.records = records

    def write_summary(self, summary: dict[str, Any]) -> None:
        self._check_writer()
        write_atomic(self.dir.summary, json.dumps(summary, indent=2))

    # ---- reading ---------------------------------------------------------------------------------------------
    def state_after(self, index: int) -> dict[str, Any]:
        """The stored state after unit `index` (1-based): {"memory", "player"}."""
        record = self.records[index - 1]
        if "legacy" in record:
            return legacy.state_after(self.dir, record)
        return self.dir.store.get(record["memory_hash"])

    def snapshot(self, index: int) -> dict[str, Any]:
        """The state after unit `index` as {"unit", "hash", "state"}: what `memory fork` copies, `memory diff`
        compares and a resumed run starts from."""
        if not 1 <= index <= self.done:
            raise ValueError(f"{self.path} has {self.done} finished units; pick one between 1 and {self.done}")
        state = self.state_after(index)
        return {"unit": index, "hash": canonical_hash(state), "state": state}

    def calls(self, index: int | None = None) -> list[dict[str, Any]]:
        """The recorded LLM calls of finished unit `index`, or of every finished unit (what `replay` answers from),
        in order."""
        records = self.records if index is None else [self.records[index - 1]]
        return [c for r in records for c in r["calls"] if c.get("type") == "call"]

    def outcomes(self) -> list[Any]:
        """What a replay must reproduce, unit by unit: its first success (and its control's) and attempt scores."""
        return [
            (r["first_success"], r.get("control_first_success"), [a["score"] for a in r["attempts"]])
            for r in self.records
        ]


def latest_state(source: Path) -> dict[str, Any]:
    """The state a run started `--memory-from` `source` starts from: an old snapshot file's, a fork's, or the
    state after the last finished unit of a run."""
    source = Path(source)
    if source.is_file():
        return legacy.snapshot_file_state(source)
    run_dir = RunDir(source)
    state = run_dir.fork_state() or legacy.fork_state(run_dir)
    if state is not None:
        return state
    if holds_run(source):
        run = Run.open(source)
        if run.records:
            return run.state_after(run.done)
    raise FileNotFoundError(f"{source} holds no memory snapshot")
