"""Run records: the configs and the append-only directories that sessions and trial runs write, so that runs resume
exactly and every number can be recomputed offline. This is the layer both the playing code and `eval` stand on, and
`RunDir` is the one place that knows a run directory's layout.

A session (a sequence of games, the memory carried over):

    RUN_DIR/
      config.json            the RunConfig that built the session
      events.jsonl           every LLM call and step of every finished game, then one "game" record per game, which
                             names the memory (and player) state after the game by its content hash ("memory_hash")
      snapshots.jsonl        those states, stored once by content (`SnapshotStore`)
      summary.json           written when the run finishes

A game becomes durable when its "game" record is on disk: its events are buffered in memory while it is played and
written in one append, snapshot first. A process killed mid-game leaves at worst a torn last line, which `open`
truncates; the game is then replayed from its own seed, so no game is ever lost or duplicated.

A trial run (K task instances, N attempts each, LaMer's reflections in between; MemRL's epochs):

    OUT/trials.json       the TrialConfig
    OUT/tasks.jsonl       one record per finished instance: its attempts (steps, rewards, success), LLM calls, facts,
                          and the memory state after it by content hash ("memory_hash")
    OUT/snapshots.jsonl   those memory states, stored once by content
    OUT/summary.json      success@1..N, pass@1..N (memory off), trajectory entropy, instance-set ceilings

A task becomes durable in one appended line; a killed run leaves at most a torn last line, which reopening drops.

Older directories still read: sessions that kept one `snapshots/game_NNNN.json` per game, trial records that embed
their memory state ("memory"), and forks holding one such snapshot file (`RunDir` reads all three).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, ClassVar, Iterable, Iterator, Mapping, Sequence

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from ttlearn import __version__
from ttlearn.llm.base import DEFAULT_LLM
from ttlearn.registry import load_plugins, loaded_plugins
from ttlearn.types import Episode

MEMORY_KEY_ENV, OPENAI_KEY_ENV = "TTLEARN_MEMORY_KEY", "OPENAI_API_KEY"
"""Where the credentials a run sends live (read by `memory.remote` and `llm.openai`); never in a config."""


Plugins = Annotated[list[str], AfterValidator(lambda plugins: load_plugins(plugins, origin="a run config"))]
"""A config's plug-in modules (`--plugin`, `$TTLEARN_PLUGINS`; by default those loaded in this process), imported
again whenever the config is read, so `resume`, `replay` and the arena's workers find them. Entry-point plug-ins
need no record: they are found wherever they are installed."""


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


class TrialConfig(PartsConfig):
    """A multi-attempt run: `tasks` instances, `attempts` attempts each. Validated before any model loads."""

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
    moves_per_turn: int | None = Field(None, ge=1)
    """Scored decisions per turn for LLM players on choice-scoring back ends (Sokoban takes up to 3 moves a turn,
    scoring picks one); None: the environment's `actions_per_turn` (1 where it has none)."""

    @property
    def carries_memory(self) -> bool:
        return bool(self.carry_memory) or self.epochs > 1 or self.validation_tasks > 0

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


# ---- memory snapshots, stored once by content ----------------------------------------------------------------------
CHUNK = 64
"""Element references per stored piece of a list."""
CHUNKS = "$chunks"
"""The key of a list stored as pieces (the only key of its dict)."""


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
        if key not in objects:
            raise FileNotFoundError(f"no memory snapshot {key[:12]} in {self.path}")

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
    LOCK: ClassVar[str] = ".lock"
    LEGACY_SNAPSHOTS: ClassVar[str] = "snapshots"
    """Sessions before content-addressed snapshots: snapshots/game_NNNN.json, one file per game."""

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.store = SnapshotStore(self.path / self.SNAPSHOTS)

    @property
    def session_config(self) -> Path:
        return self.path / self.SESSION_CONFIG

    @property
    def trial_config(self) -> Path:
        return self.path / self.TRIAL_CONFIG

    @property
    def events(self) -> Path:
        return self.path / self.EVENTS

    @property
    def tasks(self) -> Path:
        return self.path / self.TASKS

    @property
    def summary(self) -> Path:
        return self.path / self.SUMMARY

    @property
    def fork(self) -> Path:
        return self.path / self.FORK

    @property
    def lock(self) -> Path:
        return self.path / self.LOCK

    def legacy_snapshot(self, game: int) -> Path:
        return self.path / self.LEGACY_SNAPSHOTS / f"game_{game:04d}.json"

    @property
    def kind(self) -> str | None:
        """"trials", "session", "fork", or None where the directory holds no run."""
        for kind, path in (("trials", self.trial_config), ("session", self.session_config), ("fork", self.fork)):
            if path.is_file():
                return kind
        return None

    def config(self) -> RunConfig | TrialConfig:
        """The config of a session or trial run."""
        kind = self.kind
        if kind == "trials":
            return TrialConfig.model_validate_json(self.trial_config.read_text())
        if kind == "session":
            return RunConfig.model_validate_json(self.session_config.read_text())
        raise FileNotFoundError(f"{self.path} is not a run directory (no {self.SESSION_CONFIG} or {self.TRIAL_CONFIG})")

    def snapshot(self, key: str, legacy_game: int | None = None) -> dict[str, Any]:
        """The state stored under `key`; in an old session, the file of game `legacy_game` instead."""
        if key in self.store or legacy_game is None:
            return self.store.get(key)
        path = self.legacy_snapshot(legacy_game)
        if not path.exists():
            raise FileNotFoundError(f"no memory snapshot for game {legacy_game} in {self.path}")
        return json.loads(path.read_text())["state"]

    def task_memory(self, record: dict[str, Any]) -> dict[str, Any]:
        """The memory state after a trial task: by hash, or embedded in records written before snapshots were
        stored by content."""
        return record["memory"] if "memory" in record else self.store.get(record["memory_hash"])

    def memory_after(self, index: int) -> dict[str, Any]:
        """The memory after game `index` of a session or finished task `index` of a trial run, as {"hash", "state"}
        with state {"memory": …} (and "player" for sessions): what `memory fork` copies and `memory diff` compares."""
        if self.kind == "trials":
            records = read_tasks(self.path, repair=False)
            if not 1 <= index <= len(records):
                count = len(records)
                raise ValueError(f"{self.path} has {count} finished tasks; pick one between 1 and {count}")
            state = {"memory": self.task_memory(records[index - 1])}
            return {"hash": canonical_hash(state), "state": state}
        return Run.open(self.path, repair=False).snapshot(index)

    def latest_state(self) -> dict[str, Any]:
        """The state a run starting `--memory-from` this directory starts from: a fork's state, or the state after
        the last finished game or task."""
        kind = self.kind
        if kind == "fork":
            key = json.loads(self.fork.read_text())["hash"]
            if key in self.store:
                return self.store.get(key)
            legacy = sorted((self.path / self.LEGACY_SNAPSHOTS).glob("game_*.json"))  # a fork of the old layout
            if legacy:
                return json.loads(legacy[-1].read_text())["state"]
        elif kind == "trials":
            records = read_tasks(self.path, repair=False)
            if records:
                return self.memory_after(len(records))["state"]
        elif kind == "session":
            run = Run.open(self.path, repair=False)
            if run.episodes:
                return run.snapshot(len(run.episodes))["state"]
        raise FileNotFoundError(f"{self.path} holds no memory snapshot")

    def write_fork(self, source: Path, index: int, snapshot: dict[str, Any]) -> None:
        """Make this (new) directory a fork holding `snapshot`, to start a run from with `--memory-from`."""
        self.path.mkdir(parents=True, exist_ok=False)
        key = self.store.put(snapshot["state"])
        self.fork.write_text(json.dumps({"source": str(source), "game": index, "hash": key}))


def latest_state(source: Path) -> dict[str, Any]:
    """The state of a snapshot file (the old one-file-per-game layout), or the latest state of a directory."""
    source = Path(source)
    if source.is_file():
        return json.loads(source.read_text())["state"]
    return RunDir(source).latest_state()


@dataclass
class Run:
    path: Path
    config: RunConfig
    episodes: list[Episode] = field(default_factory=list)
    memory_hashes: list[str] = field(default_factory=list)
    """The content hash of the state after each finished game."""

    def __post_init__(self) -> None:
        self.dir = RunDir(self.path)

    # ---- creation and reopening -------------------------------------------------------------------------------
    @classmethod
    def create(cls, path: Path, config: RunConfig) -> Run:
        run_dir = RunDir(path)
        if run_dir.session_config.exists():
            raise FileExistsError(f"{path} already holds a run; use `ttlearn resume {path}` or another --out")
        run_dir.path.mkdir(parents=True, exist_ok=True)
        write_atomic(run_dir.session_config, config.model_dump_json(indent=2))
        run_dir.events.touch()
        return cls(run_dir.path, config)

    @classmethod
    def open(cls, path: Path, repair: bool = True) -> Run:
        """Reopen a run, dropping any torn tail after its last finished game.

        Readers of a run that may still be playing (reports) pass `repair=False`: they skip the tail, never cut it.
        """
        run_dir = RunDir(path)
        if not run_dir.session_config.exists():
            raise FileNotFoundError(f"{path} is not a run directory (no {RunDir.SESSION_CONFIG})")
        run = cls(run_dir.path, RunConfig.model_validate_json(run_dir.session_config.read_text()))
        games = [r for r in read_durable(run_dir.events, repair=repair, ends_block=_is_game) if _is_game(r)]
        run.episodes = [Episode.from_json(r["episode"]) for r in games]
        run.memory_hashes = [r["memory_hash"] for r in games]
        return run

    # ---- recording -------------------------------------------------------------------------------------------
    def finish_game(self, episode: Episode, state: dict[str, Any], events: Sequence[dict[str, Any]] = ()) -> None:
        """Make the next game durable: snapshot, then its events (LLM calls, steps) and game record in one append.
        Games are appended in order, whoever played them."""
        if episode.index != len(self.episodes) + 1:
            raise ValueError(f"game {episode.index} finished out of order; game {len(self.episodes) + 1} is next")
        key = self.dir.store.put(state)
        block = [{"game": episode.index, **event} for event in events]
        block.append({"type": "game", "game": episode.index, "episode": episode.to_json(), "memory_hash": key})
        append_durable(self.dir.events, block)
        self.episodes.append(episode)
        self.memory_hashes.append(key)

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_atomic(self.dir.summary, json.dumps(summary, indent=2))

    # ---- reading ---------------------------------------------------------------------------------------------
    def snapshot(self, game: int) -> dict[str, Any]:
        """The memory (and player) state after `game`, as {"game", "hash", "state"}."""
        if not 1 <= game <= len(self.memory_hashes):
            count = len(self.memory_hashes)
            raise ValueError(f"{self.path} has {count} finished games; pick one between 1 and {count}")
        key = self.memory_hashes[game - 1]
        return {"game": game, "hash": key, "state": self.dir.snapshot(key, legacy_game=game)}

    def events(self, game: int | None = None) -> Iterator[dict[str, Any]]:
        with open(self.dir.events, encoding="utf-8") as fh:
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
def read_tasks(out: Path, *, repair: bool = True) -> list[dict[str, Any]]:
    """The finished task records of a run directory (`read_durable`: a torn last line is dropped, and cut only when
    `repair`)."""
    path = RunDir(out).tasks
    return read_durable(path, repair=repair) if path.exists() else []


def append_task(run_dir: RunDir, record: dict[str, Any]) -> dict[str, Any]:
    """Make a finished task durable: its memory state ("memory") into the snapshot store, then the record, which
    names the state by hash. Returns the record as written."""
    stored = {k: v for k, v in record.items() if k != "memory"}
    stored["memory_hash"] = run_dir.store.put(record["memory"])
    append_durable(run_dir.tasks, [stored])
    return stored


def open_trial_dir(out: Path, config: TrialConfig) -> list[dict[str, Any]]:
    """Create the directory, or reopen it when it holds the same config; returns the tasks already finished."""
    run_dir = RunDir(out)
    if run_dir.trial_config.exists():
        saved = TrialConfig.model_validate_json(run_dir.trial_config.read_text())
        if saved != config:
            raise FileExistsError(
                f"{out} holds a different trial run; resume it with its own config or use another --out"
            )
        return read_tasks(out)
    if run_dir.path.exists() and any(run_dir.path.iterdir()):
        raise FileExistsError(f"{out} exists and is not a trial run directory")
    run_dir.path.mkdir(parents=True, exist_ok=True)
    run_dir.trial_config.write_text(config.model_dump_json(indent=2))
    return []


def write_trial_summary(out: Path, summary: dict[str, Any]) -> None:
    write_atomic(RunDir(out).summary, json.dumps(summary, indent=2))


def load_trial_config(out: Path) -> TrialConfig:
    """The config of a trial run directory, to resume it with `run_trials(load_trial_config(out), out)`."""
    path = RunDir(out).trial_config
    if not path.exists():
        raise FileNotFoundError(f"{out} is not a trial run directory (no {RunDir.TRIAL_CONFIG})")
    return TrialConfig.model_validate_json(path.read_text())


def is_trial_dir(path: Path) -> bool:
    return RunDir(path).kind == "trials"


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


def check_trusted(
    config: PartsConfig, trusted: Iterable[str], source: Path, env: Mapping[str, str] = os.environ
) -> None:
    """Refuse to resume a config read from `source` (a run directory anyone may have written) that would send a
    credential set in `env` to a URL the user did not name again in `trusted`."""
    named = {url.rstrip("/") for url in trusted}
    for url, variable in credential_urls(config).items():
        if env.get(variable) and url not in named:
            raise ValueError(
                f"{source} would send {variable} to {url}, a URL read from the run directory; if you trust it, name "
                f"it again: --trust-url {url}"
            )
