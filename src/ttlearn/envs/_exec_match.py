"""Spider's official execution match (test-suite-sql-eval, `eval_exec_match` without value plugging), as pure rules.

The official evaluator decides whether a predicted query is right by its denotation, not its text:
1. both queries are normalised the same way: `> =`, `< =` and `! =` are joined, `YEAR(CURDATE())` becomes 2020, and
   every DISTINCT keyword is dropped (its `--keep_distinct` flag is off by default), so both run *without* DISTINCT;
2. row order counts only when the gold query contains "order by" anywhere (its text, lower-cased);
3. the two results are equal when some permutation of the prediction's columns makes them the same list (ordered) or
   the same multiset of rows (unordered): column order and names do not matter, the number of columns does.

These functions give the same verdict as the official code on every input; the official code samples rows at random
to prune column permutations past three columns, which never removes a permutation that works, so pruning with
every row (as here) decides the same and is deterministic.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence

import sqlparse

_CURRENT_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.IGNORECASE)


def normalise(query: str) -> str:
    """The query as the official evaluator runs it: spaced comparison operators joined, the current year fixed at
    2020, every DISTINCT token removed (tokens as sqlparse splits them, so a quoted 'distinct' stays)."""
    query = query.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")
    statements = sqlparse.parse(query)
    if statements:
        query = "".join(token.value for token in statements[0].flatten() if token.value.lower() != "distinct")
    return _CURRENT_YEAR.sub("2020", query)


def order_matters(gold: str) -> bool:
    """Whether row order counts: the normalised gold query says "order by" anywhere (a subquery's counts too)."""
    return "order by" in normalise(gold).lower()


def _row_key(value: object) -> str:
    return str(value) + str(type(value))


def _unordered(row: tuple) -> tuple:
    return tuple(sorted(row, key=_row_key))


def _permutations(allowed: list[set[int]], taken: tuple[int, ...] = ()) -> Iterator[tuple[int, ...]]:
    """Every permutation whose c-th entry is in allowed[c], depth first."""
    if len(taken) == len(allowed):
        yield taken
        return
    for column in sorted(allowed[len(taken)] - set(taken)):
        yield from _permutations(allowed, (*taken, column))


def denotations_equal(gold: Sequence[tuple], predicted: Sequence[tuple], ordered: bool) -> bool:
    """The official `result_eq(gold, predicted, order_matters)`: equal up to a permutation of the predicted columns,
    as lists when `ordered`, else as multisets. Two empty results are equal."""
    gold, predicted = [tuple(row) for row in gold], [tuple(row) for row in predicted]
    if not gold and not predicted:
        return True
    if len(gold) != len(predicted) or len(gold[0]) != len(predicted[0]):
        return False
    # A necessary condition, the official quick rejection: the rows' values, each row sorted, agree.
    gold_sorted, predicted_sorted = [_unordered(r) for r in gold], [_unordered(r) for r in predicted]
    if (gold_sorted != predicted_sorted) if ordered else (set(gold_sorted) != set(predicted_sorted)):
        return False
    columns = len(gold[0])
    gold_values = [{row[c] for row in gold} for c in range(columns)]
    allowed = [
        {p for p in range(columns) if all(row[p] in gold_values[c] for row in predicted)} for c in range(columns)
    ]
    for perm in _permutations(allowed):
        moved = [tuple(row[p] for p in perm) for row in predicted]
        if (moved == gold) if ordered else Counter(moved) == Counter(gold):
            return True
    return False
