"""The memory protocol: what carries over from one episode to the next.

A memory answers `context(query)` with the text the player sees (the query describes the current situation, so
retrieval memories can use it), learns in `observe(episode)`, and round-trips its whole state through JSON with
`state()` / `load()` so the memory after every unit can be snapshotted, forked and rolled back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

from ttlearn.llm.base import LLM
from ttlearn.registry import Registry
from ttlearn.types import Episode

MEMORY_KEY_ENV = "TTLEARN_MEMORY_KEY"
"""Where the key of a memory service namespace lives (`-m key=` sets it): never in a config or run directory."""
STORE_PASSWORD_ENV = "PGPASSWORD"
"""Where a PostgreSQL store's password lives (libpq reads it, or ~/.pgpass): never in a config or run directory."""


CREDENTIAL_PARAMETERS = ("password", "sslpassword")
"""The query parameters of a URL that hold a credential: libpq reads `?password=` as the password, as it reads the
user part's, and `?sslpassword=` as the pass phrase of the client's key."""


def _split(url: str) -> SplitResult:
    try:
        return urlsplit(url)
    except ValueError as exc:  # never the URL itself in the message: it may hold a password
        raise ValueError(
            f"a URL that cannot be read ({exc}): correct it, since a password in it could not be kept out of records"
        ) from None


def _credential(parameter: str) -> str | None:
    """The credential parameter a query's `key=value` part sets (keys percent-decoded, as libpq decodes them)."""
    key = unquote(parameter.partition("=")[0]).lower()
    return key if key in CREDENTIAL_PARAMETERS else None


def url_password(url: str) -> str | None:
    """The password a URL carries — in its user part (`scheme://user:PASSWORD@host/…`) or its query
    (`…?password=PASSWORD`, which libpq reads too) — None when it holds none or is no URL. Refused (ValueError) when it
    cannot be moved into STORE_PASSWORD_ENV: two different passwords, or an `sslpassword=`, which libpq reads from no
    environment variable."""
    if "://" not in url:
        return None
    parts = _split(url)
    found = [] if parts.password is None else [unquote(parts.password)]
    for parameter in parts.query.split("&"):
        if _credential(parameter) == "sslpassword":
            raise ValueError(
                "the URL holds sslpassword=, a credential that is never recorded nor shown: drop it and name a service "
                "(?service=NAME) whose service file (PGSERVICEFILE) holds it"
            )
        if _credential(parameter) == "password":
            found.append(unquote(parameter.partition("=")[2]))
    if len(set(found)) > 1:
        raise ValueError(f"the URL holds {len(found)} different passwords; drop them and set {STORE_PASSWORD_ENV}")
    return found[0] if found else None


def without_password(url: str) -> str:
    """`url` as it may be recorded and shown: without the password of its user part (`scheme://user@host/…`) and
    without any credential parameter of its query; anything else as is."""
    if "://" not in url:
        return url
    parts = _split(url)
    query = [parameter for parameter in parts.query.split("&") if _credential(parameter) is None]
    if parts.password is None and len(query) == len(parts.query.split("&")):
        return url
    user, _, host = parts.netloc.rpartition("@")
    netloc = f"{user.partition(':')[0]}@{host}" if user else host
    return urlunsplit(parts._replace(netloc=netloc, query="&".join(query)))


MEMORIES: Registry[type["Memory"]] = Registry(
    "memory method",
    "ttlearn.memories",
    {
        "cheatsheet": "ttlearn.memory.cheatsheet:CumulativeCheatsheet",
        "cheatsheet-rs": "ttlearn.memory.cheatsheet:RetrievalSynthesisCheatsheet",
        "expel": "ttlearn.memory.expel:ExpelMemory",
        "history": "ttlearn.memory.history:HistoryMemory",
        "lamer": "ttlearn.memory.lamer:LamerMemory",
        "memopilot": "ttlearn.memory.memopilot:MemoPilotMemory",
        "memp": "ttlearn.memory.memrl:MemPMemory",
        "memrl": "ttlearn.memory.memrl:MemRLMemory",
        "none": "ttlearn.memory.none:NoMemory",
        "rag": "ttlearn.memory.memrl:RAGMemory",
        "reflexion": "ttlearn.memory.reflexion:ReflexionMemory",
        "verified-moves": "ttlearn.memory.verified:VerifiedMovesMemory",
    },
)


class Memory(ABC):
    name: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        MEMORIES.name_class(cls)  # a class of the package takes its name from the table

    needs_llm: ClassVar[bool] = False
    """True when `observe` writes with an LLM (the builder then hands it a recorded writer, `rollout.parts`)."""
    keeps_files: ClassVar[bool] = False
    """True when the memory lives in files of its own under the run directory (MemRL's store): one per run, so two
    copies in flight would overwrite each other's state."""
    learns_across_tasks: ClassVar[bool] = False
    """True when the method learns from task to task (MemRL, MemP, RAG, ExpeL, both Dynamic Cheatsheets): a run then
    carries it from each unit to the next, one attempt per unit (MemRL's protocol), unless told not to
    (`RunConfig.resolved`; `ttlearn list` marks these memories)."""
    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    """Named settings (`-m preset=NAME`); a preset named like the environment is that family's default."""
    carries_over: ClassVar[bool] = True
    """False when `context` never depends on what was observed (`none`): its episodes are then independent and may
    be played concurrently."""
    needs_trials: ClassVar[bool] = False
    """True when the memory only makes sense between attempts at the same instance (LaMer's reflections): a run of
    it needs more than one attempt per unit (`RunConfig.check`)."""

    def __init__(self, llm: LLM | None = None) -> None:
        self.llm = llm

    def bind_run(self, store: Path, run_id: str) -> None:  # noqa: B027 - optional hook
        """Called once by the builder: the run's own store file and the run's id, for memories that keep files of
        their own (MemRL)."""

    @abstractmethod
    def context(self, query: str) -> str:
        """Text shown to the player before acting; empty when the memory has nothing to say."""

    @abstractmethod
    def observe(self, episode: Episode) -> None:
        """Learn from a finished episode."""

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """The whole learnable state as JSON-ready data."""

    @abstractmethod
    def load(self, state: dict[str, Any]) -> None:
        """Restore a state produced by `state()`."""


def make_memory(name: str, llm: LLM | None = None, **options: Any) -> Memory:
    """Build a registered memory method; `llm` is its writer (required when the method `needs_llm`)."""
    if MEMORIES.get(name).needs_llm and llm is None:
        raise ValueError(f"memory {name!r} writes with an LLM; give it one")
    return MEMORIES.build(name, reserved=("llm",), llm=llm, **options)
