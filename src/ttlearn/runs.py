"""Run records: the configs and the append-only directories that runs write, so that runs resume exactly and every
number can be recomputed offline. This is the layer both the playing code and `eval` stand on: `RunDir` is the one
place that knows a run directory's layout, and `Run` reads and appends a run of either kind, one record per unit.

A config's `kind` says what a run's unit is. A session (kind "session", its unit a game; the memory carried over):

    RUN_DIR/
      config.json            the RunConfig that built the session
      events.jsonl           every LLM call and step of every finished game, then one "game" record per game, which
                             names the memory (and player) state after the game by its content hash ("memory_hash")
      snapshots.jsonl        those states, stored once by content (`SnapshotStore`)
      summary.json           written when the run finishes

A game becomes durable when its "game" record is on disk: its events are buffered in memory while it is played and
written in one append, snapshot first. A process killed mid-game leaves at worst a torn last line, which `open`
truncates; the game is then replayed from its own seed, so no game is ever lost or duplicated.

A trial run (kind "trials", its unit a task: K task instances, N attempts each, LaMer's reflections in between;
MemRL's epochs):

    OUT/trials.json       the TrialConfig
    OUT/tasks.jsonl       one record per finished instance: its attempts (steps, rewards, success), LLM calls, facts,
                          and the memory state after it by content hash ("memory_hash")
    OUT/snapshots.jsonl   those memory states, stored once by content
    OUT/summary.json      success@1..N, pass@1..N (memory off), trajectory entropy, instance-set ceilings

A task becomes durable in one appended line; a killed run leaves at most a torn last line, which reopening drops.

A trainer's directory (`ttlearn.train.base`) holds `episodes.jsonl`, every episode its steps played
(`RunDir.record_played`).

Older directories still read: sessions that kept one `snapshots/game_NNNN.json` per game, trial records that embed
their memory state ("memory"), and forks holding one such snapshot file (`RunDir` reads all three).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, ClassVar, Iterable, Iterator, Literal, Mapping, Sequence, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from ttlearn import __version__
from ttlearn.llm.base import DEFAULT_LLM
from ttlearn.registry import PLUGINS_VAR, loaded_plugins
from ttlearn.types import Episode
from ttlearn.untrusted import MAX_DEPTH, UntrustedFileError, lines, loads, open_regular, read_json, write_atomic

MEMORY_KEY_ENV, OPENAI_KEY_ENV = "TTLEARN_MEMORY_KEY", "OPENAI_API_KEY"
"""Where the credentials a run sends live (read by `memory.remote` and `llm.openai`); never in a config."""


Plugins = list[str]
"""A config's plug-in modules (`--plugin`, `$TTLEARN_PLUGINS`; by default those loaded in this process), recorded
so that a run needing one can say which (`missing_plugins`). Never imported because a config names them: a run
directory may come from anyone. Entry-point plug-ins need no record: they are found wherever they are installed."""


def missing_plugins(config: PartsConfig) -> list[str]:
    """The plug-ins `config` recorded that this process has not loaded."""
    loaded = loaded_plugins()
    return [spec for spec in config.plugins if spec not in loaded]


def plugin_hint(config: PartsConfig) -> str:
    """What to add to a "no such name" error of a run recorded with plug-ins not loaded now: which flag loads them."""
    missing = missing_plugins(config)
    if not missing:
        return ""
    return (
        f"; the run names plug-in {', '.join(missing)}, not loaded (a run directory never imports code): load it "
        f"with --plugin {missing[0]} before the command, or ${PLUGINS_VAR}, or install it as an entry point"
    )


class PartsConfig(BaseModel):
    """What every way of playing shares: the environment, the memory, the player and writer LLMs, seed and
    temperature. `rollout.run.validate` checks the names against the registries before any model loads."""

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
    moves_per_turn: int | None = Field(None, ge=1)
    """Scored decisions per turn for LLM players on choice-scoring back ends (Sokoban takes up to 3 moves a turn,
    scoring picks one); None: the environment's `actions_per_turn` (1 where it has none)."""
    retries: int = Field(2, ge=0)
    """LLM players on generated text: more replies asked for before a move counts invalid (LaMer: 0)."""
    free_text_tokens: int | None = Field(None, ge=1)
    """LaMer's free-text policy: one reply of up to this many tokens, reasoning then the action, never choice
    scoring; None: score the legal actions where the back end can."""
    max_options: int | None = Field(None, ge=1)
    """LLM players: the most legal actions one prompt lists (the shortlist, `players.llm.shortlist`); None: 64."""
    note_at: Literal["system", "exchange", "advice", "default"] = "system"
    """LLM players: where the memory's text is shown (`players.llm.NOTE_AT`); "system" is how every earlier run played."""
    plugins: Plugins = Field(default_factory=loaded_plugins)

    @field_validator("memory_options")
    @classmethod
    def _no_credentials(cls, options: dict[str, Any]) -> dict[str, Any]:
        """A config is written into run directories and snapshots: a memory service key must never be in it."""
        if "key" in options:
            raise ValueError(
                f"memory option key= is a credential and is never recorded in a run: set {MEMORY_KEY_ENV} instead "
                "(ttlearn run/resume take -m key=KEY and keep it out of the run directory)"
            )
        return options


def _refuse_fields_of(other: type[BaseModel], own: type[BaseModel], data: Any, message: str) -> Any:
    """`data` for a config of kind `own`, refused when it sets fields only the other kind has (by their flags)."""
    given = [n for n in other.model_fields if n not in own.model_fields and n in data] if isinstance(data, dict) else []
    if given:
        raise ValueError(", ".join("--" + name.replace("_", "-") for name in given) + message)
    return data


class TrialConfig(PartsConfig):
    """A trial run, whose unit is a task: `tasks` instances, `attempts` attempts each (LaMer's reflections in
    between; MemRL's epochs and held-out validation). Validated before any model loads."""

    kind: Literal["trials"] = "trials"
    memory: str = "lamer"
    tasks: int = Field(10, ge=1)
    attempts: int = Field(3, ge=1)
    """Attempts per task (LaMer: 3); when not given and the memory carries from task to task, the runner makes it 1
    (MemRL's protocol) and records that."""
    early_stop: bool | None = None
    """Stop a trial at its first success; None: stop with a memory, play every attempt with memory "none"."""
    epochs: int = Field(1, ge=1)
    """MemRL's protocol: play the same task set this many times; the memory then carries over between tasks and
    epochs (runtime learning) instead of starting fresh for every task, and the summary adds last-epoch and
    cumulative success."""
    carry_memory: bool | None = None
    """MemRL's runtime learning within one pass: the memory carries over from task to task instead of starting
    fresh for every task (always so with `epochs` > 1 or held-out validation). None: as the memory declares
    (`Memory.learns_across_tasks`); the runner records the resolved value."""
    control: bool = False
    """Also play every task without memory — the same instance and decision seeds, nothing in the memory slot —
    as the paired control the summary compares against (exact McNemar)."""
    validation_tasks: int = Field(0, ge=0)
    """MemRL's transfer measure: after every epoch, play this many held-out instances from the epoch's memory
    (their own writes are not carried on); the summary adds best-validation success. Implies a carried memory."""
    validation_env_options: dict[str, Any] = Field(default_factory=dict)
    """Environment options of the held-out instances, over `env_options` (e.g. {"split": "test"})."""

    @model_validator(mode="before")
    @classmethod
    def _no_session_fields(cls, data: Any) -> Any:
        return _refuse_fields_of(RunConfig, cls, data, " belong to session mode; trial mode (--tasks) plays tasks")

    @model_validator(mode="after")
    def _control_needs_a_memory(self) -> TrialConfig:
        if self.control and self.memory == "none":
            raise ValueError("--control plays every task without memory, which is what memory 'none' already does")
        return self

    @property
    def carries_memory(self) -> bool:
        return bool(self.carry_memory) or self.epochs > 1 or self.validation_tasks > 0

    @property
    def name(self) -> str:
        return "session" if self.unit == "game" else "trial run"

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
    """A session, whose unit is a game: one sequence of games, the memory carried from each to the next. Validated,
    so a bad value fails before any model loads."""

    kind: Literal["session"] = "session"
    games: int = Field(6, ge=1)
    memory_from: str | None = None
    """A snapshot file or run directory whose latest memory state seeds this run."""
    version: str = __version__

    @model_validator(mode="before")
    @classmethod
    def _no_trial_fields(cls, data: Any) -> Any:
        message = " belong to trial mode: add --tasks K (how many task instances)"
        return _refuse_fields_of(TrialConfig, cls, data, message)


AnyConfig = Annotated[Union[RunConfig, TrialConfig], Field(discriminator="kind")]
"""A run's config; its `kind` says what the run's unit is (a game of a session, a task of a trial run)."""
_ANY_CONFIG: TypeAdapter[RunConfig | TrialConfig] = TypeAdapter(AnyConfig)


def parse_config(data: dict[str, Any]) -> RunConfig | TrialConfig:
    """The config of `data["kind"]` ("session" by default), a bad value reported in one line."""
    try:
        return _ANY_CONFIG.validate_python({"kind": "session", **data})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"][1:])
        message = str(error["msg"]).removeprefix("Value error, ")
        raise ValueError(f"{where}: {message}" if where else message) from None


def canonical_hash(data: Any) -> str:
    blob = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def append_durable(path: Path, records: Sequence[dict[str, Any]]) -> None:
    """Append records as JSON lines in one write, flushed and fsynced: a crash leaves whole lines plus at most one
    torn last line, which `read_durable` skips. Only to a regular file with one link (`open_regular`)."""
    block = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    with open_regular(path, "ab") as fh:
        fh.write(block.encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())


def read_durable(
    path: Path, *, repair: bool, ends_block: Callable[[dict[str, Any]], bool] = lambda record: True
) -> list[dict[str, Any]]:
    """The records of an append-only JSON-lines file up to its last complete block (a block ends with a record for
    which `ends_block` holds). A torn or unfinished tail is skipped, and cut off when `repair` — only the writer
    may repair: a reader of a live run would cut a block being appended. Lines and nesting are bounded
    (`ttlearn.untrusted`); a line that is not a JSON object is an error naming it."""
    records: list[dict[str, Any]] = []
    kept, good_end, offset = 0, 0, 0
    with open_regular(path) as fh:
        for number, line in enumerate(lines(fh, path), start=1):
            offset += len(line)
            if not line.endswith(b"\n"):
                break
            try:
                record = loads(line, f"{path}:{number}")
            except json.JSONDecodeError:
                break
            if not isinstance(record, dict):
                raise UntrustedFileError(f"{path}:{number}: a record must be a JSON object; refused")
            records.append(record)
            if ends_block(record):
                kept, good_end = len(records), offset
        size = os.fstat(fh.fileno()).st_size
    if repair and good_end < size:
        with open_regular(path, "r+b") as fh:
            fh.truncate(good_end)
    return records[:kept]


def _is_game(record: dict[str, Any]) -> bool:
    """A game's last record, the one that makes it durable."""
    return record.get("type") == "game"


# ---- memory snapshots, stored once by content ----------------------------------------------------------------------
CHUNK = 64
"""Element references per stored piece of a list."""
CHUNKS = "$chunks"
"""The key of a list stored as pieces (the only key of its dict)."""
MAX_EXPANDED = 100_000_000
"""The largest state a snapshot may expand to (elements plus characters of text): pieces are shared, so a crafted
store of a few KB could otherwise expand to gigabytes."""


def expanded_size(objects: Mapping[str, Any], key: str, where: Path) -> int:
    """The size (elements plus characters) of the state stored under `key` once its pieces are expanded, checking
    that the pieces form a DAG (no cycle, no missing piece) whose expansion nests no deeper than MAX_DEPTH and is
    no larger than MAX_EXPANDED; each error one line naming the file. A piece is measured once, so a shared piece
    costs its size on every use without being walked again."""
    measured: dict[str, tuple[int, int] | None] = {}  # piece → (size, height); None while being measured

    def refs(value: Any) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(r, str) for r in value):
            raise UntrustedFileError(f"{where}: a {CHUNKS} reference list must hold hashes; refused")
        missing = [r for r in value if r not in objects]
        if missing:
            raise UntrustedFileError(f"{where}: piece {missing[0][:12]} is missing; refused")
        return value

    def piece(ref: str, depth: int) -> tuple[int, int]:
        if ref in measured:
            found = measured[ref]
            if found is None:
                raise UntrustedFileError(f"{where}: the pieces of a snapshot form a cycle at {ref[:12]}; refused")
        else:
            measured[ref] = None
            measured[ref] = found = measure(objects[ref], depth)
        if depth + found[1] > MAX_DEPTH:
            raise UntrustedFileError(f"{where}: a snapshot nests deeper than {MAX_DEPTH} levels; refused")
        return found

    def measure(value: Any, depth: int) -> tuple[int, int]:
        if depth > MAX_DEPTH:
            raise UntrustedFileError(f"{where}: a snapshot nests deeper than {MAX_DEPTH} levels; refused")
        if isinstance(value, dict) and CHUNKS in value:
            parts = [piece(e, depth + 1) for c in refs(value[CHUNKS]) for e in refs(objects[c])]
        elif isinstance(value, (dict, list)):
            parts = [measure(v, depth + 1) for v in (value.values() if isinstance(value, dict) else value)]
        else:
            return (len(value) + 1 if isinstance(value, str) else 1), 0
        size = 1 + sum(p[0] for p in parts)
        if size > MAX_EXPANDED:
            raise UntrustedFileError(f"{where}: a snapshot expands to more than {MAX_EXPANDED:,} elements; refused")
        return size, 1 + max((p[1] for p in parts), default=0)

    if key not in objects:
        raise FileNotFoundError(f"no memory snapshot {key[:12]} in {where}")
    return piece(key, 0)[0]


class SnapshotStore:
    """Memory states stored once by content in one append-only JSON-lines file of {"hash", "value"} objects.

    A state is stored under its `canonical_hash`. Every list that holds text or containers is split: each element
    is an object of its own, and the list becomes {"$chunks": [...]}, references to pieces of up to CHUNK element
    references. Consecutive states of a carried memory share all but the few items a task added or updated, so
    storing a state after every task costs what changed, not the whole memory again: a long carried run grows
    linearly instead of quadratically. Numeric lists (an RNG's state) stay inline.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._objects: dict[str, Any] | None = None
        self._repaired = False

    def _read(self, repair: bool) -> dict[str, Any]:
        if self._objects is None or (repair and not self._repaired):
            found = read_durable(self.path, repair=repair) if self.path.exists() else []
            if any(not isinstance(r.get("hash"), str) or "value" not in r for r in found):
                raise UntrustedFileError(f"{self.path}: a record without a string hash and a value; refused")
            self._objects, self._repaired = {r["hash"]: r["value"] for r in found}, repair
        return self._objects

    def put(self, state: dict[str, Any]) -> str:
        """Store `state` (what is new of it) and return its hash; one durable append, the state's own record last,
        so a torn write never leaves a state whose pieces are missing."""
        key = canonical_hash(state)
        objects = self._read(repair=True)
        if key in objects:
            return key
        new: dict[str, Any] = {}

        def keep(value: Any) -> str:
            digest = canonical_hash(value)
            if digest not in objects:
                new.setdefault(digest, value)
            return digest

        def pack(value: Any) -> Any:
            if isinstance(value, dict):
                if CHUNKS in value:
                    raise ValueError(f"a memory state may not use the key {CHUNKS!r}, which snapshots reserve")
                return {k: pack(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)) and any(isinstance(v, (str, dict, list, tuple)) for v in value):
                refs = [keep(pack(v)) for v in value]
                return {CHUNKS: [keep(refs[i : i + CHUNK]) for i in range(0, len(refs), CHUNK)]}
            return value

        new[key] = pack(state)
        lines = [{"hash": h, "value": v} for h, v in new.items()]
        append_durable(self.path, lines)
        objects.update((r["hash"], r["value"]) for r in json.loads(json.dumps(lines)))  # as a reader will see them
        return key

    def get(self, key: str) -> dict[str, Any]:
        objects = self._read(repair=False)
        expanded_size(objects, key, self.path)  # a DAG of bounded size and depth: unpacking it ends and fits

        def unpack(value: Any) -> Any:
            if isinstance(value, dict):
                if CHUNKS in value:
                    return [unpack(objects[ref]) for chunk in value[CHUNKS] for ref in objects[chunk]]
                return {k: unpack(v) for k, v in value.items()}
            return value

        return unpack(objects[key])

    def __contains__(self, key: str) -> bool:
        return key in self._read(repair=False)


# ---- the layout of a run directory ---------------------------------------------------------------------------------
@dataclass
class RunDir:
    """Every path of a run directory, and reading what any run directory (session, trial run, fork; old layouts too)
    holds. The only place that knows file names: everything else asks it."""

    path: Path
    SESSION_CONFIG: ClassVar[str] = "config.json"
    TRIAL_CONFIG: ClassVar[str] = "trials.json"
    EVENTS: ClassVar[str] = "events.jsonl"
    TASKS: ClassVar[str] = "tasks.jsonl"
    SNAPSHOTS: ClassVar[str] = "snapshots.jsonl"
    SUMMARY: ClassVar[str] = "summary.json"
    FORK: ClassVar[str] = "fork.json"
    PLAYED: ClassVar[str] = "episodes.jsonl"
    """A trainer's run directory: every episode it played, one record each with its training step."""
    LOCK: ClassVar[str] = ".lock"
    LEGACY_SNAPSHOTS: ClassVar[str] = "snapshots"
    """Sessions before content-addressed snapshots: snapshots/game_NNNN.json, one file per game."""
    FILES: ClassVar[dict[str, tuple[str, str]]] = {"session": (SESSION_CONFIG, EVENTS), "trials": (TRIAL_CONFIG, TASKS)}
    """Per kind of run: its config file and its records file."""

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.store = SnapshotStore(self.path / self.SNAPSHOTS)

    def config_file(self, kind: str) -> Path:
        return self.path / self.FILES[kind][0]

    def records_file(self, kind: str) -> Path:
        return self.path / self.FILES[kind][1]

    @property
    def session_config(self) -> Path:
        return self.config_file("session")

    @property
    def trial_config(self) -> Path:
        return self.config_file("trials")

    @property
    def events(self) -> Path:
        return self.records_file("session")

    @property
    def tasks(self) -> Path:
        return self.records_file("trials")

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
    def played(self) -> Path:
        return self.path / self.PLAYED

    def record_played(self, step: int, episodes: Sequence[Episode]) -> None:
        """The episodes a trainer played in `step`, made durable in one append (`read_durable` drops a torn tail;
        the trainer cuts the lines of steps after its last checkpoint when it resumes)."""
        append_durable(self.played, [{"type": "episode", "step": step, "episode": e.to_json()} for e in episodes])

    def legacy_snapshot(self, game: int) -> Path:
        return self.path / self.LEGACY_SNAPSHOTS / f"game_{game:04d}.json"

    @property
    def kind(self) -> str | None:
        """"trials", "session", "fork", or None where the directory holds no run."""
        for kind in ("trials", "session"):
            if self.config_file(kind).is_file():
                return kind
        return "fork" if self.fork.is_file() else None

    def config(self) -> RunConfig | TrialConfig:
        """The config of a session or trial run (configs written before `kind` existed take it from the file)."""
        kind = self.kind
        if kind not in self.FILES:
            raise FileNotFoundError(
                f"{self.path} is not a run directory (no {self.SESSION_CONFIG} or {self.TRIAL_CONFIG})"
            )
        data = read_json(self.config_file(kind))
        if not isinstance(data, dict):
            raise UntrustedFileError(f"{self.config_file(kind)} must hold a JSON object")
        return parse_config({**data, "kind": kind})

    def snapshot(self, key: str, legacy_game: int | None = None) -> dict[str, Any]:
        """The state stored under `key`; in an old session, the file of game `legacy_game` instead."""
        if key in self.store or legacy_game is None:
            return self.store.get(key)
        path = self.legacy_snapshot(legacy_game)
        if not path.exists():
            raise FileNotFoundError(f"no memory snapshot for game {legacy_game} in {self.path}")
        return read_json(path)["state"]

    def task_memory(self, record: dict[str, Any]) -> dict[str, Any]:
        """The memory state after a trial task: by hash, or embedded in records written before snapshots were
        stored by content."""
        return record["memory"] if "memory" in record else self.store.get(record["memory_hash"])

    def memory_after(self, index: int) -> dict[str, Any]:
        """The memory after unit `index` (a session's game, a trial run's finished task), as {"hash", "state"}: what
        `memory fork` copies and `memory diff` compares."""
        return Run.open(self.path, repair=False).snapshot(index)

    def latest_state(self) -> dict[str, Any]:
        """The state a run starting `--memory-from` this directory starts from: a fork's state, or the state after
        the last finished unit."""
        if self.kind == "fork":
            key = read_json(self.fork)["hash"]
            if key in self.store:
                return self.store.get(key)
            legacy = sorted((self.path / self.LEGACY_SNAPSHOTS).glob("game_*.json"))  # a fork of the old layout
            if legacy:
                return read_json(legacy[-1])["state"]
        elif self.kind is not None:
            run = Run.open(self.path, repair=False)
            if run.records:
                return run.snapshot(run.done)["state"]
        raise FileNotFoundError(f"{self.path} holds no memory snapshot")

    def write_fork(self, source: Path, index: int, snapshot: dict[str, Any]) -> None:
        """Make this (new) directory a fork holding `snapshot`, to start a run from with `--memory-from`."""
        self.path.mkdir(parents=True, exist_ok=False)
        key = self.store.put(snapshot["state"])
        write_atomic(self.fork, json.dumps({"source": str(source), "game": index, "hash": key}))


def latest_state(source: Path) -> dict[str, Any]:
    """The state of a snapshot file (the old one-file-per-game layout), or the latest state of a directory."""
    source = Path(source)
    if source.is_file():
        return read_json(source)["state"]
    return RunDir(source).latest_state()



@dataclass
class Run:
    """One run of either kind, read from and appended to its directory: the config and one record per finished unit
    (a session's "game" records, a trial run's task records). Every driver, reader and summary goes through it."""

    path: Path
    config: RunConfig | TrialConfig
    records: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.dir = RunDir(self.path)

    # ---- creation and reopening -------------------------------------------------------------------------------
    @classmethod
    def create(cls, path: Path, config: RunConfig | TrialConfig) -> Run:
        """A new run directory holding `config` (refused where any run or other file already is)."""
        run_dir = RunDir(path)
        if run_dir.kind is not None:
            raise FileExistsError(f"{path} already holds a run; use `ttlearn resume {path}` or another --out")
        leftovers = (RunDir.LOCK, RunDir.SESSION_CONFIG + ".tmp", RunDir.TRIAL_CONFIG + ".tmp")  # a creation killed
        if run_dir.path.exists() and any(p.name not in leftovers for p in run_dir.path.iterdir()):
            raise FileExistsError(f"{path} exists and is not a run directory; use another --out")
        run_dir.path.mkdir(parents=True, exist_ok=True)
        write_atomic(run_dir.config_file(config.kind), config.model_dump_json(indent=2))
        append_durable(run_dir.records_file(config.kind), [])
        return cls(run_dir.path, config)

    @classmethod
    def create_or_open(cls, path: Path, config: RunConfig | TrialConfig) -> Run:
        """Reopen the run at `path` when it holds `config` (to resume it; the ttlearn version aside), else create
        it."""
        if RunDir(path).kind is None:
            return cls.create(path, config)
        run = cls.open(path)
        differ = sorted(k for k, v in config.model_dump(exclude={"version"}).items() if run.config_dump().get(k) != v)
        if differ:
            raise FileExistsError(
                f"{path} holds a different {run.name} (other {', '.join(differ)}); resume it with its own config "
                "or use another --out"
            )
        return run

    @classmethod
    def open(cls, path: Path, repair: bool = True) -> Run:
        """Reopen a run, dropping any torn tail after its last finished unit.

        Readers of a run that may still be playing (reports) pass `repair=False`: they skip the tail, never cut it.
        """
        run = cls(Path(path), RunDir(path).config())
        records_file = run.dir.records_file(run.config.kind)
        ends = _is_game if run.unit == "game" else lambda record: True  # a task is one line; a game many
        found = read_durable(records_file, repair=repair, ends_block=ends) if records_file.exists() else []
        run.records = [r for r in found if ends(r)]
        return run

    def config_dump(self) -> dict[str, Any]:
        return self.config.model_dump(exclude={"version"})

    # ---- what a run is made of ---------------------------------------------------------------------------------
    @property
    def unit(self) -> str:
        """What one record is: a "game" (session) or a "task" (trial run)."""
        return "game" if self.config.kind == "session" else "task"

    @property
    def name(self) -> str:
        return "session" if self.unit == "game" else "trial run"

    @property
    def total(self) -> int:
        return self.config.games if isinstance(self.config, RunConfig) else self.config.total

    @property
    def done(self) -> int:
        return len(self.records)

    @property
    def finished(self) -> bool:
        return self.done >= self.total

    @property
    def episodes(self) -> list[Episode]:
        """A session's games (a trial run's attempts live in its task records)."""
        return [Episode.from_json(r["episode"]) for r in self.records if r.get("type") == "game"]

    @property
    def memory_hashes(self) -> list[str]:
        """The content hash of the state after each finished unit (None for old records that embed it)."""
        return [r.get("memory_hash") for r in self.records]

    # ---- recording -------------------------------------------------------------------------------------------
    def finish(self, record: dict[str, Any], state: dict[str, Any], events: Sequence[dict[str, Any]] = ()) -> None:
        """Make the next unit durable: its state into the snapshot store, then its events (a session's LLM calls and
        steps) and its record, which names the state by hash, in one append. Units are appended in order, whoever
        played them."""
        index = record.get("game", self.done + 1)
        if index != self.done + 1:
            raise ValueError(f"{self.unit} {index} finished out of order; {self.unit} {self.done + 1} is next")
        record = {**record, "memory_hash": self.dir.store.put(state)}
        block = [{"game": index, **event} for event in events]
        append_durable(self.dir.records_file(self.config.kind), [*block, record])
        self.records.append(record)

    def finish_game(self, episode: Episode, state: dict[str, Any], events: Sequence[dict[str, Any]] = ()) -> None:
        """A session's next game: its episode and the memory (and player) state after it."""
        self.finish({"type": "game", "game": episode.index, "episode": episode.to_json()}, state, events)

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_atomic(self.dir.summary, json.dumps(summary, indent=2))

    # ---- reading ---------------------------------------------------------------------------------------------
    def state_after(self, index: int) -> dict[str, Any]:
        """The stored state after unit `index` (1-based; a trial task's is its memory alone)."""
        record = self.records[index - 1]
        if self.unit == "task":
            return self.dir.task_memory(record)
        return self.dir.snapshot(record["memory_hash"], legacy_game=index)

    def snapshot(self, index: int) -> dict[str, Any]:
        """The memory (and, in a session, player) state after unit `index`, as {unit, "hash", "state"} with state
        {"memory": …}: what `memory fork` copies, `memory diff` compares and a resumed run starts from."""
        if not 1 <= index <= self.done:
            raise ValueError(f"{self.path} has {self.done} finished {self.unit}s; pick one between 1 and {self.done}")
        state = self.state_after(index)
        if self.unit == "task":
            state = {"memory": state}
            return {"task": index, "hash": canonical_hash(state), "state": state}
        return {"game": index, "hash": self.records[index - 1]["memory_hash"], "state": state}

    def events(self, game: int | None = None) -> Iterator[dict[str, Any]]:
        """A session's records file line by line (calls, steps, game records), of one game or all."""
        with open_regular(self.dir.events) as fh:
            for number, line in enumerate(lines(fh, self.dir.events), start=1):
                if not line.endswith(b"\n"):
                    return  # a torn tail, or a game being appended
                record = loads(line, f"{self.dir.events}:{number}")
                if isinstance(record, dict) and (game is None or record.get("game") == game):
                    yield record

    def calls(self, index: int | None = None) -> list[dict[str, Any]]:
        """The recorded LLM calls of finished unit `index`, or of every finished unit (what `replay` answers from),
        in order."""
        if self.unit == "task":
            records = self.records if index is None else [self.records[index - 1]]
            found = [c for r in records for c in r["calls"]]
        else:
            found = [e for e in self.events(index) if e.get("game", 0) <= self.done]
        return [c for c in found if c.get("type") == "call"]

    def outcomes(self) -> list[Any]:
        """What a replay must reproduce, unit by unit: a game's score; a task's first success (and its control's)
        and attempt scores."""
        if self.unit == "game":
            return [e.score for e in self.episodes]
        return [
            (r["first_success"], r.get("control_first_success"), [a["score"] for a in r["attempts"]])
            for r in self.records
        ]


# ---- arenas ------------------------------------------------------------------------------------------------------
ARENA_FILE = "arena.json"
RUNS_DIR = "runs"
"""An arena folder holds ARENA_FILE and RUNS_DIR/<label>/<opponent>/seed<k>/, one session run directory each."""
NO_OPPONENT = "default"
"""The opponent label of sequences in environments without opponents (puzzles): one directory level, same layout."""


TIMES = frozenset({"wall_s", "llm_s", "latency_s", "created"})
"""The wall-clock fields of records and memory states (durations, and a memory item's creation time): the only ones
two runs of the same work may disagree on — and the content hashes of states that hold them (`memory_hash`)."""


def without_times(value: Any) -> Any:
    """A record (or any JSON value) with its `TIMES` dropped at every depth: what two runs of the same work share."""
    if isinstance(value, dict):
        return {key: without_times(item) for key, item in value.items() if key not in TIMES}
    if isinstance(value, list):
        return [without_times(item) for item in value]
    return value


def read_tasks(out: Path, *, repair: bool = True) -> list[dict[str, Any]]:
    """The finished task records of a trial run directory (`read_durable`: a torn last line is dropped, and cut only
    when `repair`)."""
    path = RunDir(out).tasks
    return read_durable(path, repair=repair) if path.exists() else []


# ---- credentials -------------------------------------------------------------------------------------------------


def credential_urls(config: PartsConfig) -> dict[str, str]:
    """URL → the environment variable whose credential a run of `config` sends there: the memory service of `-m
    url=` (its key) and the base URL of every `openai:` LLM (OPENAI_API_KEY)."""
    urls = {}
    if config.memory_options.get("url"):
        urls[str(config.memory_options["url"]).rstrip("/")] = MEMORY_KEY_ENV
    for spec in (config.player, config.writer):
        if spec and spec.startswith("openai:"):
            urls[spec.removeprefix("openai:").partition("#")[0].rstrip("/")] = OPENAI_KEY_ENV
    return urls


def _store_trusted(store: str, source: Path, named: Iterable[str]) -> bool:
    """A store file inside the run directory, or one the user named again (a database URL exactly as written)."""
    if store in set(named):
        return True
    if "://" in store:
        return False
    path = Path(store).expanduser().resolve()
    return path.is_relative_to(source.resolve()) or path in {Path(n).expanduser().resolve() for n in named}


def check_trusted(
    config: PartsConfig,
    trusted: Iterable[str],
    source: Path,
    env: Mapping[str, str] = os.environ,
    stores: Iterable[str] = (),
) -> None:
    """Refuse to resume a config read from `source` (a run directory anyone may have written) that would send a
    credential set in `env` to a URL the user did not name again in `trusted`, or write into a memory store file
    outside `source` that the user did not name again in `stores`."""
    store = config.memory_options.get("store")
    if store is not None and not _store_trusted(str(store), Path(source), stores):
        shown = "a database" if "://" in str(store) else str(store)
        raise ValueError(
            f"{source} keeps its memory store outside the run directory ({shown}), and playing it would write there; "
            "if that store is yours, name it again: --trust-store STORE"
        )
    named = {url.rstrip("/") for url in trusted}
    for url, variable in credential_urls(config).items():
        if env.get(variable) and url not in named:
            raise ValueError(
                f"{source} would send {variable} to {url}, a URL read from the run directory; if you trust it, name "
                f"it again: --trust-url {url}"
            )
