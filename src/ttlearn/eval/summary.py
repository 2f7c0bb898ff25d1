"""One summariser for every run, from its unit records alone, built once into a typed `RunSummary` that `show`,
`resume`, `run`, the arena report and `ttlearn results` all read (so every figure is the same wherever it is shown).

What every run has — each unit's row (score, cumulative performance, steps, invalid steps, cost), success@k with
Wilson intervals, trajectory entropy, invalid steps by cause (unparseable replies, commands the simulator rejected,
prompts over the context), tokens and LLM time — then the sections its records call for (`SECTIONS`): MemRL's
protocol metrics, the paired control, the last epoch against the first, the memory's gain against the greedy control,
success by skill and by kind of task. A new section is one pure function of the records and its field of
`RunSummary` (with its `lines` for `show`). Two runs compared: `eval.paired`.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ttlearn.eval.metrics import (
    cumulative_performance,
    mcnemar_exact,
    mean_pass_at_k,
    mean_trajectory_entropy,
    run_protocol,
    success_at_k,
    wilson_interval,
)
from ttlearn.eval.paired import PairedRow, as_rejudged, paired_success, success_table
from ttlearn.runs import Run, RunConfig
from ttlearn.types import Episode, Step, add_causes, count_causes

Record = dict[str, Any]


# ---- the parts of a summary ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Invalid:
    """Invalid steps: their share of the steps played, and their count by cause (None where the records keep only
    the count: a control arm, summaries written before causes were counted)."""

    rate: float
    causes: dict[str, int] | None = None

    def text(self) -> str:
        """ "12.5% (rejected 3, overflow 2)"."""
        parts = ", ".join(f"{cause} {count}" for cause, count in (self.causes or {}).items())
        return f"{self.rate:.1%}" + (f" ({parts})" if parts else "")


def step_causes(records: Sequence[Record]) -> dict[str, int]:
    """The invalid steps of every attempt of some unit records, by cause (`count_causes`)."""
    return count_causes(Step(**s) for r in records for a in r["attempts"] for s in a["steps"])


def pooled_invalid(rows: Sequence[UnitRow], causes: Sequence[dict[str, int] | None] = ()) -> Invalid | None:
    """The invalid steps of some units (a run's, or several runs' for an arena method): invalid / steps over all
    their attempts as their rows count them, and the causes added up; None when no step was played."""
    steps = sum(row.steps for row in rows)
    if not steps:
        return None
    return Invalid(sum(row.invalid for row in rows) / steps, add_causes(counts or {} for counts in causes))


@dataclass(frozen=True)
class UnitRow:
    """One finished unit: its score (the last attempt's), the cumulative mean score so far, whether it was solved
    within its attempts (None where the environment defines no success), its steps and invalid steps over every
    attempt, and its LLM cost (every arm's calls) and wall time."""

    unit: int
    score: float
    cumulative: float
    solved: bool | None
    steps: int
    invalid: int
    tokens: int
    llm_calls: int
    llm_s: float
    wall_s: float


@dataclass(frozen=True)
class Protocol:
    """MemRL's protocol: success per epoch, in the last one, cumulative, and of the held-out instances."""

    epoch_success: list[float]
    last_epoch_success: float
    cumulative_success: float
    validation_success: list[float]
    best_validation_success: float | None = None

    def lines(self, summary: RunSummary) -> list[str]:
        rates = " ".join(f"{r:.2f}" for r in self.epoch_success)
        lines = [
            f"epochs: success {rates} · last epoch {self.last_epoch_success:.3f}"
            f" · cumulative {self.cumulative_success:.3f}"
        ]
        if self.validation_success and self.best_validation_success is not None:
            held = " ".join(f"{r:.2f}" for r in self.validation_success)
            lines.append(f"held-out validation after each epoch: {held} · best {self.best_validation_success:.3f}")
        return lines


@dataclass(frozen=True)
class Control:
    """The paired control arm (`--control`): success@k with and without memory on the same instances and seeds, in
    the control's epoch, and each arm's invalid steps there."""

    tasks: int
    rows: list[PairedRow]
    epoch: int
    memory_invalid: Invalid | None = None
    control_invalid: Invalid | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Control:
        """As summary.json holds it, or older files (one `invalid_rate` per arm)."""
        arms = {}
        if isinstance(data.get("invalid_rate"), dict):
            arms = {f"{arm}_invalid": Invalid(rate) for arm, rate in data["invalid_rate"].items()}
        for arm in ("memory_invalid", "control_invalid"):
            if data.get(arm) is not None:
                arms[arm] = Invalid(**data[arm])
        return cls(data["tasks"], [PairedRow(**row) for row in data["rows"]], data.get("epoch", 1), **arms)

    def lines(self, summary: RunSummary) -> list[str]:
        epoch = f", epoch {self.epoch}" if summary.protocol else ""
        lines = [f"vs the same player without memory on the same tasks and seeds (--control{epoch}):"]
        lines.append(success_table(self.rows, "memory", "control"))
        if self.memory_invalid is not None and self.control_invalid is not None:
            memory, control = self.memory_invalid.text(), self.control_invalid.text()
            lines.append(f"invalid replies: with memory {memory} · control {control}")
        return lines


@dataclass(frozen=True)
class Learning:
    """The last epoch against the first on the tasks both played, paired by task: whether the memory's later epochs
    solve what the first did not (MemRL's runtime learning, in distribution by design)."""

    tasks: int
    rows: list[PairedRow]
    first: int
    last: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Learning:
        return cls(data["tasks"], [PairedRow(**row) for row in data["rows"]], data["first"], data["last"])

    def lines(self, summary: RunSummary) -> list[str]:
        last, first = f"epoch {self.last}", f"epoch {self.first}"
        return [f"{last} vs {first} on the same {self.tasks} tasks:", success_table(self.rows, last, first)]


@dataclass(frozen=True)
class MemoryGain:
    """success@N with memory against the greedy no-memory control, which is attempt 1 repeated (`memory_gain`)."""

    k: int
    control: float
    with_memory: float
    solved_only_with_memory: int
    p_value: float

    def lines(self, summary: RunSummary) -> list[str]:
        return [
            f"vs the same player without memory (greedy: a retry repeats attempt 1): success@{self.k} "
            f"{self.control:.3f} → {self.with_memory:.3f}, {self.solved_only_with_memory} task(s) solved only with "
            f"memory, exact McNemar p = {self.p_value:.3g}"
        ]


@dataclass(frozen=True)
class SkillRow:
    """The units that carry one skill tag, how many of them were solved, the share, and the paired control's share
    (where the records hold a control)."""

    tasks: int
    solved: int
    success: float
    control: float | None = None


@dataclass(frozen=True)
class SkillTable:
    """Success by tag, in one epoch: one row per tag the units' instances carry — their skills (LifelongAgentBench's
    per-skill metric) or their kind of task."""

    rows: dict[str, SkillRow]
    title: str = "success by skill"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SkillTable:
        return cls({skill: SkillRow(**row) for skill, row in data["rows"].items()}, data["title"])

    def lines(self, summary: RunSummary) -> list[str]:
        """One line per tag: its tasks, success (and the control's), the most common first."""
        controlled = all(row.control is not None for row in self.rows.values())
        width = max(len(skill) for skill in self.rows)
        ordered = sorted(self.rows.items(), key=lambda item: (-item[1].tasks, item[0]))
        return [f"{self.title} (tasks: success{' / control' * controlled}):"] + [
            f"  {skill:<{width}}  {row.tasks:>4}  {row.success:.3f}" + (f" / {row.control:.3f}" if controlled else "")
            for skill, row in ordered
        ]


@dataclass(frozen=True)
class RunSummary:
    """Everything a run's records say, computed once (`summarize`). The unit fields are empty (or None) until a
    task unit has finished; the sections (`SECTIONS`) are None where the records do not call for them."""

    run_dir: str
    config: RunConfig
    done: int
    total: int
    wall_s: float | None = None
    units: list[UnitRow] = field(default_factory=list)
    tasks: int = 0
    """Task units summarised (held-out validation units count only towards the protocol's validation success)."""
    mean_score: float | None = None
    first_attempt_score: float | None = None
    mean_attempts: float | None = None
    success_at_k: list[float] | None = None
    success_at_k_ci95: list[tuple[float, float]] | None = None
    pass_at_k: list[float] | None = None
    trajectory_entropy: float | None = None
    invalid: Invalid | None = None
    tokens: int = 0
    llm_s: float = 0.0
    played_s: float = 0.0
    wall_s_per_unit: float | None = None
    instances: dict[str, Any] = field(default_factory=dict)
    protocol: Protocol | None = None
    control: Control | None = None
    memory_gain: MemoryGain | None = None
    learning: Learning | None = None
    by_skill: SkillTable | None = None
    by_kind: SkillTable | None = None
    validation_by_skill: SkillTable | None = None
    rejudged: str | None = None
    """The metrics the verdicts were judged again by (`ttlearn rejudge`), or None."""

    @property
    def success(self) -> float | None:
        """The share of units solved within their attempts (success@N), None where the environment defines none."""
        return self.success_at_k[-1] if self.success_at_k else None

    def sections(self) -> list[Any]:
        """The sections the records called for, in `SECTIONS` order."""
        return [getattr(self, name) for name in SECTIONS if getattr(self, name) is not None]

    def to_json(self) -> dict[str, Any]:
        """What summary.json holds (the config's env, memory and player repeated at the top, for readers of the
        file)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["config"] = self.config.model_dump()
        for part in ("invalid", *SECTIONS):
            if data[part] is not None:
                data[part] = dataclasses.asdict(data[part])
        data["units"] = [dataclasses.asdict(row) for row in self.units]
        shown = {"env": self.config.env, "memory": self.config.memory, "player": self.config.player}
        return {**shown, "memory_options": self.config.memory_options, "version": self.config.version, **data}

    @classmethod
    def from_json(cls, data: dict[str, Any], config: RunConfig) -> RunSummary:
        """A summary.json read back, with its run's config (`runs.read_config`: the file's copy may be of a layout
        before one config existed), this layout's or an older one's (a top-level `invalid_rate` with
        `invalid_causes`, a control's `invalid_rate` per arm, `wall_s_per_task`); what an older file lacks is None."""
        names = {f.name for f in dataclasses.fields(cls)}
        count = data.get("tasks", 0)  # the oldest files name neither their directory nor their progress
        values = {"run_dir": "", "done": count, "total": count, **{k: v for k, v in data.items() if k in names}}
        values["config"] = config
        values["units"] = [UnitRow(**row) for row in data.get("units", [])]
        if "invalid_rate" in data:
            values["invalid"] = Invalid(data["invalid_rate"], data.get("invalid_causes"))
        elif data.get("invalid") is not None:
            values["invalid"] = Invalid(**data["invalid"])
        values.setdefault("wall_s_per_unit", data.get("wall_s_per_task"))
        if data.get("success_at_k_ci95") is not None:
            values["success_at_k_ci95"] = [tuple(pair) for pair in data["success_at_k_ci95"]]
        hints = typing.get_type_hints(cls)
        for name in SECTIONS:
            if data.get(name) is not None:
                kind = next(t for t in typing.get_args(hints[name]) if t is not type(None))
                values[name] = kind.from_json(data[name]) if hasattr(kind, "from_json") else kind(**data[name])
        return cls(**values)


# ---- from records ----------------------------------------------------------------------------------------------
def summarize(run: Run, wall_s: float | None = None) -> RunSummary:
    """The summary of a run from its config and unit records: what every run has, then the sections its records
    call for. `wall_s`: the time the last `play` took (None: the units' own times added up)."""
    head = RunSummary(str(run.path), run.config, run.done, run.total, wall_s)
    if not any(r["type"] == "task" for r in run.records):
        return head
    return summarize_units(run.records, run.config, head)


def unit_cost(record: Record) -> dict[str, float]:
    """The LLM cost of one unit, from its recorded calls (every arm's): tokens, calls and seconds."""
    calls = [c for c in record["calls"] if c.get("type") == "call"]
    return {
        "tokens": sum(c["completion"]["prompt_tokens"] + c["completion"]["completion_tokens"] for c in calls),
        "llm_calls": len(calls),
        "llm_s": sum(c.get("wall_s", 0.0) for c in calls),
    }


def unit_rows(records: Sequence[Record]) -> list[UnitRow]:
    """One row per unit, in order (`UnitRow`)."""
    cumulative = cumulative_performance([r["score"] for r in records])
    rows = []
    for record, running in zip(records, cumulative):
        steps = [s for a in record["attempts"] for s in a["steps"]]
        defined = any(a.get("success") is not None for a in record["attempts"])
        rows.append(
            UnitRow(
                unit=record["index"],
                score=record["score"],
                cumulative=float(running),
                solved=record["first_success"] is not None if defined else None,
                steps=len(steps),
                invalid=sum(not s["valid"] for s in steps),
                **unit_cost(record),
                wall_s=record.get("wall_s", 0.0),
            )
        )
    return rows


def _stats(values: list[float]) -> dict[str, float]:
    return {"mean": float(np.mean(values)), "min": float(min(values)), "max": float(max(values))}


def instance_summary(instances: list[dict[str, Any]]) -> dict[str, Any]:
    """Ceilings of the instance set: optimal-length / fewest-reveals stats, the no-guess rate, and the share of
    instances whose need (optimal moves, fewest reveals) fits in an attempt's move budget at all."""
    out: dict[str, Any] = {}
    for name in ("optimal_length", "min_reveals"):
        values = [i[name] for i in instances if name in i]
        if values:
            out[name] = _stats(values)
            budgets = [(i[name], i["budget"]) for i in instances if name in i and "budget" in i]
            if budgets:
                out["within_budget_rate"] = float(np.mean([need <= budget for need, budget in budgets]))
    flags = [i["no_guess"] for i in instances if "no_guess" in i]
    if flags:
        out["no_guess_rate"] = float(np.mean(flags))
    return out


def summarize_units(records: Sequence[Record], config: RunConfig, head: RunSummary | None = None) -> RunSummary:
    """Everything the tables show, from unit records alone (`head`: the run's directory, counts and time).

    success@k: solved within the first k sequential attempts, with its 95 % Wilson interval over the units (None
    where the environment defines no success). pass@k: the unbiased estimator over the n attempts of each unit,
    reported only when they are independent samples (memory "none") and all were played (no early stop).
    Trajectory entropy: per instance, the Shannon entropy (bits) of the distribution of distinct action sequences
    over its attempts, averaged over instances. Held-out (validation) units count only towards MemRL's
    best-validation success.
    """
    head = head or RunSummary("", config, len(records), config.total)
    rejudged = sorted({r["rejudged"]["metric"] for r in records if "rejudged" in r})
    records = [as_rejudged(r) for r in records]
    held_out = [r for r in records if r["type"] == "validation"]
    tasks = [r for r in records if r["type"] == "task"]
    rows = unit_rows(tasks)
    n = int(config.attempts)
    attempts = [[Episode.from_json(a) for a in r["attempts"]] for r in tasks]
    first = [r["first_success"] for r in tasks]
    defined = any(row.solved is not None for row in rows)
    independent = config.memory == "none" and all(len(eps) == n for eps in attempts)  # samples for pass@k
    samples = [(n, sum(bool(e.success) for e in eps)) for eps in attempts] if independent and defined else []
    return dataclasses.replace(
        head,
        units=rows,
        tasks=len(tasks),
        mean_score=float(np.mean([r["score"] for r in tasks])),
        first_attempt_score=float(np.mean([eps[0].score for eps in attempts])),
        mean_attempts=float(np.mean([len(eps) for eps in attempts])),
        success_at_k=success_at_k(first, n).tolist() if defined else None,
        success_at_k_ci95=[
            wilson_interval(sum(a is not None and a <= k for a in first), len(first)) for k in range(1, n + 1)
        ]
        if defined
        else None,
        pass_at_k=[mean_pass_at_k(samples, k) for k in range(1, n + 1)] if samples else None,
        trajectory_entropy=mean_trajectory_entropy(
            [[tuple(s.action for s in e.steps) for e in eps] for eps in attempts]
        ),
        invalid=pooled_invalid(rows, [step_causes(tasks)]),
        tokens=sum(row.tokens for row in rows),
        llm_s=sum(row.llm_s for row in rows),
        played_s=sum(row.wall_s for row in rows),
        wall_s=head.wall_s if head.wall_s is not None else sum(row.wall_s for row in rows),
        wall_s_per_unit=float(np.mean([row.wall_s for row in rows])),
        instances=instance_summary([r["instance"] for r in tasks]),
        rejudged=", ".join(rejudged) or None,
        **{name: section(tasks, held_out, config) for name, section in SECTIONS.items()},
    )


def protocol_section(tasks: list[Record], held_out: list[Record], config: RunConfig) -> Protocol | None:
    """MemRL's protocol metrics, for runs of several epochs or with held-out validation units."""
    if config.epochs == 1 and not held_out:
        return None
    per_epoch: list[dict[int, bool]] = [{} for _ in range(config.epochs)]
    validation: list[dict[int, bool]] = [{} for _ in range(config.epochs)]
    for record in tasks:
        per_epoch[record["epoch"] - 1][record["task"]] = record["first_success"] is not None
    for record in held_out:
        validation[record["epoch"] - 1][record["task"]] = record["first_success"] is not None
    protocol = run_protocol([e for e in per_epoch if e], [v for v in validation if v])
    return Protocol(
        epoch_success=protocol.per_epoch,
        last_epoch_success=protocol.last_epoch_success,
        cumulative_success=protocol.cumulative_success,
        validation_success=protocol.validation,
        best_validation_success=protocol.best_validation_success,
    )


def control_section(tasks: list[Record], held_out: list[Record], config: RunConfig) -> Control | None:
    """The paired control: each instance once, in the control's epoch (the last one; older runs played it in every
    epoch), never pooled over epochs."""
    controlled = [r for r in tasks if "control_first_success" in r]
    if not controlled:
        return None
    epoch = max(r["epoch"] for r in controlled)
    paired = [r for r in controlled if r["epoch"] == epoch]
    pairs = [(r["first_success"], r["control_first_success"]) for r in paired]
    comparison = paired_success(pairs, int(config.attempts))
    if not all("control_steps" in r for r in paired):
        return Control(comparison.tasks, comparison.rows, epoch)
    control = Invalid(sum(r["control_invalid_steps"] for r in paired) / sum(r["control_steps"] for r in paired))
    memory = pooled_invalid(unit_rows(paired), [step_causes(paired)])
    return Control(comparison.tasks, comparison.rows, epoch, memory, control)


def learning_section(tasks: list[Record], held_out: list[Record], config: RunConfig) -> Learning | None:
    """The last epoch played against the first, paired by task, for runs of several epochs."""
    epochs = sorted({r["epoch"] for r in tasks})
    if len(epochs) < 2:
        return None
    first = {r["task"]: r["first_success"] for r in tasks if r["epoch"] == epochs[0]}
    pairs = [(r["first_success"], first[r["task"]]) for r in tasks if r["epoch"] == epochs[-1] and r["task"] in first]
    if not pairs:
        return None
    comparison = paired_success(pairs, int(config.attempts))
    return Learning(comparison.tasks, comparison.rows, epochs[0], epochs[-1])


def memory_gain_section(tasks: list[Record], held_out: list[Record], config: RunConfig) -> MemoryGain | None:
    """The memory's gain against the greedy control, where that control is attempt 1 itself and no control arm was
    played."""
    controlled = any("control_first_success" in r for r in tasks)
    if controlled or not greedy_control_applies(config) or config.attempts == 1:
        return None
    return memory_gain([r["first_success"] for r in tasks], int(config.attempts))


def success_by_skill(units: list[tuple[list[str], bool]]) -> dict[str, dict[str, float]]:
    """Per skill tag, the units that carry it and the share of them solved: a unit counts once for each of its
    skills, as LifelongAgentBench's per-skill metric counts a session."""
    table: dict[str, dict[str, float]] = {}
    for skills, solved in units:
        for skill in skills:
            row = table.setdefault(skill, {"tasks": 0, "solved": 0})
            row["tasks"] += 1
            row["solved"] += solved
    return {skill: {**row, "success": row["solved"] / row["tasks"]} for skill, row in sorted(table.items())}


def tag_table(
    records: list[Record], tags: Callable[[dict[str, Any]], list[str] | None], title: str
) -> SkillTable | None:
    """`success_by_skill` of the last epoch's unit records by the tags `tags` reads from each instance (None: the
    instance has none), with the paired control's success beside it where the records hold one; None where no
    instance has tags."""
    tagged = [(r, tags(r["instance"])) for r in records if r["epoch"] == records[-1]["epoch"]]
    tagged = [(r, names) for r, names in tagged if names is not None]
    if not tagged:
        return None
    table = success_by_skill([(names, r["first_success"] is not None) for r, names in tagged])
    control = {}
    if all("control_first_success" in r for r, _ in tagged):
        control = success_by_skill([(names, r["control_first_success"] is not None) for r, names in tagged])
    rows = {
        tag: SkillRow(int(row["tasks"]), int(row["solved"]), row["success"], control.get(tag, {}).get("success"))
        for tag, row in table.items()
    }
    return SkillTable(rows, title)


def skill_tags(instance: dict[str, Any]) -> list[str] | None:
    """The skills an instance exercises (`db_bench`: LifelongAgentBench's tags), or None."""
    return instance.get("skills")


def kind_tag(instance: dict[str, Any]) -> list[str] | None:
    """The kind of task an instance is (`db_bench`: select, insert, update, delete), or None."""
    return [instance["kind"]] if "kind" in instance else None


def by_skill_section(tasks: list[Record], held_out: list[Record], config: RunConfig) -> SkillTable | None:
    """Success by skill of the last epoch's units (their instances name skills: `db_bench`)."""
    return tag_table(tasks, skill_tags, "success by skill")


def by_kind_section(tasks: list[Record], held_out: list[Record], config: RunConfig) -> SkillTable | None:
    """Success by kind of task of the last epoch's units (their instances name one: `db_bench`)."""
    return tag_table(tasks, kind_tag, "success by kind")


def validation_by_skill_section(tasks: list[Record], held_out: list[Record], config: RunConfig) -> SkillTable | None:
    """Success by skill of the last epoch's held-out units."""
    return tag_table(held_out, skill_tags, "held-out success by skill") if held_out else None


Section = Callable[[list[Record], list[Record], RunConfig], Any]
SECTIONS: dict[str, Section] = {
    "memory_gain": memory_gain_section,
    "control": control_section,
    "protocol": protocol_section,
    "learning": learning_section,
    "by_skill": by_skill_section,
    "by_kind": by_kind_section,
    "validation_by_skill": validation_by_skill_section,
}
"""The sections a run's records may call for, by their `RunSummary` field, each a pure function of the task units,
the held-out units and the config that returns the section or None. A section is a dataclass with its `lines` for
`show` (and a `from_json` where its summary.json form is not its fields)."""


def greedy_control_applies(config: RunConfig) -> bool:
    """A greedy LLM player with no memory answers every attempt of an instance as it answered the first (same
    prompt, argmax decoding), so its success@k equals success@1: the paired control is attempt 1 itself. It needs
    greedy decoding and a deterministic player — not a scripted one, which may play differently on a restart."""
    return config.temperature == 0 and config.memory != "none" and not str(config.player).startswith("scripted:")


def memory_gain(first_success: list[int | None], attempts: int) -> MemoryGain:
    """success@N − success@1 against the greedy no-memory control, with the exact McNemar test on the paired
    instances: the control solves exactly the instances attempt 1 solved, so the discordant pairs are the instances
    solved only after the memory spoke (b) — none can be solved by the control alone (c = 0)."""
    tasks = len(first_success)
    at_one = sum(a == 1 for a in first_success)
    later = sum(a is not None and 1 < a <= attempts for a in first_success)
    return MemoryGain(
        k=attempts,
        control=at_one / tasks,
        with_memory=(at_one + later) / tasks,
        solved_only_with_memory=later,
        p_value=mcnemar_exact(later, 0),
    )
