"""A db_bench reply as the benchmark reads it (`DBBench._parse_agent_response` of LifelongAgentBench, MemTensor/MemRL
at 7c3beba): the first "Action: Operation" or "Action: Answer"; an operation's first ```sql block, or the answer's
"Final Answer:" line."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ACTION = re.compile(r"Action: (Operation|Answer)")
_SQL = re.compile(r"```sql\n([\s\S]*?)\n```")
_FINAL = re.compile(r"\nFinal Answer:(.*)")


@dataclass(frozen=True)
class Action:
    """A reply as the benchmark reads it: an operation's statements (its SQL block with newlines made spaces, split
    on ';'), or the final answer's text."""

    kind: str
    statements: tuple[str, ...] = ()
    answer: str = ""


def read_reply(reply: str) -> Action | None:
    """The benchmark's parse of a reply: the first "Action: Operation" or "Action: Answer"; an operation takes the
    first ```sql block, an answer the rest of the line after "\\nFinal Answer:". None: the reply matches neither,
    which ends the task."""
    action = _ACTION.search(reply)
    if action is None:
        return None
    if action.group(1) == "Operation":
        block = _SQL.search(reply)
        if block is None:
            return None
        sql = block.group(1).strip().replace("\n", " ")
        return Action("operation", tuple(s.strip() for s in sql.split(";") if s.strip()))
    final = _FINAL.search(reply)
    return None if final is None else Action("answer", answer=final.group(1).strip())
