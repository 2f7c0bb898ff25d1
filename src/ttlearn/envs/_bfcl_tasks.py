"""BFCL's multi-turn tasks and function documentation, as the `tools` environment plays them (`envs.tools`).

The data come from the `bfcl-eval` wheel, which `prepare()` (`ttlearn data prepare tools`) downloads once with
`pip download --no-deps`, checks against its SHA-256 and unpacks into the cache (`data.bfcl`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ttlearn.data.bfcl import PREPARE_COMMAND, bfcl_dir

CATEGORIES = ("base", "long_context", "miss_func", "miss_param")
SPLITS = ("train", "test", "all")
SCENARIOS = 200
TEST_EVERY = 5
"""Scenario i is a test scenario when i % 5 == 0: 40 test and 160 train scenarios, all four variants of a scenario
on the same side (they share questions and back-end states, so splitting tasks would leak)."""


def prepared_dir() -> Path:
    root = bfcl_dir()
    if not (root / "bfcl_eval").is_dir():
        raise FileNotFoundError(f"the tools environment needs BFCL's data (not in {root}): run `{PREPARE_COMMAND}`")
    return root


@dataclass(frozen=True)
class Task:
    """One BFCL multi-turn entry. `messages[t]` is None on a turn that only offers the held-out functions."""

    id: str
    category: str
    scenario: int
    messages: tuple[str | None, ...]
    config: dict[str, Any]
    classes: tuple[str, ...]
    held_out: dict[int, tuple[str, ...]]
    gold: tuple[tuple[str, ...], ...]


def _json_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@lru_cache(maxsize=2)
def load_tasks(root: Path) -> tuple[Task, ...]:
    """All 800 tasks, scenario by scenario (base, long_context, miss_func, miss_param of scenario 0, then 1, ...)."""
    data = root / "bfcl_eval" / "data"
    tasks = []
    for category in CATEGORIES:
        questions = _json_lines(data / f"BFCL_v4_multi_turn_{category}.json")
        answer_rows = _json_lines(data / "possible_answer" / f"BFCL_v4_multi_turn_{category}.json")
        answers = {row["id"]: row["ground_truth"] for row in answer_rows}
        for row in questions:
            messages = tuple(" ".join(m["content"] for m in turn) if turn else None for turn in row["question"])
            tasks.append(
                Task(
                    id=row["id"],
                    category=category,
                    scenario=int(row["id"].rsplit("_", 1)[1]),
                    messages=messages,
                    config=row["initial_config"],
                    classes=tuple(row["involved_classes"]),
                    held_out={int(t): tuple(names) for t, names in row.get("missed_function", {}).items()},
                    gold=tuple(tuple(turn) for turn in answers[row["id"]]),
                )
            )
    return tuple(sorted(tasks, key=lambda t: (t.scenario, CATEGORIES.index(t.category))))


def in_split(scenario: int, split: str) -> bool:
    """Train: scenarios with i % 5 != 0 (160); test: i % 5 == 0 (40); all: every one."""
    return split == "all" or (scenario % TEST_EVERY == 0) == (split == "test")


@lru_cache(maxsize=2)
def load_function_docs(root: Path) -> dict[str, tuple[dict[str, Any], ...]]:
    """Each API class's function documentation (name, description, JSON-schema parameters), as BFCL ships it."""
    from_class = {
        "GorillaFileSystem": "gorilla_file_system",
        "MathAPI": "math_api",
        "MessageAPI": "message_api",
        "TwitterAPI": "posting_api",
        "TicketAPI": "ticket_api",
        "TradingBot": "trading_bot",
        "TravelAPI": "travel_booking",
        "VehicleControlAPI": "vehicle_control",
    }
    docs = root / "bfcl_eval" / "data" / "multi_turn_func_doc"
    return {cls: tuple(_json_lines(docs / f"{stem}.json")) for cls, stem in from_class.items()}


def signature(doc: dict[str, Any]) -> str:
    """A compact line: `name(param: type, optional: type = default) - what it does` (BFCL's preamble dropped)."""
    properties = doc["parameters"].get("properties", {})
    required = set(doc["parameters"].get("required", []))
    params = []
    for name, spec in properties.items():
        kind = spec.get("type", "any")
        if kind == "array" and "items" in spec:
            kind = f"array of {spec['items'].get('type', 'any')}"
        params.append(f"{name}: {kind}" if name in required else f"{name}: {kind} = {spec.get('default')!r}")
    description = doc["description"].split("Tool description: ", 1)[-1].strip()
    return f"{doc['name']}({', '.join(params)}) - {description}"
