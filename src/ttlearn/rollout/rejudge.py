"""Judge a recorded run again under other environment options (a new metric), from its records alone.

A run's records hold every reply, so a change of metric needs no model: each attempt's answer (the memory arm's from
its steps, the control's from its recorded LLM calls) is judged again by the environment built with the run's
options plus the overrides. The new verdicts are written beside the old ones (`rejudged` in each record); the
records of what was played stay as they were, so `replay` still reproduces the run exactly. What the new verdicts
cannot change is what the memory saw while the run played (its rewards, the items it kept): the summary says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ttlearn.envs.base import Env
from ttlearn.rollout.parts import validate_parts
from ttlearn.runs import Run

Judge = Callable[[dict[str, Any], str | None], bool]
"""judge(instance, answer or None) -> solved."""


def first_solved(verdicts: list[bool]) -> int | None:
    """The 1-based index of the first solved attempt, or None."""
    return next((i for i, solved in enumerate(verdicts, 1) if solved), None)


def rejudge_record(record: dict[str, Any], judge: Judge, parse: Callable[[str], str | None], label: str) -> dict:
    """`record` with `rejudged`: the first success of the memory arm and of its control under `judge`."""
    instance = record["instance"]
    verdicts = []
    for attempt in record["attempts"]:
        steps = attempt["steps"]
        if len(steps) > 1:
            raise ValueError(f"task {record['task']}: an attempt of {len(steps)} steps cannot be judged again here")
        verdicts.append(bool(steps) and judge(instance, steps[0]["action"] if steps[0]["valid"] else None))
    rejudged: dict[str, Any] = {"metric": label, "first_success": first_solved(verdicts)}
    if "control_first_success" in record:
        replies = [c["completion"]["text"] for c in record["calls"] if c.get("role") == "player"]
        control = replies[len(replies) - record["control_steps"] :]
        rejudged["control_first_success"] = first_solved([judge(instance, parse(text)) for text in control])
    return {**record, "rejudged": rejudged}


def rejudge_run(run: Run, overrides: dict[str, Any]) -> list[dict[str, Any]]:
    """Every unit record of `run` judged again by its environment built with `overrides`; the records are
    rewritten atomically with the verdicts beside the originals (`Run.rewrite`)."""
    config = run.config
    label = ", ".join(f"{k}={v}" for k, v in sorted(overrides.items()))
    with validate_parts(config.model_copy(update={"env_options": {**config.env_options, **overrides}})) as env:
        judged = [rejudge_record(r, _judge(env), _parser(env), label) for r in run.records]
    run.rewrite(judged)
    return judged


def _judge(env: Env) -> Judge:
    return lambda instance, answer: answer is not None and env.rejudge(instance, answer)


def _parser(env: Env) -> Callable[[str], str | None]:
    return lambda text: env.parse_action(text, ())
