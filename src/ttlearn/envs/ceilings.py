"""The most any environment option that bounds a resource may ask for, in one place.

An option that sets how long, how large or how many (a statement's time, a result's rows and characters, a reply's
tokens, the turns of an episode) comes from a user's `-e`, a config file or a received run's `run.json`; past its
ceiling it is refused with one line, whichever way it came (`Env` checks the options it is built with), so that no
recorded run can ask for an hour-long statement or a gigabyte answer. docs/limits.md lists them.
"""

from __future__ import annotations

import math
from typing import Any

CEILINGS: dict[str, dict[str, float]] = {
    "code": {"turns": 20, "timeout_s": 60.0},
    "db_bench": {
        "max_round": 100,
        "reply_tokens": 8192,
        "timeout_ms": 30_000,
        "max_rows": 10_000,
        "max_bytes": 1_000_000,
    },
    "holdem": {"hands": 100_000},
    "household": {"step_limit": 1000},
    "minesweeper": {"turns": 256},
    "rps": {"rounds": 100_000},
    "sokoban": {"turns": 100, "actions_per_turn": 10},
    "sql": {"turns": 20, "timeout_ms": 30_000},
    "tools": {"answer_chars": 100_000, "call_timeout_s": 60.0},
}
"""Environment → option → its ceiling. `db_bench`'s rows and characters stay within what one read of a table returns
(`sandbox._sqlite_child.MAX_ROWS`); every time limit within half a minute."""


def check_ceilings(env: str, options: dict[str, Any]) -> None:
    """Refuse (ValueError, one line) an option of `env` that is not a number at or under its ceiling."""
    for option, ceiling in CEILINGS.get(env, {}).items():
        if option not in options:
            continue
        value = options[option]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{env} option {option} must be a number, got {value!r}")
        if math.isnan(value) or value > ceiling:
            raise ValueError(f"{env} option {option} may be at most {ceiling:g}, got {value!r}")
