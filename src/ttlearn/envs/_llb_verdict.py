"""LifelongAgentBench's `db_bench` verdicts, as pure functions: how its server answer reads, how a final answer is
compared with the expected rows, and its hash of a table.

The rules are those of the benchmark's `DirectTypeAnswerValidator` and `DBBench._get_task_output`
(MemTensor/MemRL at 7c3beba, `3rdparty/LifelongAgentBench/src/tasks/instance/db_bench/task.py`), quirks included, so
that a verdict here is the benchmark's verdict: a final answer is cut into the tuples between parentheses (a
`Decimal(…)` inside is not a tuple), and each tuple into comma-separated elements; a number matches when, stripped
of `Decimal(…)`, it parses and is within 1e-6 (relative or absolute) of the expected one; a string matches exactly,
after dropping one quote at each end that the expected string lacks (only when it is one or two characters longer).
The benchmark's trimming of non-numeric characters around a number keeps one of them, so `'55'` does not read as 55
there, nor here. Rows are compared in order.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

Row = tuple[Any, ...]

_DECIMAL = "Decimal"
_DECIMAL_ELEMENT = re.compile(r"""^Decimal\((["']?)(.*?)(["']?)\)$""")
_ELEMENT_SEPARATOR = re.compile(r"\s*,\s*")
_NUMBER_CHARS = "0123456789.-"
GROUP_CONCAT_MAX_LEN = 1024
"""MySQL 8's default `group_concat_max_len`: the benchmark's table hash concatenates the row hashes up to it."""


def server_answer(rows: Sequence[Row] | None) -> str:
    """What the benchmark's server sends back for a statement: the rows as Python writes the client's list of tuples
    (`str(cursor.fetchall())`: `[(1, 'Alice', Decimal('2.50'))]`), "[]" for a statement that returns none."""
    return str([tuple(row) for row in rows or ()])


def tuple_spans(answer: str) -> list[tuple[int, int]] | None:
    """The (open, close) positions of the answer's tuples, or None when its parentheses do not pair up. A parenthesis
    right after "Decimal" opens a number, not a tuple (a second one inside it fails); an opening parenthesis inside
    an open tuple restarts it (as the benchmark's scan does)."""
    spans: list[tuple[int, int]] = []
    start: int | None = None
    in_decimal = False
    for index, char in enumerate(answer):
        if char == "(":
            if answer[index - len(_DECIMAL) : index] == _DECIMAL:
                if in_decimal:
                    return None
                in_decimal = True
            else:
                start = index
        elif char == ")":
            if in_decimal:
                in_decimal = False
            elif start is None:
                return None
            else:
                spans.append((start, index))
                start = None
    return None if start is not None else spans


def _number_text(element: str) -> str:
    """The element stripped of `Decimal(…)` and trimmed around the number as the benchmark trims it: up to the last
    non-numeric character before the first numeric one, and from the first non-numeric one of the trailing run (so a
    lone surrounding quote stays and the element does not parse)."""
    element = _DECIMAL_ELEMENT.sub(r"\2", element)
    start = 0
    for index, char in enumerate(element):
        if char in _NUMBER_CHARS:
            break
        start = index
    end = len(element)
    for index in range(len(element) - 1, -1, -1):
        if element[index] in _NUMBER_CHARS:
            break
        end = index + 1
    return element[start:end]


def _string_matches(element: str, expected: str) -> bool:
    if 0 < len(element) - len(expected) <= 2:
        head = tail = False
        for quote in ("'", '"'):
            if not head and element.startswith(quote) and not expected.startswith(quote):
                element, head = element[1:], True
            if not tail and element.endswith(quote) and not expected.endswith(quote):
                element, tail = element[:-1], True
    return element == expected


def tuple_matches(text: str, expected: Row) -> bool:
    """Whether one tuple of a final answer (the text between its parentheses) is the expected row."""
    elements = [e.strip() for e in _ELEMENT_SEPARATOR.split(text) if e.strip()]
    if len(elements) != len(expected):
        return False
    for element, value in zip(elements, expected):
        if isinstance(value, (int, float)):
            try:
                number = float(_number_text(element))
            except ValueError:
                return False
            if not math.isclose(number, value, rel_tol=1e-6, abs_tol=1e-6):
                return False
        elif isinstance(value, str):
            if not _string_matches(element, value):
                return False
        else:
            return False
    return True


def answer_matches(answer: str, expected: Sequence[Row]) -> bool:
    """The benchmark's verdict on a SELECT task's final answer: its tuples, in order, are the expected rows. An answer
    without parentheses is one tuple, which can match a one-row answer."""
    spans = tuple_spans(answer)
    if spans is None:
        return False
    if not spans:
        return not expected or (len(expected) == 1 and tuple_matches(answer, expected[0]))
    if len(spans) != len(expected):
        return False
    return all(tuple_matches(answer[start + 1 : end], row) for (start, end), row in zip(spans, expected))


def _hash_text(value: Any) -> str:
    """A value as MySQL's CONCAT_WS writes it (numbers in digits, text as it is)."""
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def table_hash(rows: Sequence[Row]) -> str:
    """The benchmark's hash of a table's rows, computed here: `md5(group_concat(rowhash order by rowhash))` where each
    row's hash is the first five hex digits of `md5(concat_ws(',', columns))` (NULLs skipped), the concatenation cut
    at MySQL 8's 1024 characters; "None" for no rows (the hash of NULL as its client shows it)."""
    if not rows:
        return "None"
    hashes = sorted(
        hashlib.md5(",".join(_hash_text(v) for v in row if v is not None).encode("utf-8")).hexdigest()[:5]
        for row in rows
    )
    return hashlib.md5(",".join(hashes)[:GROUP_CONCAT_MAX_LEN].encode("utf-8")).hexdigest()
