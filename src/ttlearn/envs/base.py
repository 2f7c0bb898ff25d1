"""The environment protocol: a Gymnasium-sized interface over text games and tasks.

An `Env` is one *sequence* of episodes against fixed conditions (for RPS: one opponent; for `code`: one split of
HumanEval). `reset(seed)` starts a new episode instance, `restart()` replays the same instance from its initial state
(multi-attempt trials), `step(action)` advances it. Everything is deterministic given the constructor options and
the seed, unless the class declares `deterministic = False` (a real simulator; `check_env` then checks the rest).

Required: `describe, reset, restart, step, legal_actions, score`. Everything below the line "optional capabilities"
has a working default; an environment overrides what it has. These are all the play loop, the unit player, the
scripted players and the reports may rely on — nothing is looked up by name elsewhere.

Rules the runners rely on:
- The constructor takes every option as a keyword, and always `seed=` (the run's seed; the runners pass it, so
  accept it even if instances are seeded by `reset`). However it is built, an environment records the options it was
  given and `config()` returns them, so a twin or a resumed run rebuilds the same environment; an option that bounds
  a resource is refused past its ceiling (`ceilings.CEILINGS`).
- Building an environment and `instance_count()` are cheap (milliseconds): validation builds one before any model
  loads, and `check_env` builds a twin. Start a simulator's process lazily, on the first `reset`.
- `close()` releases what the environment started; whoever builds one (the runners, validation, `check_env`)
  calls it.
"""

from __future__ import annotations

import inspect
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from ttlearn.envs.ceilings import check_ceilings
from ttlearn.registry import Registry
from ttlearn.types import Observation, StepResult

ENVS: Registry[type["Env"]] = Registry(
    "environment",
    "ttlearn.envs",
    {
        "code": "ttlearn.envs.code:CodeEnv",
        "db_bench": "ttlearn.envs.db_bench:DBBench",
        "holdem": "ttlearn.envs.holdem:HoldemEnv",
        "household": "ttlearn.envs.household:Household",
        "minesweeper": "ttlearn.envs.minesweeper:Minesweeper",
        "rps": "ttlearn.envs.rps:RPSEnv",
        "sokoban": "ttlearn.envs.sokoban:Sokoban",
        "sql": "ttlearn.envs.sql:SQLEnv",
        "tools": "ttlearn.envs.tools:Tools",
    },
)

_WORD = re.compile(r"[a-z0-9]+")
_TAGGED = re.compile(r"<(action|answer)>(.*?)</\1>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"</?(action|answer)>", re.IGNORECASE)


def words(text: str) -> list[str]:
    """The lower-case words of `text`, punctuation dropped: how replies and actions are compared."""
    return _WORD.findall(text.lower())


def _normalise(text: str) -> str:
    return " ".join(words(text))


def answer_part(text: str) -> str:
    """The content of the last <action>…</action> or <answer>…</answer> block, else the whole reply, with any stray
    tag removed. Models that reason before answering mention moves they reject; the tagged block is what they chose
    (the LLM player asks for that format when it lets the model think first)."""
    blocks = _TAGGED.findall(text)
    return _TAG.sub(" ", blocks[-1][1] if blocks else text).strip()


def match_legal_action(text: str, legal_actions: Sequence[str]) -> str | None:
    """The legal action a free-text reply names, or None.

    An exact match (ignoring case and punctuation) wins; otherwise the legal action mentioned earliest in the reply,
    matched on word boundaries, longest first so "raise" is not read out of "raised" and "call" beats nothing.
    """
    if not legal_actions:
        return None
    reply = _normalise(text)
    by_norm = {_normalise(a): a for a in legal_actions}
    if reply in by_norm:
        return by_norm[reply]
    best: tuple[int, int, str] | None = None
    padded = f" {reply} "
    for norm, action in by_norm.items():
        if not norm:
            continue
        pos = padded.find(f" {norm} ")
        if pos >= 0:
            candidate = (pos, -len(norm), action)
            if best is None or candidate < best:
                best = candidate
    return best[2] if best else None


class Env(ABC):
    name: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        ENVS.name_class(cls)  # a class of the package takes its name from the table

    _made_with: dict[str, Any]
    """The options this environment was built with (`config()`)."""

    def __new__(cls, *args: Any, **options: Any) -> Env:
        """Record the options the environment is built with, however it is built (`make_env`, the class itself, a
        twin), after refusing one past its ceiling: every way an option comes in passes here."""
        env = super().__new__(cls)
        given = inspect.signature(cls.__init__).bind_partial(env, *args, **options).arguments
        given.pop(next(iter(given)))  # self
        check_ceilings(getattr(cls, "name", cls.__name__), given)
        env._made_with = dict(given)
        return env

    actions_per_turn: int = 1
    """How many moves one `step` may carry (Sokoban: up to 3, comma-separated). A choice-scoring player composes a
    turn of this many single-move decisions."""
    turns: int | None = None
    """The most steps one attempt can take, where the environment has a fixed budget (puzzles); None otherwise."""
    reply_tokens: int = 16
    """How long a reply may be: a word for games, a whole function for `code`. The LLM player's `max_tokens`."""
    deterministic: ClassVar[bool] = True
    """False for a simulator that may differ between two processes given the same options, seed and moves (a room's
    contents listed in another order, a sensor's reading): `check_env` then skips the checks that need equality and
    says so, and `resume` / `replay` warn that such a run is not reproduced exactly."""
    partial_actions: ClassVar[bool] = False
    """True when `legal_actions()` is a hint — some of the commands `step` accepts, possibly thousands — rather than
    all of them. `step` must then answer any command (one it cannot apply as the simulator would: "nothing
    happens"), and the default `parse_action` passes a reply that names no listed action on as a command."""

    reply_prefix: str = ""
    """The opening every free-text reply should start with (sql: the ```sql fence), or "": a player may write it
    into the reply itself (a prefill) so that a small model answers in the format instead of about it."""
    default_player: ClassVar[str | None] = None
    """The LLM spec that plays this environment when a run names none, chosen by measurement (docs/models.md: the
    coder model writes code and SQL); None: the package's default player, the embedded model that follows a note."""
    trajectory_discount: ClassVar[float | None] = None
    """LaMer's γ_traj here: how much the later attempts' returns count in an earlier attempt's, as the authors'
    released training scripts set it for this environment; None: none published (`ttlearn train lamer` then asks for
    one)."""
    legacy_options: ClassVar[dict[str, Any]] = {}
    """Options whose default changed, with the value a run recorded before the change played (sql: `metric`). A run
    directory's config that does not name one plays that value (`runs.config.parse_recorded`), and a new run records
    today's default of each (`recorded_defaults`), so an old run rebuilds its environment as it played, a new one
    keeps today's rules, and a config built in Python gets today's everywhere."""

    @abstractmethod
    def describe(self) -> str:
        """Rules text for the prompt: what the game is and how actions are written."""

    @abstractmethod
    def reset(self, seed: int) -> Observation:
        """Start a fresh episode instance determined by `seed`."""

    @abstractmethod
    def restart(self) -> Observation:
        """Return to the initial state of the current instance (same cards, same level, same opponent state)."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply one action; raises ValueError for one the environment cannot apply (the player validates first)."""

    @abstractmethod
    def legal_actions(self) -> tuple[str, ...]:
        """The exact action strings accepted now; empty when actions are free text (code, SQL, tool calls)."""

    @abstractmethod
    def score(self) -> float:
        """The episode's headline number (RPS: net wins; hold'em: big blinds; puzzles: total reward)."""

    # ---- optional capabilities ------------------------------------------------------------------------------------
    def success(self) -> bool | None:
        """Whether the episode counts as solved, for environments where that is defined."""
        return None

    def task(self) -> str:
        """A short description of the current instance, used as a retrieval key by memories."""
        return self.describe()

    def transcript(self) -> str:
        """A compact text log of the current episode, for memories that write about it (reflections, insights).

        It holds only what the agent itself saw or did: never a solution, a gold answer or an instance ceiling
        (those go to `instance_stats`). The contract test checks it."""
        return ""

    def format_answer(self, actions: Sequence[str]) -> str:
        """The agent's own actions of a finished episode written as it would write them, for memories that keep a
        verified answer (MemRL's `write=answer`): one action per line by default; free-text environments show the
        final answer in the format their rules ask for. Never gold data: only what the agent did."""
        return "\n".join(actions)

    def instance_stats(self) -> dict[str, Any]:
        """Facts about the current instance that only reports may see: ceilings (Sokoban's optimal length,
        Minesweeper's fewest reveals), the data split, the task id."""
        return {}

    def instance_count(self) -> int | None:
        """How many instances the configured split holds, for finite task sets (HumanEval, Spider): `reset(seed)`
        then plays instance `seed % count`, and runners draw distinct instances by index. None: every seed is a new
        generated instance."""
        return None

    def parse_action(self, text: str, legal_actions: Sequence[str]) -> str | None:
        """The action a free-text reply means, or None when it means none. The default reads the reply's last
        <action>…</action> block (else the whole reply) and matches a legal action in it; where the list is
        `partial_actions` it takes that part's first line as the command. Environments with free-text or multi-move
        actions document their own rule here."""
        answer = answer_part(text)
        action = match_legal_action(answer, legal_actions)
        if action is None and self.partial_actions:
            action = next((line.strip() for line in answer.splitlines() if words(line)), None)
        return action

    def action_tier(self, action: str) -> int | None:
        """Where a player that shows only some of the legal actions (the LLM player's shortlist of `max_options`)
        should put `action`: lower tiers first, an action of tier 0 pinned (shown whenever the shortlist has room),
        and within a tier the actions most like the observation first. None: never shown (the model may still type
        it where the list is `partial_actions`). The default puts every action in tier 1, so the shortlist is by
        likeness alone. A simulator with hundreds of moves pins navigation and observation ("open door to kitchen",
        "look around") and puts moves that end the task, or that are rarely useful, last."""
        return 1

    def conversation(self, memory: str) -> list[dict[str, str]] | None:
        """The whole prompt as the benchmark's own harness sends it, the memory's text placed where that harness puts
        it, or None (the default): the player builds the prompt from `describe()`, the memory and the observation.
        For benchmarks whose protocol is a chat (db_bench: a system prompt, an instruction turn, the question, then
        each reply and the server's answer), so a model meets the prompts the published results were measured with."""
        return None

    def invalid_step(self, reply: str) -> StepResult | None:
        """What a reply that names no action does. None (the default): the player falls back to a random legal
        action, counted invalid — for games where a move is compulsory. Puzzles and tasks pass the turn with no move
        and a small penalty instead (LaMer: −0.1), so an unparseable answer costs something."""
        return None

    def state_key(self) -> str | None:
        """The current state of the instance alone (Sokoban: player and boxes; Minesweeper: the revealed cells), with
        no turn counter, log or score: two moments that show the same board give the same key. GiGPO groups the
        steps taken from one state by it. None (the default): the environment names no state."""
        return None

    readings: ClassVar[tuple[str, ...]] = ()
    """The readings of an opponent this environment turns into advice (`advice`), in the words a note names them:
    RPS the move the opponent plays most, hold'em its style. Empty (the default): none."""

    def advice(self, reading: str) -> str:
        """What to do against an opponent read as `reading` (one of `readings`), as a note says it ("play paper"). A
        note that names only the reading (MemoPilot's `favourite` form) is completed with it, so the next game's
        reward credits the reading itself; the environment states it, nobody parses it out of the rules."""
        raise NotImplementedError(f"environment {self.name!r} turns no reading of its opponent into advice")

    rounds_option: ClassVar[str | None] = None
    """The option that sets how many rounds one game plays (RPS `rounds`, hold'em `hands`), for a trainer that fixes
    a game's length; None: the environment has none."""

    def oracle_action(self, seed: int) -> str:
        """The best action with full knowledge (bot policy, solver, gold answer); `scripted:oracle` plays it."""
        raise NotImplementedError(f"environment {self.name!r} has no oracle; use another scripted player")

    def rejudge(self, instance: dict[str, Any], action: str) -> bool:
        """Whether `action`, the whole of one attempt, solves the recorded instance (`instance_stats()` as a record
        keeps it) by this environment's rules as configured: `ttlearn rejudge` judges old records by a new metric
        without replaying them. Only for environments whose attempt is one answer."""
        raise NotImplementedError(f"environment {self.name!r} cannot judge a recorded answer again")

    @property
    def has_oracle(self) -> bool:
        return type(self).oracle_action is not Env.oracle_action

    def config(self) -> dict[str, Any]:
        """The options the environment was built with, so a run can rebuild the same environment."""
        return dict(self._made_with)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the environment started (a JVM, a worker process); the runners call it when done."""


def recorded_defaults(name: str) -> dict[str, Any]:
    """Today's default of each of the environment's `legacy_options`: what a new run records explicitly."""
    cls = ENVS.get(name)
    parameters = inspect.signature(cls).parameters
    return {option: parameters[option].default for option in cls.legacy_options}


def make_env(name: str, **options: Any) -> Env:
    """Build a registered environment, refusing unknown options with the list of accepted ones (and, as any
    construction does, options past their ceiling)."""
    return ENVS.build(name, **options)
