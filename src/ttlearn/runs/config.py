"""A run's config: one `RunConfig` for every run, whatever its unit is. A unit is one task instance with
`attempts` attempts (LaMer's reflections in between); an epoch is one pass over the units. A game is a unit with one
attempt and the memory carried from each game to the next (`games`, the preset of `--games N`). The config checks
what needs no registry itself (`check`), and decides once, in `resolved`, every default that depends on the
environment or the memory, so `ttlearn run ENV` and `RunConfig(env=ENV)` mean the same run."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ttlearn.envs.base import ENVS, recorded_defaults
from ttlearn.llm.base import DEFAULT_LLM, credential_target, split_spec
from ttlearn.memory.base import MEMORIES, MEMORY_KEY_ENV, STORE_PASSWORD_ENV, url_password
from ttlearn.registry import PLUGINS_VAR, PluginError, UnknownNameError, loaded_plugins
from ttlearn.types import NoteAt
from ttlearn.version import __version__

Plugins = list[str]
"""A config's plug-in modules (`--plugin`, `$TTLEARN_PLUGINS`; by default those loaded in this process), recorded
so that a run needing one can say which (`missing_plugins`). Never imported because a config names them: a run
directory may come from anyone. Entry-point plug-ins need no record: they are found wherever they are installed."""

LAMER_ATTEMPTS = 3
"""Attempts per unit when none are asked for and nothing carries from unit to unit: LaMer's protocol."""

Seeding = Literal["unit", "trials-v1", "session-v1"]
"""How a run derives its seeds (`rollout.unit.unit_seeds`): "unit" for runs made today; the two rules of the
directories written before one config existed keep them replaying exactly (`runs.legacy`)."""


def default_player(env: str) -> str:
    """The player of a run of `env` that names none: the environment's declared `default_player`, else the default
    LLM (the embedded model that follows a memory note)."""
    return ENVS.get(env).default_player or DEFAULT_LLM


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

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)  # an input may hold a credential

    env: str
    env_options: dict[str, Any] = Field(default_factory=dict)
    memory: str = "none"
    memory_options: dict[str, Any] = Field(default_factory=dict)
    player: str | None = None
    """LLM spec or `scripted:NAME`; None: the environment's default (`default_player`), decided by `resolved`."""
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
    note_at: NoteAt = "system"
    """LLM players: where the memory's text is shown (`players.llm.NOTE_AT`); "system" is how every earlier run
    played."""
    plugins: Plugins = Field(default_factory=loaded_plugins)

    @field_validator("memory_options")
    @classmethod
    def _no_credentials(cls, options: dict[str, Any]) -> dict[str, Any]:
        """A config is written into run directories and snapshots: a memory service key or a store's password must
        never be in it."""
        if "key" in options:
            raise ValueError(
                f"memory option key= is a credential and is never recorded in a run: set {MEMORY_KEY_ENV} instead "
                "(ttlearn run/resume take -m key=KEY and keep it out of the run directory)"
            )
        for name in ("store", "url"):
            if isinstance(options.get(name), str) and url_password(options[name]) is not None:
                where = STORE_PASSWORD_ENV if name == "store" else MEMORY_KEY_ENV
                raise ValueError(
                    f"memory option {name}= holds a password, a credential that is never recorded in a run: drop it "
                    f"from the URL and set {where} instead (ttlearn run -m {name}=… keeps it out of the directory)"
                )
        return options

    @field_validator("player", "writer")
    @classmethod
    def _no_llm_credentials(cls, spec: str | None) -> str | None:
        """An LLM spec is recorded and shown like the rest of the config, and a password in its URL's user part
        (`openai:http://user:PASSWORD@host/v1#model`) would also be sent as Basic auth in place of the key."""
        if spec is not None and url_password(split_spec(spec)[1]) is not None:
            target = credential_target(spec)
            where = target[1] if target else "the variable its back end reads its key from"
            raise ValueError(
                f"the LLM spec holds a password in its URL, a credential that is never recorded in a run: drop it "
                f"from the URL and set {where} instead"
            )
        return spec


class RunConfig(PartsConfig):
    """Every run: `units` task instances (games), `attempts` attempts each; `epochs` passes over them; the memory
    carried from unit to unit or fresh for each; a paired control arm; held-out validation units. Defaults that
    depend on the memory are decided once (`resolved`) and recorded."""

    units: int = Field(6, ge=1)
    attempts: int | None = Field(None, ge=1)
    """Attempts per unit; None: 1 when the memory carries from unit to unit (games, MemRL's runtime learning), else
    LaMer's 3."""
    carry_memory: bool | None = None
    """The memory (and a learning player) carries from unit to unit instead of starting fresh for each (always so
    with `epochs` > 1 or held-out validation). None: as the memory declares (`Memory.learns_across_tasks`);
    `resolved` decides it."""
    early_stop: bool | None = None
    """Stop a unit at its first success; None: stop with a memory, play every attempt with memory "none" (decided by
    `resolved`)."""
    epochs: int = Field(1, ge=1)
    """MemRL's protocol: play the same units this many times, the memory carried; the summary adds last-epoch and
    cumulative success."""
    control: bool = False
    """Also play every unit without memory — the same instance and decision seeds, nothing in the memory slot — as
    the paired control the summary compares against (in the last epoch)."""
    validation_tasks: int = Field(0, ge=0)
    """MemRL's transfer measure: after every epoch, play this many held-out instances from the epoch's memory (their
    own writes are not carried on); the summary adds best-validation success."""
    validation_env_options: dict[str, Any] = Field(default_factory=dict)
    """Environment options of the held-out instances, over `env_options` (e.g. {"split": "test"})."""
    memory_from: str | None = None
    """A snapshot file or run directory whose latest memory state every unit starts from (the first, when the
    memory carries)."""
    seeding: Seeding = "unit"
    version: str = __version__

    @property
    def total(self) -> int:
        return (self.units + self.validation_tasks) * self.epochs

    def position(self, index: int) -> tuple[str, int, int]:
        """(phase, epoch, task) of the index-th unit played (1-based): each epoch plays tasks 1..K ("task"), then its
        held-out instances 1..V ("validation")."""
        per_epoch = self.units + self.validation_tasks
        epoch, offset = (index - 1) // per_epoch + 1, (index - 1) % per_epoch + 1
        return ("task", epoch, offset) if offset <= self.units else ("validation", epoch, offset - self.units)

    def validation_config(self) -> RunConfig:
        """The parts config of the held-out instances."""
        return self.model_copy(update={"env_options": {**self.env_options, **self.validation_env_options}})

    def control_config(self) -> RunConfig:
        """The parts config of the control arm: the same player, nothing in the memory slot."""
        return self.model_copy(update={"memory": "none", "memory_options": {}})

    def resolved(self) -> RunConfig:
        """This config with every "as the environment or memory declares" default decided, as the run directory
        records it: the environment's default player, today's default of each environment option whose default
        changed (`recorded_defaults`), the family's preset (a preset named like the environment), whether the memory
        carries (always with `epochs` > 1 or held-out validation), the attempts and the early stop. Idempotent."""
        memory = MEMORIES.get(self.memory)
        carry = memory.learns_across_tasks if self.carry_memory is None else self.carry_memory
        carry = carry or self.epochs > 1 or self.validation_tasks > 0
        preset = {"preset": self.env} if self.env in memory.presets else {}
        return self.model_copy(
            update={
                "player": self.player or default_player(self.env),
                "env_options": {**recorded_defaults(self.env), **self.env_options},
                "memory_options": {**preset, **self.memory_options},
                "carry_memory": carry,
                "attempts": self.attempts or (1 if carry else LAMER_ATTEMPTS),
                "early_stop": self.memory != "none" if self.early_stop is None else self.early_stop,
            }
        )

    def check(self) -> None:
        """The one check of what the fields allow together, and of what the memory's declared capabilities refuse
        (each error says what to do); the driver calls it on every config it plays, however it was built."""
        if self.control and self.memory == "none":
            raise ValueError("--control plays every unit without memory, which is what memory 'none' already does")
        memory = MEMORIES.get(self.memory)
        if memory.needs_trials and self.attempts == 1:
            raise ValueError(
                f"memory {self.memory!r} reflects between attempts at one instance: give --attempts N (N > 1)"
            )
        if self.memory_options.get("url") and (not self.carry_memory or self.validation_tasks):
            raise ValueError(
                "a memory service namespace (url=) is shared and a run cannot reset it: independent units would "
                "share one memory and held-out validation would write into it; run with --carry-memory and no "
                "--validation-tasks, or keep the memory local (drop url=)"
            )


def games(count: int) -> dict[str, Any]:
    """The unit options of a session of `count` games (`--games N`, an arena's `games: N`): one attempt per unit,
    the memory (and a learning player) carried from each game to the next."""
    return {"units": count, "attempts": 1, "carry_memory": True}


def parse_recorded(data: dict[str, Any]) -> RunConfig:
    """The config a run directory recorded: an environment option it does not name plays as it did when the run was
    recorded (`Env.legacy_options`; runs made today name each one: `resolved`)."""
    config = parse_config(data)
    try:
        then = ENVS.get(config.env).legacy_options
    except (UnknownNameError, PluginError):  # a plug-in not loaded: the run cannot play, and says which flag
        return config
    return config.model_copy(update={"env_options": {**then, **config.env_options}})


def parse_config(data: dict[str, Any]) -> RunConfig:
    """A validated config, a bad value reported in one line naming the field."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        raise ValueError(f"{where}: {message}" if where else message) from None
