"""The ground truth a db_bench task is judged by on each engine, found by running its gold SQL there: the tool that
writes the shipped data (`benchmarks/db_bench_truth.py`) and the tests that check it call it; the environment only
reads its result (`data.db_bench.Task.truth`)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from ttlearn.data.db_bench import Task, Truth
from ttlearn.envs._db_bench_engine import Engine
from ttlearn.envs._db_bench_reply import read_reply
from ttlearn.envs._llb_verdict import answer_matches, server_answer
from ttlearn.sandbox.statements import StatementLimits

GOLD_LIMITS = StatementLimits(timeout_ms=10_000, max_rows=100_000, max_bytes=10**7)
"""The gold is trusted: it runs under limits no gold comes near."""


def gold_truth(task: Task, engine: Engine, runs: int = 1) -> Truth:
    """What `task` is judged against on `engine` (built with `GOLD_LIMITS`): the recorded answer when the gold SQL,
    run there as the agent's SQL runs, reproduces it (its result as the server writes it passes the benchmark's
    check against the recorded rows, in one of `runs` runs of a SELECT; or the table's hash equals the recorded one);
    else the gold's own result there, when every run gave the same; else nothing, and the task is left out: the gold
    does not run there, or the order of the rows its ORDER BY leaves tied changes from run to run (MariaDB sorts ties
    in no fixed order)."""
    table = engine.open_table(task)
    try:
        action = read_reply(f"Action: Operation\n```sql\n{task.gold}\n```")
        assert action is not None
        outcomes = [table.execute(action.statements) for _ in range(runs if task.answer_md5 is None else 1)]
        failed = [o.error for o in outcomes if o.error is not None]
        if failed:
            return Truth("none", why=f"the gold SQL fails on {engine.name}: {failed[0]}")
        if task.answer_md5 is not None:
            digest = table.table_hash()
            if digest is None:
                return Truth("none", why=f"the gold's table on {engine.name} is past what can be read")
            return Truth("recorded") if digest == task.answer_md5 else Truth("engine", md5=digest)
    finally:
        table.close()
    assert task.answer_rows is not None
    if any(answer_matches(server_answer(o.rows), task.answer_rows) for o in outcomes):
        return Truth("recorded")
    if len({repr(o.rows) for o in outcomes}) > 1:
        return Truth("none", why=f"the gold's tied rows come back in another order from run to run on {engine.name}")
    rows = tuple(tuple(_plain(v) for v in row) for row in outcomes[0].rows or ())
    if any(not isinstance(v, (int, float, str)) for row in rows for v in row):
        return Truth("none", why=f"the gold's result on {engine.name} holds a value the answer check cannot read")
    return Truth("engine", rows=rows)


def _plain(value: Any) -> Any:
    """A server value as the answer check reads an expected one: DECIMAL as float."""
    return float(value) if isinstance(value, Decimal) else value
