"""One summariser for every run, from its unit records alone (so `show`, `resume` and `run` agree): what every run
has — each unit's score, cumulative performance and cost, success@k with Wilson intervals, trajectory entropy,
invalid steps by cause (unparseable replies, commands the simulator rejected, prompts over the context), tokens and
LLM time — then the sections its records call for: pass@k of independent attempts, instance-set ceilings, MemRL's
protocol metrics, the paired control. Also the paired comparison of two runs."""

from __future__ import annotations

from typing import Any

import numpy as np

from ttlearn.eval.metrics import (
    cumulative_performance,
    mcnemar_exact,
    mean_pass_at_k,
    mean_trajectory_entropy,
    paired_sign_flip_p,
    run_protocol,
    success_at_k,
    wilson_interval,
)
from ttlearn.runs import Run, RunConfig
from ttlearn.types import Episode, count_causes


def summarize(run: Run, wall_s: float | None = None) -> dict[str, Any]:
    """What every run has (its directory, config, version, how many of its units are done, their rows and cost),
    then the sections its records hold."""
    head = {
        "run_dir": str(run.path),
        "config": run.config.model_dump(),
        "version": run.config.version,
        "done": run.done,
        "total": run.total,
    }
    if not any(r["type"] == "task" for r in run.records):
        return head
    return {**head, **summarize_units(run.records, run.config, wall_s)}


def unit_cost(record: dict[str, Any]) -> dict[str, float]:
    """The LLM cost of one unit, from its recorded calls: tokens, calls and seconds."""
    calls = [c for c in record["calls"] if c.get("type") == "call"]
    return {
        "tokens": sum(c["completion"]["prompt_tokens"] + c["completion"]["completion_tokens"] for c in calls),
        "llm_calls": len(calls),
        "llm_s": sum(c.get("wall_s", 0.0) for c in calls),
    }


def unit_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per unit: its score (the last attempt's), the cumulative mean score so far, steps, invalid steps
    and cost."""
    scores = [r["score"] for r in records]
    rows = []
    for record, cumulative in zip(records, cumulative_performance(scores)):
        steps = [s for a in record["attempts"] for s in a["steps"]]
        rows.append(
            {
                "unit": record["index"],
                "score": record["score"],
                "cumulative": float(cumulative),
                "solved": record["first_success"] is not None,
                "steps": len(steps),
                "invalid": sum(not s["valid"] for s in steps),
                **unit_cost(record),
                "wall_s": record.get("wall_s", 0.0),
            }
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


def summarize_units(records: list[dict[str, Any]], config: RunConfig, wall_s: float | None = None) -> dict[str, Any]:
    """Everything the tables show, from unit records alone.

    success@k: solved within the first k sequential attempts, with its 95 % Wilson interval over the units.
    pass@k: the unbiased estimator over the n attempts of each unit, reported only when they are independent samples
    (memory "none") and all were played (no early stop).
    Trajectory entropy: per instance, the Shannon entropy (bits) of the distribution of distinct action sequences
    over its attempts, averaged over instances.
    Held-out (validation) units count only towards MemRL's best-validation success.
    """
    rejudged = {r["rejudged"]["metric"] for r in records if "rejudged" in r}
    records = [as_rejudged(r) for r in records]
    held_out = [r for r in records if r["type"] == "validation"]
    records = [r for r in records if r["type"] == "task"]
    rows = unit_rows(records)
    n = config.attempts
    attempts = [[Episode.from_json(a) for a in r["attempts"]] for r in records]
    first = [r["first_success"] for r in records]
    summary: dict[str, Any] = {
        "env": config.env,
        "memory": config.memory,
        "memory_options": config.memory_options,
        "player": config.player,
        "tasks": len(records),
        "attempts": n,
        "units": rows,
        "mean_score": float(np.mean([r["score"] for r in records])),
        "success_at_k": success_at_k(first, n).tolist(),
        "success_at_k_ci95": [
            list(wilson_interval(sum(a is not None and a <= k for a in first), len(first))) for k in range(1, n + 1)
        ],
        "trajectory_entropy": mean_trajectory_entropy(
            [[tuple(s.action for s in e.steps) for e in eps] for eps in attempts]
        ),
        "mean_attempts": float(np.mean([len(eps) for eps in attempts])),
        "first_attempt_score": float(np.mean([eps[0].score for eps in attempts])),
        "invalid_rate": float(np.mean([not s.valid for eps in attempts for e in eps for s in e.steps])),
        "invalid_causes": count_causes(s for eps in attempts for e in eps for s in e.steps),
        "wall_s_per_task": float(np.mean([r["wall_s"] for r in records])),
        "tokens": sum(row["tokens"] for row in rows),
        "llm_s": sum(row["llm_s"] for row in rows),
        "played_s": sum(row["wall_s"] for row in rows),
        "wall_s": wall_s if wall_s is not None else sum(row["wall_s"] for row in rows),
        "instances": instance_summary([r["instance"] for r in records]),
        "pass_at_k": None,
    }
    if config.epochs > 1 or held_out:
        per_epoch: list[dict[int, bool]] = [{} for _ in range(config.epochs)]
        validation: list[dict[int, bool]] = [{} for _ in range(config.epochs)]
        for record in records:
            per_epoch[record["epoch"] - 1][record["task"]] = record["first_success"] is not None
        for record in held_out:
            validation[record["epoch"] - 1][record["task"]] = record["first_success"] is not None
        protocol = run_protocol([e for e in per_epoch if e], [v for v in validation if v])
        summary["protocol"] = {
            "epoch_success": protocol.per_epoch,
            "last_epoch_success": protocol.last_epoch_success,
            "cumulative_success": protocol.cumulative_success,
            "validation_success": [sum(v.values()) / len(v) for v in validation if v],
            "best_validation_success": protocol.best_validation_success,
        }
    if any("skills" in r["instance"] for r in records):
        summary["by_skill"] = skill_table([r for r in records if r["epoch"] == records[-1]["epoch"]])
        if held_out:
            summary["validation_by_skill"] = skill_table([r for r in held_out if r["epoch"] == held_out[-1]["epoch"]])
    if config.memory == "none" and all(len(eps) == n for eps in attempts):
        samples = [(n, sum(bool(e.success) for e in eps)) for eps in attempts]
        summary["pass_at_k"] = [mean_pass_at_k(samples, k) for k in range(1, n + 1)]
    controlled = [r for r in records if "control_first_success" in r]
    if controlled:
        # Each instance once: the control's epoch (the last one; older runs played it in every epoch), never pooled.
        epoch = max(r["epoch"] for r in controlled)
        paired = [r for r in controlled if r["epoch"] == epoch]
        pairs = [(r["first_success"], r["control_first_success"]) for r in paired]
        summary["control"] = {**paired_success(pairs, n), "epoch": epoch}
        if all("control_steps" in r for r in paired):
            steps = [s for r in paired for a in r["attempts"] for s in a["steps"]]
            summary["control"]["invalid_rate"] = {
                "memory": sum(not s["valid"] for s in steps) / len(steps),
                "control": sum(r["control_invalid_steps"] for r in paired) / sum(r["control_steps"] for r in paired),
            }
    elif greedy_control_applies(config) and n > 1:
        summary["memory_gain"] = memory_gain(first, n)
    if rejudged:
        summary["rejudged"] = ", ".join(sorted(rejudged))
    return summary


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


def skill_table(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """`success_by_skill` of unit records whose instance names its skills (one epoch's), with the paired control's
    success beside it where the records hold one."""
    skilled = [r for r in records if "skills" in r["instance"]]
    table = success_by_skill([(r["instance"]["skills"], r["first_success"] is not None) for r in skilled])
    if skilled and all("control_first_success" in r for r in skilled):
        control = success_by_skill([(r["instance"]["skills"], r["control_first_success"] is not None) for r in skilled])
        for skill, row in table.items():
            row["control"] = control[skill]["success"]
    return table


def as_rejudged(record: dict[str, Any]) -> dict[str, Any]:
    """The record with the verdicts of a later judge (`ttlearn rejudge`: the recorded replies judged again by
    another metric) in place of the ones it was played with; the record itself keeps both."""
    if "rejudged" not in record:
        return record
    verdicts = {k: v for k, v in record["rejudged"].items() if k in ("first_success", "control_first_success")}
    return {**record, **verdicts}


def greedy_control_applies(config: RunConfig) -> bool:
    """A greedy LLM player with no memory answers every attempt of an instance as it answered the first (same
    prompt, argmax decoding), so its success@k equals success@1: the paired control is attempt 1 itself. It needs
    greedy decoding and a deterministic player — not a scripted one, which may play differently on a restart."""
    return config.temperature == 0 and config.memory != "none" and not config.player.startswith("scripted:")


def memory_gain(first_success: list[int | None], attempts: int) -> dict[str, Any]:
    """success@N − success@1 against the greedy no-memory control, with the exact McNemar test on the paired
    instances: the control solves exactly the instances attempt 1 solved, so the discordant pairs are the instances
    solved only after the memory spoke (b) — none can be solved by the control alone (c = 0)."""
    tasks = len(first_success)
    at_one = sum(a == 1 for a in first_success)
    later = sum(a is not None and 1 < a <= attempts for a in first_success)
    return {
        "k": attempts,
        "control": at_one / tasks,
        "with_memory": (at_one + later) / tasks,
        "solved_only_with_memory": later,
        "p_value": mcnemar_exact(later, 0),
    }


def compare_trials(a: list[dict[str, Any]], b: list[dict[str, Any]], attempts: int) -> dict[str, Any]:
    """success@k of two runs on the tasks both finished (paired by seed, so the same instances), with the
    discordant counts and the exact McNemar p-value per k: the honest test of "A beats B" on one task set."""

    def key(record: dict[str, Any]) -> tuple[str, int, int]:
        return record.get("type", "task"), record["epoch"], record["seed"]

    a, b = [as_rejudged(r) for r in a], [as_rejudged(r) for r in b]
    by_key = {key(r): r for r in b}
    shared = [(r, by_key[key(r)]) for r in a if key(r) in by_key]
    if not shared:
        raise ValueError("the two runs share no finished task (compare runs of the same env, seed and task set)")
    comparison = paired_success([(x["first_success"], y["first_success"]) for x, y in shared], attempts)
    if all("attempts" in x and "attempts" in y for x, y in shared):
        scores = [(attempt_scores(x, attempts), attempt_scores(y, attempts)) for x, y in shared]
        comparison["scores"] = paired_scores(scores, attempts)
    return comparison


def attempt_scores(record: dict[str, Any], attempts: int) -> list[float]:
    """The environment's score of a task's attempts 1..`attempts`; a task solved earlier stopped there (LaMer's
    rule), so its solving attempt's score stands for the attempts it did not need."""
    played = [attempt["score"] for attempt in record["attempts"]]
    return [played[min(k, len(played)) - 1] for k in range(1, attempts + 1)]


def paired_scores(pairs: list[tuple[list[float], list[float]]], attempts: int) -> list[dict[str, Any]]:
    """Per attempt k, the mean score of A and B over paired tasks, the tasks where each scored higher, and the exact
    paired sign-flip p of the differences: whether A's k-th attempts beat B's, where success is too rare to say."""
    rows = []
    for k in range(attempts):
        differences = [x[k] - y[k] for x, y in pairs]
        rows.append(
            {
                "k": k + 1,
                "a": float(np.mean([x[k] for x, _ in pairs])),
                "b": float(np.mean([y[k] for _, y in pairs])),
                "a_higher": sum(d > 0 for d in differences),
                "b_higher": sum(d < 0 for d in differences),
                "p_value": paired_sign_flip_p(differences),
            }
        )
    return rows


def paired_success(pairs: list[tuple[int | None, int | None]], attempts: int) -> dict[str, Any]:
    """success@k of A and B on paired tasks, given each task's first successful attempt under A and under B (None:
    never), with the discordant counts and the exact McNemar p-value per k."""
    rows = []
    for k in range(1, attempts + 1):
        hits = [(x is not None and x <= k, y is not None and y <= k) for x, y in pairs]
        only_a, only_b = sum(x and not y for x, y in hits), sum(y and not x for x, y in hits)
        rows.append(
            {
                "k": k,
                "a": sum(x for x, _ in hits) / len(hits),
                "b": sum(y for _, y in hits) / len(hits),
                "only_a": only_a,
                "only_b": only_b,
                "p_value": mcnemar_exact(only_a, only_b),
            }
        )
    return {"tasks": len(pairs), "rows": rows}
