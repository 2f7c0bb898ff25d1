"""MemRL (arXiv 2601.03192): episodic memories whose usefulness is learned from reward at run time.

Each item is (intent key, experience text, Q). Retrieval is two-phase: phase A keeps the intent keys most similar to
the query, phase B ranks their items by similarity *and* learned Q. After an episode, every item retrieved for it
gets Q ← (1−α)Q + α·r, and the episode itself is written as a new item (a strategy script on success, a
reflection on failure, each followed by the trajectory). No model weights change.

Queries. The session passes `env.task()` to `context` before every decision, so for repeated games the query should
describe the *current situation*, not only the game: e.g. for RPS "rock-paper-scissors vs this opponent; round 4;
opponent's last moves: rock, paper, paper; my last moves: …". The intent key of a written item is the episode's
`task` (its situation at the start). Similar situations then retrieve the experiences (and their Q) of past games.

The retrieval and the Q update are pure functions in `memory/retrieval.py`, shared with the memory service.

Where the memories live (a `memory/backends.py` `MemoryBackend`). By default in a SQLite store file (`store=`, else
`<run_dir>/memrl.sqlite`); with `url=` (and `key=`, or the TTLEARN_MEMORY_KEY environment variable) in a namespace
of a `ttlearn serve` memory service, which runs, trials and several agents share and train together.
With `store=postgresql://…` in a PostgreSQL database (`memory/postgres.py`) that workers on many machines share
directly, snapshots then pointing at it as they do at a service.

Snapshots. With a store file, `state()` carries the memories themselves (`MemoryStore.export_namespace`: intent
keys with their vectors, items with Q) plus the items retrieved during the unfinished episode and the exploration
RNG; `load()` restores them into this memory's own store, replacing what its namespace held. So a fork
(`ttlearn memory fork`, `--memory-from`) copies the memories instead of sharing the origin's file, and a trial that
reloads the fresh state before every task starts from an empty memory. With a service the memory is shared on
purpose: `state()` points at the namespace, and `load()` restores only the RNG and pending retrievals, never
overwriting what other agents learnt.

What an item says (`write=`): `notes` (the paper's rule above: an LLM writes the strategy or reflection, the
trajectory follows), `trajectory` (the trajectory and outcome only, no LLM call) or `answer` (the task and the
agent's own answer the environment verified, `render_answer`: what a small model can use). Which episodes become
items (`keep=`): `all` (the paper) or `successes` (a failed episode still updates the Q of what it retrieved, but is
not stored). Measured on Spider with the 0.5B coder model (docs/coder-results.md), its notes were numbered
restatements of the task that it then imitated instead of answering with SQL, and it copied the table names of its
failed queries into later answers: a small model reuses what it is shown, so showing it only verified answers, one
at a time and above a similarity bar that rejects neighbours, matters (the `sql` preset; docs/memrl.md).

Provenance. Every item and logged retrieval records the run (`run_id`), the run's unit it came from — the task or
game, 1-based, that the unit player puts in `episode.info["unit"]` — and the attempt at it (`Episode.index`,
stored as `episode`), so a run's log does not mix its units' first attempts. Episodes that carry no unit
(trainers, states saved before units were recorded) record None; such states load and replay as before. The
learning proxy adds the service key and the exchange (`episode.info["key_id"]`, `["exchange"]`).

Settings come from `PRESETS` (what the official repository's runners run for the paper's benchmarks, each value
with its file and line, and each ttlearn family's measured one) over `TUNING` (the released BigCodeBench values);
`resolve_settings` is the one rule.

Baselines as configurations of the same class: `memp` = MemRL with α = 0 (Q stays at q_init, ranking reduces to
similarity), `rag` = similarity only (w_q = 0, no Q filter, α = 0).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from ttlearn.llm.base import LLM
from ttlearn.memory.backends import LocalMemories, MemoryBackend, store_memories
from ttlearn.memory.base import Memory
from ttlearn.memory.embed import SIMILARITY_STATS
from ttlearn.memory.items import Namespace, NewItem
from ttlearn.memory.retrieval import RetrievalConfig
from ttlearn.memory.store import MemoryStore
from ttlearn.types import Episode, MemoryText

WRITE_MODES = ("notes", "trajectory", "answer")
SHOW_MODES = ("notes", "exchanges")
KEEP_MODES = ("all", "successes")


# -- the settings -----------------------------------------------------------------------------------------------

MEMRL_COMMIT = "7c3beba1244d707b74207b494be254f391819e09"
"""The commit of the official repository (github.com/MemTensor/MemRL) whose files and lines the presets cite."""

PRESETS: dict[str, dict[str, Any]] = {
    # What each benchmark's released runner runs (MemTensor/MemRL at MEMRL_COMMIT), which is not always its YAML:
    # k1 = memory.k_retrieve (phase A), k2 = rl_config.topk (phase B), delta = the threshold the runner passes to
    # MemoryService.retrieve_query (rl_config.sim_threshold; no runner reads rl_config.tau), q_min =
    # q_min_threshold, sim_mean / sim_std = what reaches MemoryService(sim_norm_mean=, sim_norm_std=), join =
    # memory.add_similarity_threshold, batch = how many tasks retrieve from a frozen memory before their Q updates
    # and new items are applied. Similarity statistics and thresholds were measured with text-embedding-3-large:
    # with another embedder they are the paper's numbers, not calibrated ones. Epochs per runner: docs/memrl.md.
    "bcb": {  # BigCodeBench: configs/rl_bcb_config.yaml, run/run_bcb.py, memrl/run/bcb_runner.py; 3 epochs
        # (run_bcb.py:74 --epochs default 3). k1 5, k2 5, ε 0.1, q_min -0.8, rewards +1 / -1: yaml:42, 112, 102,
        # 116, 109-110; δ 0.5 = yaml:111 sim_threshold, read at bcb_runner.py:162; statistics yaml:54-55, passed at
        # run_bcb.py:227-228; batch 25: bcb_runner.py:610 flushes the pending updates every 25 tasks (the YAML has
        # no batch_size; its ExperimentConfig default 32 only sizes the service's worker pool).
        "k1": 5,
        "k2": 5,
        "delta": 0.5,
        "epsilon": 0.1,
        "q_min": -0.8,
        "alpha": 0.3,
        "q_init": 0.0,
        "reward_success": 1.0,
        "reward_failure": -1.0,
        "sim_mean": 0.31,
        "sim_std": 0.10,
        "join_threshold": 0.9,
        "w_sim": 0.5,
        "w_q": 0.5,
        "batch": 25,
    },
    "llb": {  # LifelongAgentBench: configs/rl_llb_config.yaml, run/run_llb.py, memrl/run/llb_rl_runner.py; 20
        # epochs (yaml:111 num_sections 20, each section the whole data set: llb_rl_runner.py:332). k1 10, k2 5,
        # ε 0.01, Q₀ 0.5 (both outcomes), rewards 1 / 0, join 0.99, batch 5: yaml:41, 160, 149, 153-154,
        # 155-156, 45, 114; δ 0.5 = yaml:157, read at llb_rl_runner.py:583-597. Statistics: run_llb.py:238-255
        # builds the service without sim_norm_*, so its defaults run (memory_service.py:311-312), not the YAML's
        # 0.39 / 0.14 (yaml:50-51, os_interaction; db_bench 0.275 / 0.113 in its comment). The runner's Q floor 0
        # (yaml:85, run_llb.py:217-226) never binds: Q starts at 0.5 and moves toward rewards 0 or 1.
        # A failure's item is shown without its trajectory: the runner cuts a reflection's "Failed approach:" tail
        # for LLB (memrl/lifelongbench_eval/memory_context.py:11-27, called at :77).
        "k1": 10,
        "k2": 5,
        "delta": 0.5,
        "epsilon": 0.01,
        "q_min": -0.8,
        "alpha": 0.3,
        "q_init": 0.5,
        "reward_success": 1.0,
        "reward_failure": 0.0,
        "sim_mean": 0.1856827586889267,
        "sim_std": 0.09407906234264374,
        "join_threshold": 0.99,
        "w_sim": 0.5,
        "w_q": 0.5,
        "batch": 5,
        "failure_trajectory": False,
    },
    "hle": {  # Humanity's Last Exam: configs/rl_hle_config.yaml, run/run_hle.py, memrl/run/hle_runner.py; 10 epochs
        # (yaml:49 num_sections, hle_runner.py:1214). k1 5, k2 3, ε 0, q_min -10, rewards +1 / -1, join 0.9,
        # batch 32: yaml:26, 75, 67, 79, 73-74, 30, 50 (hle_runner.py:922). δ 0.5: the YAML sets no sim_threshold,
        # so its default (memrl/configs/config.py:219) is what hle_runner.py:784 passes; the YAML's tau 0.25
        # (yaml:68) is never read. Statistics yaml:34-35, passed at run_hle.py:171-172. Q₀: the runner writes a
        # success's item at Q 1 and a failure's at 0 (hle_runner.py:956), not the YAML's q_init 0.
        "k1": 5,
        "k2": 3,
        "delta": 0.5,
        "epsilon": 0.0,
        "q_min": -10.0,
        "alpha": 0.3,
        "q_init": 1.0,
        "q_init_failure": 0.0,
        "reward_success": 1.0,
        "reward_failure": -1.0,
        "sim_mean": 0.1856827586889267,
        "sim_std": 0.09407906234264374,
        "join_threshold": 0.9,
        "w_sim": 0.5,
        "w_q": 0.5,
        "batch": 32,
    },
    "alfworld": {  # ALFWorld: configs/rl_alf_config.yaml, run/run_alfworld.py, memrl/run/alfworld_rl_runner.py; 10
        # epochs (yaml:49 num_sections, alfworld_rl_runner.py:206). k1 5, k2 3, ε 0, q_min -10, Q₀ 0, rewards
        # +1 / -1, join 0.9: yaml:26, 76, 68, 80, 72-73 (alfworld_rl_runner.py:1078), 74-75, 30. δ 0.5: no
        # sim_threshold in the YAML, so config.py:219's default reaches alfworld_rl_runner.py:788; its tau 0.62
        # (yaml:69) is never read. Statistics 0.5187 / 0.1203: yaml:34-35, passed at run_alfworld.py:154-155.
        # Batch 32: yaml:50, run_alfworld.py:172.
        "k1": 5,
        "k2": 3,
        "delta": 0.5,
        "epsilon": 0.0,
        "q_min": -10.0,
        "alpha": 0.3,
        "q_init": 0.0,
        "reward_success": 1.0,
        "reward_failure": -1.0,
        "sim_mean": 0.5187,
        "sim_std": 0.1203,
        "join_threshold": 0.9,
        "w_sim": 0.5,
        "w_q": 0.5,
        "batch": 32,
    },
    # ttlearn's families, chosen on development data (docs/memrl.md has the measurements): one verified answer,
    # shown only above a similarity bar that admits paraphrases and rejects neighbours (calibrated on Spider's
    # train-split databases for minilm), released α / rewards / q_min, no random exploration (a random item is a
    # distractor for a small model; HLE and ALFWorld release ε = 0 too).
    "sql": {
        "k1": 5,
        "k2": 1,
        "delta": 0.9,
        "epsilon": 0.0,
        "q_min": -0.8,
        "alpha": 0.3,
        "q_init": 0.0,
        "reward_success": 1.0,
        "reward_failure": -1.0,
        "join_threshold": 0.95,
        "w_sim": 0.5,
        "w_q": 0.5,
        "batch": 1,
        "write": "answer",
        "keep": "successes",
    },
}
PRESETS["llb-minilm"] = {**PRESETS["llb"], "delta": 0.4, "sim_mean": 0.232, "sim_std": 0.134}
"""The LLB runner's settings with the similarity bar and statistics measured for MiniLM, the embedder ttlearn ships,
on db_train's development tasks (`benchmarks/db_bench_similarity.py`, docs/db_bench.md): at δ 0.4 a same-kind task's
key is among the 5 shown for 99 % of tasks and 1.5 % of other-kind pairs clear it; k1 10 and k2 5 stay the runner's.
The released δ 0.5 was set for text-embedding-3-large (its YAML's comment gives 0.369 for db_bench)."""
PRESETS["code"] = dict(PRESETS["sql"])
"""HumanEval shares the SQL setting: one verified function, the same bar (no separate development measurement)."""
PRESETS["household"] = {**PRESETS["sql"], "write": "trajectory"}
"""A household game's verified answer is its action sequence; `trajectory` keeps the observations beside it."""

TUNING: dict[str, Any] = {
    **PRESETS["bcb"],
    "batch": 1,
    "q_init_failure": None,
    "sim_mean": None,
    "sim_std": None,
    "write": "notes",
    "keep": "all",
    "show": "notes",
    "failure_trajectory": True,
}
"""Every tunable option and its value when neither the user nor a preset sets it: the released BigCodeBench
configuration, except the similarity statistics, which belong to the embedder (None: the embedder's calibrated
`SIMILARITY_STATS`), the batch (1: every task's update lands before the next task, so a short run learns; the
BigCodeBench runner's 25 is `preset=bcb`), one Q₀ for every new item (`q_init_failure` None), and the paper's items
(notes on every episode, shown as notes, a failure's with its trajectory)."""


def resolve_settings(preset: str | None, given: dict[str, Any], fixed: dict[str, Any]) -> dict[str, Any]:
    """Each tunable option's value: what `fixed` pins (a baseline), else what the user gave, else the preset's, else
    `TUNING`. A user value that contradicts a pinned one is an error."""
    if preset is not None and preset not in PRESETS:
        raise ValueError(f"unknown memrl preset {preset!r}; choose one of: {', '.join(sorted(PRESETS))}")
    chosen = {**TUNING, **(PRESETS[preset] if preset else {})}
    chosen.update({key: value for key, value in given.items() if value is not None})
    for key, value in fixed.items():
        if given.get(key) is not None and given[key] != value:
            raise ValueError(f"this baseline fixes {key} = {value}; use memory 'memrl' to change it")
        chosen[key] = value
    return chosen


class MemRLOptions(BaseModel):
    """Every option of `memrl` (and its baselines), named as users write them (`-m key=value`, a run's recorded
    `memory_options`). A tunable option left None takes its value by `resolve_settings` (the preset's, else
    `TUNING`'s); the others are where the memories live, provenance and the few settings no preset changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: str | None = None
    store: str | None = None
    url: str | None = None
    key: str | None = None
    namespace: str = "default"
    embedder: str = "minilm"
    k1: int | None = None
    k2: int | None = None
    delta: float | None = None
    q_min: float | None = None
    w_sim: float | None = None
    w_q: float | None = None
    sim_mean: float | None = None
    sim_std: float | None = None
    epsilon: float | None = None
    alpha: float | None = None
    gamma: float = 0.0
    q_init: float | None = None
    q_init_failure: float | None = None
    reward_success: float | None = None
    reward_failure: float | None = None
    success_threshold: float = 0.0
    join_threshold: float | None = None
    batch: int | None = None
    write: str | None = None
    keep: str | None = None
    show: str | None = None
    failure_trajectory: bool | None = None
    max_trajectory_chars: int = 1500
    run_id: str | None = None
    seed: int = 0

    def tunable(self) -> dict[str, Any]:
        """The tunable options as given (None where not), for `resolve_settings`."""
        return {name: getattr(self, name) for name in TUNING}


_ANSWER_LABELS = ("Verified answer", "Answer that failed")


def render_answer(task: str, answer: str, verified: bool) -> str:
    """An item as a small model can use it (`write=answer`): the task and the agent's own answer, labelled by what the
    environment said of it, nothing else. Shown alone, a paraphrase's verified answer lifted the 0.5B coder model
    from 19 to 29 of 30 Spider questions (the oracle-retrieval probe in docs/memrl.md)."""
    return f"Task: {task}\n{_ANSWER_LABELS[0] if verified else _ANSWER_LABELS[1]}:\n{answer}"


def without_failed_trajectory(experience: str) -> str:
    """A failure's note without the trajectory that follows it (`failure_trajectory=false`): what MemRL's LLB runner
    shows of a failure, whose long trajectory otherwise dominates the prompt. Other items are shown whole."""
    head, marker, _ = experience.partition("\nTrajectory:\n")
    return head if marker and "\nOutcome: failure" in head else experience


def verified_exchange(experience: str) -> tuple[str, str] | None:
    """(task, answer) of a verified `render_answer` item, to show as an earlier user/assistant exchange; None for
    any other item (a failure, a trajectory, a note)."""
    head, marker, answer = experience.partition(f"\n{_ANSWER_LABELS[0]}:\n")
    if not marker or not head.startswith("Task: "):
        return None
    return head[len("Task: ") :], answer


# -- the memory -------------------------------------------------------------------------------------------------

_STRATEGY_PROMPT = (
    "You solved this task. Write a short strategy script of 3 to 5 numbered steps that would solve the same kind "
    "of task again. Be concrete (name the moves or actions); no preamble."
)
_REFLECTION_PROMPT = (
    "You failed this task. Write a short reflection with three labelled lines: "
    "'Wrong assumptions:', 'Do better:', 'Avoid:'. Be concrete (name the moves or actions); no preamble."
)


class MemRLMemory(Memory):
    """Q-valued episodic memory in a shared SQLite store (see the module docstring).

    Settings: `preset=` names a released runner's configuration (`bcb`, `llb`, `hle`, `alfworld`; `llb-minilm` is
    `llb` calibrated for MiniLM) or a ttlearn family's measured one (`sql`, `code`, `household`); any option given
    beside it wins, and options neither sets take `TUNING` (the BigCodeBench release, one task per batch). New items
    start at Q = `q_init`, or `q_init_failure` for a failed episode's item when it is set (HLE's runner: 1 and 0).
    `batch=B` is the released runners' timing: tasks retrieve from the memory as it stood when their mini-batch
    began, and the Q updates and new items of B finished tasks are applied together.
    `show=exchanges` hands verified answers (`write=answer` items) to the player as earlier user/assistant turns
    instead of notes in the system prompt (`MemoryText`); items of other kinds are then not shown.

    γ must be 0. A bootstrapped target r + γ·max Q′ needs Q′ of the *next decision*: the items retrieved for the
    next task, known only after the next `context` call; taking the max over the items being updated (what an
    update at `observe` time can see) biases every Q toward its own neighbours. And the tasks of a run are
    independent instances, so the next task's retrieval is not a consequence of this one: the paper's γ = 0 is the
    right target, not a simplification. `store=None` means `<run_dir>/memrl.sqlite` once the builder
    calls `bind_run`, else a fresh temporary file; `url=` puts the memories in a memory service instead.
    """

    keeps_files: ClassVar[bool] = True
    needs_llm: ClassVar[bool] = True
    learns_across_tasks: ClassVar[bool] = True
    presets: ClassVar[dict[str, dict[str, Any]]] = PRESETS
    fixed: ClassVar[dict[str, Any]] = {}
    """Options a baseline pins (memp: alpha; rag: alpha, w_q, q_min); passing another value is an error."""

    options_model: ClassVar[type[MemRLOptions]] = MemRLOptions
    """The registry builds one `MemRLOptions` from the flat `-m key=value` options and hands it over as `options`."""

    def __init__(self, llm: LLM | None = None, options: MemRLOptions | None = None) -> None:
        super().__init__(llm)
        options = options or MemRLOptions()
        settings = resolve_settings(options.preset, options.tunable(), self.fixed)
        if options.gamma != 0.0:
            raise ValueError(
                f"memrl supports gamma = 0 only (got {options.gamma}): tasks are independent, so there is no next "
                "state whose Q to bootstrap from; leave gamma out"
            )
        self.alpha = settings["alpha"]
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        for option, modes in (("write", WRITE_MODES), ("keep", KEEP_MODES), ("show", SHOW_MODES)):
            if settings[option] not in modes:
                raise ValueError(f"{option} must be one of {', '.join(modes)}, got {settings[option]!r}")
        if settings["batch"] < 1:
            raise ValueError(f"batch must be at least 1, got {settings['batch']}")
        self.write, self.keep, self.batch = settings["write"], settings["keep"], settings["batch"]
        self.show, self.failure_trajectory = settings["show"], settings["failure_trajectory"]
        stats = SIMILARITY_STATS.get(options.embedder, SIMILARITY_STATS["minilm"])
        self.cfg = RetrievalConfig(
            settings["k1"],
            settings["k2"],
            settings["delta"],
            settings["q_min"],
            settings["w_sim"],
            settings["w_q"],
            stats[0] if settings["sim_mean"] is None else settings["sim_mean"],
            stats[1] if settings["sim_std"] is None else settings["sim_std"],
            settings["epsilon"],
        )
        self.q_init = settings["q_init"]
        self.q_init_failure = self.q_init if settings["q_init_failure"] is None else settings["q_init_failure"]
        self.rewards = (settings["reward_success"], settings["reward_failure"])
        self.success_threshold = options.success_threshold
        self.join_threshold = settings["join_threshold"]
        self.max_trajectory_chars = options.max_trajectory_chars
        self.run_id = options.run_id
        self.seed = options.seed
        self.rng = np.random.default_rng(options.seed)
        self.memories: MemoryBackend
        if options.url is None:
            if options.key is not None:
                raise ValueError(f"memory {self.name!r}: key= goes with url= (a memory service); add url= or drop key=")
            self.memories = store_memories(options.store, options.namespace, options.embedder)
        elif options.store is not None:
            raise ValueError(f"memory {self.name!r} takes store= (a local file) or url= (a memory service), not both")
        else:
            from ttlearn.memory.remote import RemoteMemories

            self.memories = RemoteMemories(options.url, options.key, options.namespace, options.embedder)
        self._retrieved: list[int] = []
        self._pending: list[dict[str, Any]] = []
        """Finished tasks of the current mini-batch whose updates wait for the batch to fill."""
        self._holding = False
        """Inside `applied_together`: the batch lands when it ends."""

    def bind_run(self, store: Path, run_id: str) -> None:
        """Called by the builder before the first episode: provenance (the run directory's name, unless `run_id=`
        names the run: arena runs of several contestants share names like `seed0`, which a shared memory would mix
        up), and the run's own store file."""
        self.run_id = self.run_id or run_id
        self.memories.bind_run(Path(store))

    @property
    def ns(self) -> Namespace:
        """The namespace of the local store; a memory on a service has none."""
        return self._local().ns

    @property
    def store(self) -> MemoryStore:
        """The local store; a memory on a service has none."""
        return self._local().store

    def _local(self) -> LocalMemories:
        if not isinstance(self.memories, LocalMemories):
            raise AttributeError(f"memory {self.name!r} lives in a memory service: it has no local namespace")
        return self.memories

    def context(self, query: str) -> str:
        chosen = self.memories.retrieve(query, self.cfg, self.rng, self.run_id)
        for c in chosen:
            if c.item_id not in self._retrieved:
                self._retrieved.append(c.item_id)
        if not chosen:
            return ""
        shown = [c.experience if self.failure_trajectory else without_failed_trajectory(c.experience) for c in chosen]
        text = (
            shown[0]
            if len(shown) == 1
            else "Relevant past experiences:\n"
            + "\n\n".join(f"[{n}] {experience}" for n, experience in enumerate(shown, 1))
        )
        if self.show == "notes":
            return text
        exchanges = [pair for pair in map(verified_exchange, (c.experience for c in chosen)) if pair is not None]
        return MemoryText(text, tuple(exchanges)) if exchanges else text

    def succeeded(self, episode: Episode) -> bool:
        return episode.success if episode.success is not None else episode.score > self.success_threshold

    def observe(self, episode: Episode) -> None:
        success = self.succeeded(episode)
        unit = episode.info.get("unit")  # the run's task or game; episode.index is the attempt at it
        new_item = None
        if success or self.keep == "all":
            item = NewItem(
                episode.task,
                self._write_experience(episode, success),
                self.q_init if success else self.q_init_failure,
                self.run_id,
                episode.index,
                unit=unit,
                key_id=episode.info.get("key_id"),
                exchange=episode.info.get("exchange"),
            )
            new_item = asdict(item)
        reward = self.rewards[0] if success else self.rewards[1]
        self._pending.append({"retrieved": self._retrieved, "reward": reward, "item": new_item})
        self.memories.finish_episode(episode.index, unit)
        self._retrieved = []
        if len(self._pending) >= self.batch and not self._holding:
            self._apply_pending()

    @contextmanager
    def applied_together(self) -> Iterator[None]:
        """Episodes observed inside land together when it ends: their Q updates and new items in one transaction
        (`MemoryBackend.apply`), once the mini-batch is full as ever. On an error inside, the observations made in
        it are undone, so they may be observed again (the learning proxy's batch feedback)."""
        pending, self._holding = copy.deepcopy(self._pending), True
        try:
            yield
        except BaseException:
            self._pending = pending
            raise
        finally:
            self._holding = False
        if len(self._pending) >= self.batch:
            self._apply_pending()

    def _apply_pending(self) -> None:
        """The updates of the finished mini-batch, in one transaction: the Q of what each task retrieved (the tasks
        retrieved from the memory as it stood before the batch, so none retrieved another's new item), then the new
        items in task order."""
        feedback = [(update["retrieved"], update["reward"]) for update in self._pending]
        items = [NewItem(**update["item"]) for update in self._pending if update["item"] is not None]
        self.memories.apply(feedback, self.alpha, items, self.join_threshold)
        self._pending = []

    def _write_experience(self, episode: Episode, success: bool) -> str:
        if self.write == "answer":
            return render_answer(episode.task, episode.info.get("answer", ""), success)
        trajectory = episode.info.get("transcript") or "\n".join(
            f"{s.observation} -> {s.action} (reward {s.reward:g})" for s in episode.steps
        )
        if len(trajectory) > self.max_trajectory_chars:
            trajectory = trajectory[: self.max_trajectory_chars] + " …"
        outcome = "success" if success else "failure"
        head = f"Task: {episode.task}\nOutcome: {outcome} (score {episode.score:g})\n"
        if self.write == "trajectory":
            return f"{head}Trajectory:\n{trajectory}"
        if self.llm is None:
            raise ValueError(f"memory {self.name!r} writes with an LLM; give it one")
        messages = [
            {"role": "system", "content": "You write concise notes that help an agent do better next time."},
            {
                "role": "user",
                "content": f"{head}Trajectory:\n{trajectory}\n\n{_STRATEGY_PROMPT if success else _REFLECTION_PROMPT}",
            },
        ]
        note = self.llm.complete(messages, max_tokens=160, temperature=0.0, seed=self.seed + episode.index).text
        label = "Strategy" if success else "Reflection"
        return f"{head}{label}:\n{note.strip()}\nTrajectory:\n{trajectory}"

    def state(self) -> dict[str, Any]:
        """The memories (or where they live), pending retrievals and updates, and the RNG; not the run id, which is
        provenance of whichever run writes next (a fork's writes are its own)."""
        return {
            **self.memories.state(),
            "retrieved": list(self._retrieved),
            "pending": copy.deepcopy(self._pending),
            "rng": self.rng.bit_generator.state,
        }

    def load(self, state: dict[str, Any]) -> None:
        new_ids = self.memories.load(state)
        self._retrieved = [new_ids.get(i, i) for i in state["retrieved"]]
        self._pending = [
            {**update, "retrieved": [new_ids.get(i, i) for i in update["retrieved"]]}
            for update in copy.deepcopy(state.get("pending", []))
        ]
        self.rng.bit_generator.state = state["rng"]


class MemPMemory(MemRLMemory):
    """MemP baseline: MemRL with α = 0, so Q never leaves q_init and ranking reduces to similarity."""

    fixed: ClassVar[dict[str, Any]] = {"alpha": 0.0}


class RAGMemory(MemRLMemory):
    """Plain retrieval: top-k2 by similarity among keys with sim ≥ δ; Q is neither used nor learned."""

    fixed: ClassVar[dict[str, Any]] = {"alpha": 0.0, "w_q": 0.0, "q_min": -math.inf}
