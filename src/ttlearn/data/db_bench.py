"""LifelongAgentBench's `db_bench` tasks as MemRL's authors released them, shipped in the package.

`db_bench.json.gz` (beside this file; licence and attribution in `db_bench.LICENSE.md`) holds the 500 tasks of
`data/llb/db_bench_runtime_learning_data.json` of MemTensor/MemRL at 7c3beba (MIT), each with the split the runner
uses (`db_train.json`: 361, `db_val.json`: 139; the same tasks under the same keys) and, per engine, the ground truth
this package judges it by (`truth`): the recorded answer where the gold query reproduces it on that engine, else the
gold's own result there, or nothing (the gold does not run there: the task is left out on that engine). The file is
written by `benchmarks/db_bench_truth.py` from the released JSON files and checked here by its SHA-256.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).with_name("db_bench.json.gz")
DATA_SHA256 = "f7112e38f6161824704bc9cd1274df8a4d5370b22af89b6e0ecbc1f964ca3335"
ENGINES = ("sqlite", "mariadb")
SPLITS = ("train", "val")
"""The runner's split: `db_train.json` (the sections' tasks) and `db_val.json` (validation)."""
SPLIT_CHOICES = ("train", "val", "all", "dev", "build")
"""What an environment may play: the runner's `train` (361 tasks) and `val` (139), or both; `dev` and `build` cut
`train` in two for development (`dev`: the quarter of its tasks whose id hashes lowest, `build`: the rest), so that no
choice needs `val`."""
DEV_SHARE = 0.25


@dataclass(frozen=True)
class Truth:
    """What a task is judged against on one engine: `source` "recorded" (the released answer, which the gold
    reproduces there), "engine" (the gold's own result there: `rows` or `md5`) or "none" (the gold does not run
    there: the task is left out), with the reason."""

    source: str
    rows: tuple[tuple[Any, ...], ...] | None = None
    md5: str | None = None
    why: str = ""


@dataclass(frozen=True)
class Task:
    """One task: its table, instruction, skills, the released answer (rows for a SELECT, the table's hash after the
    change for INSERT / UPDATE / DELETE) with the gold SQL, and its truth per engine."""

    id: int
    split: str
    instruction: str
    table: str
    columns: tuple[tuple[str, str], ...]
    rows: tuple[tuple[Any, ...], ...]
    skills: tuple[str, ...]
    gold: str
    answer_rows: tuple[tuple[Any, ...], ...] | None
    answer_md5: str | None
    truth: dict[str, Truth]

    @property
    def kind(self) -> str:
        """select, insert, update or delete: the gold statement's verb."""
        return self.gold.split()[0].lower()

    def expected(self, engine: str) -> Truth:
        """The truth on `engine` with the recorded answer filled in where it is the recorded one."""
        truth = self.truth[engine]
        if truth.source == "recorded":
            return Truth("recorded", self.answer_rows, self.answer_md5)
        return truth


def _truth(data: dict[str, Any]) -> Truth:
    rows = data.get("rows")
    return Truth(
        data["source"], None if rows is None else tuple(map(tuple, rows)), data.get("md5"), data.get("why", "")
    )


def task_from_json(data: dict[str, Any]) -> Task:
    answer = data["answer"]
    return Task(
        id=data["id"],
        split=data["split"],
        instruction=data["instruction"],
        table=data["table"]["name"],
        columns=tuple((name, kind) for name, kind in data["table"]["columns"]),
        rows=tuple(map(tuple, data["table"]["rows"])),
        skills=tuple(data["skills"]),
        gold=answer["sql"],
        answer_rows=None if answer["direct"] is None else tuple(map(tuple, answer["direct"])),
        answer_md5=answer["md5"],
        truth={engine: _truth(data["truth"][engine]) for engine in data.get("truth", {})},
    )


def read_data(path: Path = DATA_FILE) -> dict[str, Any]:
    """The data file's JSON, checked against `DATA_SHA256` when it is the shipped file."""
    raw = path.read_bytes()
    if path == DATA_FILE and hashlib.sha256(raw).hexdigest() != DATA_SHA256:
        raise ValueError(f"{path} does not match its recorded SHA-256: reinstall ttlearn (the file was changed)")
    return json.loads(gzip.decompress(raw))


@cache
def load_tasks() -> tuple[Task, ...]:
    """The 500 tasks in the order of their ids."""
    return tuple(sorted((task_from_json(t) for t in read_data()["tasks"]), key=lambda task: task.id))


def in_split(task: Task, split: str) -> bool:
    """Whether `task` belongs to `split` (`SPLIT_CHOICES`)."""
    if split == "all":
        return True
    if split in SPLITS:
        return task.split == split
    return task.split == "train" and (dev_score(task.id) < DEV_SHARE) == (split == "dev")


def dev_score(task_id: int) -> float:
    """A task's place in [0, 1) by the SHA-256 of its id: the lowest `DEV_SHARE` of `train` is `dev`."""
    return int(hashlib.sha256(f"db_bench:{task_id}".encode()).hexdigest()[:12], 16) / 16**12
