"""MemRL (arXiv 2601.03192): episodic memories whose usefulness is learned from reward at run time.

Each item is (intent key, experience text, Q). Retrieval is two-phase: phase A keeps the intent keys most similar to
the query, phase B ranks their items by similarity *and* learned Q. After an episode, every item retrieved for it
gets Q ← (1−α)Q + α·r, and the episode itself is written as a new item (a strategy script on success, a
reflection on failure, each followed by the trajectory). No model weights change.

Queries. The session passes `env.task()` to `context` before every decision, so for repeated games the query should
describe the *current situation*, not only the game: e.g. for RPS "rock-paper-scissors vs this opponent; round 4;
opponent's last moves: rock, paper, paper; my last moves: …". The intent key of a written item is the episode's
`task` (its situation at the start). Similar situations then retrieve the experiences (and their Q) of past games.

Where the memories live. By default in a SQLite store file (`store=`, else `<run_dir>/memrl.sqlite`); with
`url=` (and `key=`, or the TTLEARN_MEMORY_KEY environment variable) in a namespace of a `ttlearn serve` memory
service, which runs, trials and several agents share and train together.

Snapshots. With a store file, `state()` carries the memories themselves (`MemoryStore.export_namespace`: intent
keys with their vectors, items with Q) plus the items retrieved during the unfinished episode and the exploration
RNG; `load()` restores them into this memory's own store, replacing what its namespace held. So a fork
(`ttlearn memory fork`, `--memory-from`) copies the memories instead of sharing the origin's file, and a trial that
reloads the fresh state before every task starts from an empty memory. With a service the memory is shared on
purpose: `state()` points at the namespace, and `load()` restores only the RNG and pending retrievals, never
overwriting what other agents learnt.

What an item says (`write=`): `notes` (the paper's rule above: an LLM writes the strategy or reflection, the
trajectory follows) or `trajectory` (the trajectory and outcome only, no LLM call). Which episodes become items
(`keep=`): `all` (the paper) or `successes` (a failed episode still updates the Q of what it retrieved, but is not
stored). Measured on Spider with the 0.5B coder model (docs/coder-results.md), its notes were numbered restatements
of the task that it then imitated instead of answering with SQL, and it copied the table names of its failed
queries into later answers: a small model reuses what it is shown, so showing it only verified answers matters.

Baselines as configurations of the same class: `memp` = MemRL with α = 0 (Q stays at q_init, ranking reduces to
similarity), `rag` = similarity only (w_q = 0, no Q filter, α = 0).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ttlearn.llm.base import LLM
from ttlearn.memory.base import MEMORIES, Memory
from ttlearn.memory.embed import make_embedder
from ttlearn.memory.store import Candidate, MemoryStore, Namespace, NewItem
from ttlearn.types import Episode

if TYPE_CHECKING:
    from ttlearn.memory.remote import RemoteMemories

Z_CLIP = 3.0
DEFAULT_ALPHA = 0.3
"""The Q learning rate of the paper's released configs."""
WRITE_MODES = ("notes", "trajectory")
KEEP_MODES = ("all", "successes")


# -- the maths --------------------------------------------------------------------------------------------------


def phase_a(sims: Sequence[float] | np.ndarray, delta: float, k1: int) -> np.ndarray:
    """Phase A, similarity recall: I_A = top-k1 { i : sim_i ≥ δ } by sim_i, best first (ties: lower index first)."""
    if k1 < 1:
        raise ValueError(f"k1 must be ≥ 1, got {k1}")
    sims = np.asarray(sims, dtype=np.float64)
    eligible = np.flatnonzero(sims >= delta)
    order = eligible[np.lexsort((eligible, -sims[eligible]))]
    return order[:k1]


@dataclass(frozen=True)
class PhaseB:
    chosen: list[int]
    """Indices into the candidates, in rank order (random order when `explored`)."""
    scores: list[float | None]
    """score_i per candidate; None for candidates dropped by q_min."""
    explored: bool


def phase_b(
    candidates: Sequence[tuple[float, float]],
    q_min: float,
    w_sim: float,
    w_q: float,
    sim_mean: float,
    sim_std: float,
    k2: int,
    epsilon: float,
    rng: np.random.Generator,
) -> PhaseB:
    """Phase B, utility ranking over (sim, Q) candidates.

    Keep C = { i : Q_i ≥ q_min }. For i ∈ C:
        z_sim_i = (sim_i − sim_mean) / sim_std                        (fixed normalisation stats)
        z_Q_i   = clip((Q_i − mean_C Q) / std_C Q, −3, 3)              (population std over C; 0 when std = 0)
        score_i = w_sim · z_sim_i + w_q · z_Q_i
    With probability ε return k2 items of C drawn uniformly without replacement (exploration), else the top-k2 by
    score (ties: lower index first). No random number is drawn when ε = 0, so ε = 0 is deterministic.
    """
    if k2 < 1:
        raise ValueError(f"k2 must be ≥ 1, got {k2}")
    if sim_std <= 0:
        raise ValueError(f"sim_std must be positive, got {sim_std}")
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    # Plain Python, not numpy: there are a handful of candidates and numpy's per-call overhead would dominate.
    kept = [i for i, (_, q) in enumerate(candidates) if q >= q_min]
    scores: list[float | None] = [None] * len(candidates)
    if not kept:
        return PhaseB([], scores, False)
    q_kept = [candidates[i][1] for i in kept]
    q_mean = sum(q_kept) / len(q_kept)
    q_std = math.sqrt(sum((q - q_mean) ** 2 for q in q_kept) / len(q_kept))
    for i, q in zip(kept, q_kept):
        z_q = min(Z_CLIP, max(-Z_CLIP, (q - q_mean) / q_std)) if q_std > 0 else 0.0
        scores[i] = w_sim * (candidates[i][0] - sim_mean) / sim_std + w_q * z_q
    explored = epsilon > 0 and rng.random() < epsilon
    if explored:
        picks = [int(i) for i in rng.choice(kept, size=min(k2, len(kept)), replace=False)]
    else:
        picks = sorted(kept, key=lambda i: (-scores[i], i))[:k2]
    return PhaseB(picks, scores, bool(explored))


def q_update(q: float | np.ndarray, r: float, alpha: float) -> float | np.ndarray:
    """Q ← (1 − α)·Q + α·r: the paper's Q ← (1 − α)·Q + α·(r + γ·max Q′) at γ = 0, its released setting (α = 0 leaves
    Q unchanged). Why γ is 0 here: see `MemRLMemory`."""
    return (1.0 - alpha) * q + alpha * r


@dataclass(frozen=True)
class RetrievalConfig:
    k1: int = 5
    k2: int = 3
    delta: float = 0.4
    q_min: float = -0.5
    w_sim: float = 0.5
    w_q: float = 0.5
    sim_mean: float = 0.5
    sim_std: float = 0.15
    epsilon: float = 0.05

    def __post_init__(self) -> None:
        if not 1 <= self.k2 <= self.k1:
            raise ValueError(f"need 1 ≤ k2 ≤ k1, got k1 = {self.k1}, k2 = {self.k2}")
        if self.sim_std <= 0:
            raise ValueError(f"sim_std must be positive, got {self.sim_std}")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {self.epsilon}")


def two_phase_retrieve(
    ns: Namespace, query: str | np.ndarray, cfg: RetrievalConfig, rng: np.random.Generator
) -> tuple[list[Candidate], PhaseB]:
    """Phase A over intent keys (their items inherit the key's similarity), then phase B over those items."""
    intent_ids, sims = ns.nearest(query, cfg.k1)
    keep = phase_a(sims, cfg.delta, cfg.k1)
    candidates = ns.items_of(intent_ids[keep], sims[keep])
    ranked = phase_b(
        [(c.sim, c.q_value) for c in candidates],
        cfg.q_min,
        cfg.w_sim,
        cfg.w_q,
        cfg.sim_mean,
        cfg.sim_std,
        cfg.k2,
        cfg.epsilon,
        rng,
    )
    return candidates, ranked


def reinforce(ns: Namespace, item_ids: Sequence[int], reward: float, alpha: float) -> dict[int, float]:
    """The update after a finished task, applied to every item retrieved for it (γ = 0: see `MemRLMemory`)."""
    return ns.update_q(item_ids, reward, lambda q: q_update(q, reward, alpha))


# -- the memory -------------------------------------------------------------------------------------------------

_STRATEGY_PROMPT = (
    "You solved this task. Write a short strategy script of 3 to 5 numbered steps that would solve the same kind "
    "of task again. Be concrete (name the moves or actions); no preamble."
)
_REFLECTION_PROMPT = (
    "You failed this task. Write a short reflection with three labelled lines: "
    "'Wrong assumptions:', 'Do better:', 'Avoid:'. Be concrete (name the moves or actions); no preamble."
)


@MEMORIES.register("memrl")
class MemRLMemory(Memory):
    """Q-valued episodic memory in a shared SQLite store (see the module docstring).

    Defaults follow the paper's released configs where it gives them (α = 0.3, γ = 0, r = ±1, Q_init = 0,
    k1/k2 = 5/3, δ = 0.4, weights 0.5/0.5); q_min = −0.5 (an item is dropped after two failures in a row),
    sim_mean/sim_std = 0.5/0.15 and ε = 0.05 are ours.

    γ must be 0. A bootstrapped target r + γ·max Q′ needs Q′ of the *next decision*: the items retrieved for the
    next task, known only after the next `context` call; taking the max over the items being updated (what an
    update at `observe` time can see) biases every Q toward its own neighbours. And the tasks of a run are
    independent instances, so the next task's retrieval is not a consequence of this one: the paper's γ = 0 is the
    right target, not a simplification. `store=None` means `<run_dir>/memrl.sqlite` once the builder
    calls `bind_run`, else a fresh temporary file; `url=` puts the memories in a memory service instead.
    """

    name: ClassVar[str] = "memrl"
    keeps_files: ClassVar[bool] = True
    needs_llm: ClassVar[bool] = True
    fixed: ClassVar[dict[str, float]] = {}
    """Options a baseline pins (memp: alpha; rag: alpha, w_q, q_min); passing another value is an error."""
    _defaults: ClassVar[dict[str, float]] = {"alpha": DEFAULT_ALPHA, "w_q": 0.5, "q_min": -0.5}

    def __init__(
        self,
        llm: LLM | None = None,
        *,
        store: str | None = None,
        url: str | None = None,
        key: str | None = None,
        namespace: str = "default",
        embedder: str = "minilm",
        k1: int = 5,
        k2: int = 3,
        delta: float = 0.4,
        q_min: float | None = None,
        w_sim: float = 0.5,
        w_q: float | None = None,
        sim_mean: float = 0.5,
        sim_std: float = 0.15,
        epsilon: float = 0.05,
        alpha: float | None = None,
        gamma: float = 0.0,
        q_init: float = 0.0,
        reward_success: float = 1.0,
        reward_failure: float = -1.0,
        success_threshold: float = 0.0,
        join_threshold: float = 0.9,
        write: str = "notes",
        keep: str = "all",
        max_trajectory_chars: int = 1500,
        run_id: str | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(llm)
        resolved = {key: self._resolve(key, value) for key, value in (("alpha", alpha), ("w_q", w_q), ("q_min", q_min))}
        self.alpha = resolved["alpha"]
        if gamma != 0.0:
            raise ValueError(
                f"memrl supports gamma = 0 only (got {gamma}): tasks are independent, so there is no next state whose "
                "Q to bootstrap from; leave gamma out"
            )
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        if write not in WRITE_MODES:
            raise ValueError(f"write must be one of {', '.join(WRITE_MODES)}, got {write!r}")
        if keep not in KEEP_MODES:
            raise ValueError(f"keep must be one of {', '.join(KEEP_MODES)}, got {keep!r}")
        self.write, self.keep = write, keep
        self.cfg = RetrievalConfig(k1, k2, delta, resolved["q_min"], w_sim, resolved["w_q"], sim_mean, sim_std, epsilon)
        self.q_init = q_init
        self.rewards = (reward_success, reward_failure)
        self.success_threshold = success_threshold
        self.join_threshold = join_threshold
        self.max_trajectory_chars = max_trajectory_chars
        self.run_id = run_id
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.memories: LocalMemories | RemoteMemories
        if url is None:
            if key is not None:
                raise ValueError(f"memory {self.name!r}: key= goes with url= (a memory service); add url= or drop key=")
            self.memories = LocalMemories(store, namespace, embedder)
        elif store is not None:
            raise ValueError(f"memory {self.name!r} takes store= (a local file) or url= (a memory service), not both")
        else:
            from ttlearn.memory.remote import RemoteMemories

            self.memories = RemoteMemories(url, key, namespace, embedder)
        self._retrieved: list[int] = []

    def _resolve(self, key: str, value: float | None) -> float:
        if key in self.fixed:
            if value is not None and value != self.fixed[key]:
                raise ValueError(f"memory {self.name!r} fixes {key} = {self.fixed[key]}; use 'memrl' to change it")
            return self.fixed[key]
        return self._defaults[key] if value is None else value

    def bind_run(self, run_dir: str | Path, run_id: str) -> None:
        """Called by the session before the first episode: provenance, and the default store location."""
        self.run_id = run_id
        self.memories.bind_run(Path(run_dir))

    @property
    def ns(self) -> Namespace:
        """The namespace of the local store (a memory on a service has none)."""
        return self.memories.ns

    def context(self, query: str) -> str:
        chosen = self.memories.retrieve(query, self.cfg, self.rng, self.run_id)
        for c in chosen:
            if c.item_id not in self._retrieved:
                self._retrieved.append(c.item_id)
        if not chosen:
            return ""
        return "Relevant past experiences:\n" + "\n\n".join(f"[{n}] {c.experience}" for n, c in enumerate(chosen, 1))

    def succeeded(self, episode: Episode) -> bool:
        return episode.success if episode.success is not None else episode.score > self.success_threshold

    def observe(self, episode: Episode) -> None:
        success = self.succeeded(episode)
        reward = self.rewards[0] if success else self.rewards[1]
        if self._retrieved:
            self.memories.reinforce(self._retrieved, reward, self.alpha)
        if success or self.keep == "all":
            item = NewItem(
                episode.task, self._write_experience(episode, success), self.q_init, self.run_id, episode.index
            )
            self.memories.add(item, self.join_threshold)
        self.memories.finish_episode(episode.index)
        self._retrieved = []

    def _write_experience(self, episode: Episode, success: bool) -> str:
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
        """The memories (or where they live), pending retrievals and the RNG; not the run id, which is provenance
        of whichever run writes next (a fork's writes are its own)."""
        return {**self.memories.state(), "retrieved": list(self._retrieved), "rng": self.rng.bit_generator.state}

    def load(self, state: dict[str, Any]) -> None:
        new_ids = self.memories.load(state)
        self._retrieved = [new_ids.get(i, i) for i in state["retrieved"]]
        self.rng.bit_generator.state = state["rng"]


class LocalMemories:
    """MemRL's memories in a SQLite store file that this process opens."""

    def __init__(self, path: str | None, namespace: str, embedder: str) -> None:
        self.path = path
        self.namespace = namespace
        self.embedder = embedder
        self.log_ids: list[int] = []
        """Retrievals logged during the unfinished episode; they learn its index when it ends."""
        self._ns: Namespace | None = None

    def bind_run(self, run_dir: Path) -> None:
        if self.path is None:
            self.path = str(run_dir / "memrl.sqlite")

    @property
    def ns(self) -> Namespace:
        if self._ns is None:
            if self.path is None:
                self.path = str(Path(tempfile.mkdtemp(prefix="ttlearn-memrl-")) / "memrl.sqlite")
            self._ns = MemoryStore(self.path).namespace(self.namespace, make_embedder(self.embedder))
        return self._ns

    def retrieve(
        self, query: str, cfg: RetrievalConfig, rng: np.random.Generator, run_id: str | None
    ) -> list[Candidate]:
        """The two-phase retrieval, logged with every candidate's similarity, Q and score (`ttlearn memory explain`)."""
        candidates, ranked = two_phase_retrieve(self.ns, query, cfg, rng)
        chosen = [candidates[i].item_id for i in ranked.chosen]
        log = [
            {"id": c.item_id, "sim": round(c.sim, 4), "q": round(c.q_value, 4), "score": s}
            for c, s in zip(candidates, ranked.scores)
        ]
        self.log_ids.append(self.ns.log_retrieval(query, log, chosen, explored=ranked.explored, run_id=run_id))
        return [candidates[i] for i in ranked.chosen]

    def reinforce(self, item_ids: Sequence[int], reward: float, alpha: float) -> None:
        reinforce(self.ns, item_ids, reward, alpha)

    def add(self, item: NewItem, join_threshold: float) -> None:
        self.ns.add(item, join_threshold=join_threshold)

    def finish_episode(self, index: int) -> None:
        self.ns.assign_episode(self.log_ids, index)
        self.log_ids = []

    def state(self) -> dict[str, Any]:
        return {"memories": self.ns.store.export_namespace(self.namespace), "log_ids": list(self.log_ids)}

    def load(self, state: dict[str, Any]) -> dict[int, int]:
        """Replace this namespace's memories by the state's; returns the new id of each of the state's item ids."""
        if "memories" not in state:
            source = state.get("url") or state.get("store")
            raise ValueError(
                f"this MemRL state holds no memories, only a pointer to {source!r} (a memory service, or a store file "
                "as older snapshots had); a local memory cannot load it: give it the same url= or start afresh"
            )
        new_ids = self.ns.store.import_namespace(self.namespace, state["memories"])
        self.log_ids = list(state["log_ids"])
        return new_ids


@MEMORIES.register("memp")
class MemPMemory(MemRLMemory):
    """MemP baseline: MemRL with α = 0, so Q never leaves q_init and ranking reduces to similarity."""

    name: ClassVar[str] = "memp"
    fixed: ClassVar[dict[str, float]] = {"alpha": 0.0}


@MEMORIES.register("rag")
class RAGMemory(MemRLMemory):
    """Plain retrieval: top-k2 by similarity among keys with sim ≥ δ; Q is neither used nor learned."""

    name: ClassVar[str] = "rag"
    fixed: ClassVar[dict[str, float]] = {"alpha": 0.0, "w_q": 0.0, "q_min": -math.inf}
