"""Two arms on the same instances, paired: the paired control of a run, or two runs compared (`ttlearn show
--against`, `ttlearn results`). success@k of each with the discordant tasks and McNemar's exact p, and the score of
each attempt with the exact paired sign-flip p, from unit records alone."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ttlearn.eval.metrics import mcnemar_exact, paired_sign_flip_p

Record = dict[str, Any]


@dataclass(frozen=True)
class PairedRow:
    """success@k of A and B on paired tasks, the tasks each solved alone, and the exact McNemar p."""

    k: int
    a: float
    b: float
    only_a: int
    only_b: int
    p_value: float


@dataclass(frozen=True)
class ScoreRow:
    """The mean score of attempt k of A and B on paired tasks, the tasks where each scored higher, the exact paired
    sign-flip p."""

    k: int
    a: float
    b: float
    a_higher: int
    b_higher: int
    p_value: float


@dataclass(frozen=True)
class Comparison:
    """Two runs on the tasks both finished (`compare_trials`)."""

    tasks: int
    rows: list[PairedRow]
    scores: list[ScoreRow] | None = None


def success_table(rows: Sequence[PairedRow], a: str, b: str) -> str:
    """success@k of A and B per k, their difference, the discordant tasks and McNemar's p, as a text table."""
    width = max(8, len(a) + 2, len(b) + 2)
    only = width + 5
    lines = [f"{'k':<3}{a:<{width}}{b:<{width}}{'diff':<8}{'only ' + a:<{only}}{'only ' + b:<{only}}McNemar p"]
    for row in rows:
        lines.append(
            f"{row.k:<3}{row.a:<{width}.3f}{row.b:<{width}.3f}{row.a - row.b:<+8.3f}"
            f"{row.only_a:<{only}}{row.only_b:<{only}}{row.p_value:.3f}"
        )
    return "\n".join(lines)


def as_rejudged(record: Record) -> Record:
    """The record with the verdicts of a later judge (`ttlearn rejudge`: the recorded replies judged again by
    another metric) in place of the ones it was played with; the record itself keeps both."""
    if "rejudged" not in record:
        return record
    verdicts = {k: v for k, v in record["rejudged"].items() if k in ("first_success", "control_first_success")}
    return {**record, **verdicts}


# ---- two runs compared -----------------------------------------------------------------------------------------
def compare_trials(a: list[Record], b: list[Record], attempts: int) -> Comparison:
    """success@k of two runs on the tasks both finished (paired by seed, so the same instances), with the
    discordant counts and the exact McNemar p-value per k: the honest test of "A beats B" on one task set."""

    def key(record: Record) -> tuple[str, int, int]:
        return record.get("type", "task"), record["epoch"], record["seed"]

    a, b = [as_rejudged(r) for r in a], [as_rejudged(r) for r in b]
    by_key = {key(r): r for r in b}
    shared = [(r, by_key[key(r)]) for r in a if key(r) in by_key]
    if not shared:
        raise ValueError("the two runs share no finished task (compare runs of the same env, seed and task set)")
    comparison = paired_success([(x["first_success"], y["first_success"]) for x, y in shared], attempts)
    if all("attempts" in x and "attempts" in y for x, y in shared):
        scores = [(attempt_scores(x, attempts), attempt_scores(y, attempts)) for x, y in shared]
        comparison = dataclasses.replace(comparison, scores=paired_scores(scores, attempts))
    return comparison


def attempt_scores(record: Record, attempts: int) -> list[float]:
    """The environment's score of a task's attempts 1..`attempts`; a task solved earlier stopped there (LaMer's
    rule), so its solving attempt's score stands for the attempts it did not need."""
    played = [attempt["score"] for attempt in record["attempts"]]
    return [played[min(k, len(played)) - 1] for k in range(1, attempts + 1)]


def paired_scores(pairs: list[tuple[list[float], list[float]]], attempts: int) -> list[ScoreRow]:
    """Per attempt k, the mean score of A and B over paired tasks, the tasks where each scored higher, and the exact
    paired sign-flip p of the differences: whether A's k-th attempts beat B's, where success is too rare to say."""
    rows = []
    for k in range(attempts):
        differences = [x[k] - y[k] for x, y in pairs]
        rows.append(
            ScoreRow(
                k=k + 1,
                a=float(np.mean([x[k] for x, _ in pairs])),
                b=float(np.mean([y[k] for _, y in pairs])),
                a_higher=sum(d > 0 for d in differences),
                b_higher=sum(d < 0 for d in differences),
                p_value=paired_sign_flip_p(differences),
            )
        )
    return rows


def paired_success(pairs: list[tuple[int | None, int | None]], attempts: int) -> Comparison:
    """success@k of A and B on paired tasks, given each task's first successful attempt under A and under B (None:
    never), with the discordant counts and the exact McNemar p-value per k."""
    rows = []
    for k in range(1, attempts + 1):
        hits = [(x is not None and x <= k, y is not None and y <= k) for x, y in pairs]
        only_a, only_b = sum(x and not y for x, y in hits), sum(y and not x for x, y in hits)
        rows.append(
            PairedRow(
                k=k,
                a=sum(x for x, _ in hits) / len(hits),
                b=sum(y for _, y in hits) / len(hits),
                only_a=only_a,
                only_b=only_b,
                p_value=mcnemar_exact(only_a, only_b),
            )
        )
    return Comparison(len(pairs), rows)
