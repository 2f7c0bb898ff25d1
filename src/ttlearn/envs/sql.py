"""Text-to-SQL on SQLite: answer a question about a database with one query, judged by its result.

One episode is one question. The agent sees the database's schema (compact CREATE TABLE lines) and the question,
and answers with a SQL query; the query runs read-only in a sandboxed child process (`sql_sandbox`) and the agent
sees its first rows or its error. It succeeds by Spider's official execution match (`metric="exec"`, the default:
the rules of test-suite-sql-eval, in `_exec_match.py`): both queries run without DISTINCT, the rows must be equal up
to a permutation of the columns, in order only when the gold query says ORDER BY. `metric="strict"` keeps ttlearn's
first judge: the rows as the queries return them, columns in the gold's order, ordered only when the gold query's
outermost SELECT has ORDER BY. With `turns` > 1 a wrong answer can be revised after seeing its result.

Data sets: `spider` (Spider-dev, built once by `ttlearn data prepare sql`) and `mini` (32 questions over three
small databases shipped in the package). Splits are by database, so test questions are about databases that no
training question touched (see `held_out_databases`).
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ttlearn.data.prepare import GOLD_TIMEOUT_MS, Question, load_question_set, spider_dir
from ttlearn.data.sql_mini import load_mini, mini_dir
from ttlearn.envs._exec_match import denotations_equal, normalise, order_matters
from ttlearn.envs.base import Env
from ttlearn.sandbox.sqlite import QueryResult, execute, run_query
from ttlearn.types import Observation, StepResult

DATASETS = ("spider", "mini")
METRICS = ("exec", "strict")
COLUMN_RULES = {
    "exec": "column names and their order do not matter",
    "strict": "column names do not matter, column order does",
}
"""What the rules say of columns under each metric (the strict text is the one runs recorded before `metric`)."""
SPLITS = ("all", "train", "test")
TEST_SHARE = 0.3
SHOWN_ROWS = 10
SHOWN_CELL_CHARS = 60
INVALID_PENALTY = -0.1
ANSWER_FORMAT = "Answer with one SQLite query in a ```sql code block."

_SQL_BLOCK = re.compile(r"```[ \t]*(?:sql|sqlite)\b(.*?)(?:```|$)", re.IGNORECASE | re.DOTALL)
_QUERY_START = re.compile(r"^\s*(SELECT|WITH)\b", re.IGNORECASE)
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPE_LENGTH = re.compile(r"\(.*\)")


def parse_sql(reply: str) -> str | None:
    """The query in a free-text reply, or None. Rule: the first ```sql (or ```sqlite) block; else the first line
    that starts with SELECT or WITH, continued up to the first `;`, blank line or ``` fence. A trailing `;` is
    dropped."""
    block = _SQL_BLOCK.search(reply)
    if block:
        query = block.group(1)
    else:
        lines = reply.splitlines()
        start = next((i for i, line in enumerate(lines) if _QUERY_START.match(line)), None)
        if start is None:
            return None
        taken = []
        for line in lines[start:]:
            if not line.strip() or line.lstrip().startswith("```"):
                break
            taken.append(line)
            if ";" in line:
                break
        query = "\n".join(taken).split(";")[0]
    query = query.strip().rstrip(";").strip()
    return query or None


def rows_match(got: Sequence[tuple], gold: Sequence[tuple], ordered: bool) -> bool:
    """Execution match: the same rows in the same order when the gold query orders them, else the same multiset.
    Values compare as Python does (1 == 1.0; 'a' != 'A')."""
    if ordered:
        return list(got) == list(gold)
    return Counter(got) == Counter(gold)


def exec_match(
    db_path: Path, gold: str, gold_rows: Sequence[tuple], result: QueryResult, query: str, timeout_ms: int
) -> bool:
    """Spider's official verdict on `query`, whose own run gave `result`, against the normalised gold query's rows:
    the query runs again only when the official normalisation (DISTINCT dropped, operators joined) changed it."""
    normalised = normalise(query)
    if normalised != query:
        result = run_query(db_path, normalised, timeout_ms)
    return result.ok and denotations_equal(gold_rows, result.rows, order_matters(gold))


def held_out_databases(questions_per_db: Mapping[str, int], share: float = TEST_SHARE) -> frozenset[str]:
    """The test split's databases: in the order of the SHA-256 of their names, databases join the test split until
    it holds at least `share` of all questions. Deterministic, independent of file order, and cross-database: a
    memory built on train is measured on databases it never saw."""
    total = sum(questions_per_db.values())
    chosen: set[str] = set()
    held = 0
    for db in sorted(questions_per_db, key=lambda name: hashlib.sha256(name.encode()).hexdigest()):
        if held >= share * total:
            break
        chosen.add(db)
        held += questions_per_db[db]
    return frozenset(chosen)


def answer_key(question: Question) -> str:
    """A short hash of the question's gold query, whitespace and case folded: questions that share it are
    paraphrases of one another (Spider repeats most of its questions in other words). For reports and benchmarks
    only, like every instance fact: it names the answer's identity, never the answer."""
    folded = re.sub(r"\s+", " ", question.gold.strip().rstrip(";").lower())
    return f"{question.db}:{hashlib.sha256(folded.encode()).hexdigest()[:12]}"


def _name(identifier: str) -> str:
    return identifier if _PLAIN_NAME.fullmatch(identifier) else '"' + identifier.replace('"', '""') + '"'


@cache
def compact_schema(db_path: Path) -> str:
    """One CREATE TABLE line per table: columns with their declared types (lengths dropped), the primary key (inline
    when it is one column) and the foreign keys, read from the database itself."""
    lines = []
    with closing(sqlite3.connect(f"file:{quote(str(db_path))}?mode=ro", uri=True)) as connection:
        tables = connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        ).fetchall()
        for (table,) in tables:
            columns = connection.execute(f"PRAGMA table_info({_name(table)})").fetchall()  # cid name type notnull _ pk
            parts = [f"{_name(c[1])} {_TYPE_LENGTH.sub('', c[2])}".strip() for c in columns]
            key = [c for c in sorted(columns, key=lambda c: c[5]) if c[5]]
            if len(key) == 1:
                parts[key[0][0]] += " PRIMARY KEY"
            elif key:
                parts.append(f"PRIMARY KEY ({', '.join(_name(c[1]) for c in key)})")
            foreign: dict[int, list[tuple]] = {}
            for fk in connection.execute(f"PRAGMA foreign_key_list({_name(table)})"):  # id seq table from to ...
                foreign.setdefault(fk[0], []).append(fk)
            for pairs in foreign.values():
                mine = ", ".join(_name(p[3]) for p in pairs)
                theirs = ", ".join(_name(p[4]) for p in pairs if p[4])
                parts.append(f"FOREIGN KEY ({mine}) REFERENCES {_name(pairs[0][2])}({theirs})")
            lines.append(f"CREATE TABLE {_name(table)} ({', '.join(parts)});")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    text = "NULL" if value is None else str(value)
    return text if len(text) <= SHOWN_CELL_CHARS else text[: SHOWN_CELL_CHARS - 1] + "…"


def format_result(result: QueryResult, shown: int = SHOWN_ROWS) -> str:
    """What the agent sees of a query's outcome: the error, or the row count, the column names and the first rows
    as `a | b` lines."""
    if not result.ok:
        return f"Error: {result.error}"
    count = len(result.rows)
    head = f"Result: {count} row{'s' * (count != 1)}"
    if count > shown:
        head += f" (first {shown} shown)"
    lines = [head, " | ".join(result.columns)]
    lines += [" | ".join(_cell(v) for v in row) for row in result.rows[:shown]]
    return "\n".join(lines)


@dataclass(frozen=True)
class Attempt:
    """One turn: the query tried (None: the reply held none) and what it gave."""

    query: str | None
    result: QueryResult | None
    solved: bool

    @property
    def reward(self) -> float:
        return 1.0 if self.solved else (INVALID_PENALTY if self.query is None else 0.0)

    def feedback(self) -> str:
        if self.result is None:
            return f"No SQL query found in the reply. {ANSWER_FORMAT}"
        return format_result(self.result)


class SQLEnv(Env):
    """Answer questions about SQLite databases with SQL. Options: `dataset` (spider | mini), `split` (all | train |
    test, by database), `database` (only the questions about one database: an agent that works on one database over
    time, where a memory can carry what it learned about it), `task` (pin one question id), `turns` (queries per
    episode; after a wrong one the agent sees its result and may revise), `metric` (exec: Spider's official execution
    match, the default; strict: ttlearn's first judge, what runs recorded before the option played), `prefill` (the
    reply starts inside a ```sql block the player opens for the model, so a small model writes a query rather than
    a paraphrase of the question; off in runs recorded before the option), `include_empty` (also play the trivial
    questions: those whose gold result is empty, which any query that finds nothing passes, and those on a database
    without rows, Spider's wta_1), `timeout_ms` (per query), `seed` (accepted for the common config; the questions
    are fixed data)."""

    default_player = "qwen-coder"
    reply_tokens = 256
    legacy_options = {"metric": "strict", "prefill": False}

    def __init__(
        self,
        dataset: str = "spider",
        split: str = "all",
        database: str | None = None,
        task: int | None = None,
        turns: int = 1,
        metric: str = "exec",
        prefill: bool = True,
        include_empty: bool = False,
        timeout_ms: int = 2000,
        seed: int = 0,
    ) -> None:
        if dataset not in DATASETS:
            raise ValueError(f"dataset must be one of {', '.join(DATASETS)}, got {dataset!r}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
        if turns < 1:
            raise ValueError(f"turns must be at least 1, got {turns}")
        if timeout_ms < 1:  # its ceiling: `ceilings.CEILINGS`
            raise ValueError(f"timeout_ms must be at least 1, got {timeout_ms}")
        self.dataset, self.split, self.database, self.task_id, self.turns = dataset, split, database, task, turns
        self.metric, self.prefill = metric, prefill
        self.reply_prefix = "```sql\n" if prefill else ""
        self.include_empty, self.timeout_ms, self.seed = include_empty, timeout_ms, seed
        if dataset == "spider":
            self.data_dir = spider_dir()
            manifest, questions = load_question_set(self.data_dir)
        else:
            self.data_dir = mini_dir()
            manifest, questions = load_mini()
        per_database = Counter(q.db for q in questions)
        if database is not None and database not in per_database:
            raise ValueError(f"unknown database {database!r} in {dataset}; one of: {', '.join(sorted(per_database))}")
        self.test_dbs = held_out_databases(per_database)
        self.questions = self._select(questions, manifest["rows_per_database"])
        if database is not None and not self.questions:
            raise ValueError(f"no questions about database {database!r} in split {split!r}; use split=all")
        self._gold_rows_by_id: dict[int, tuple[tuple, ...]] = {}
        self.question: Question | None = None
        self.attempts: list[Attempt] = []

    def _select(self, questions: list[Question], rows_per_database: Mapping[str, int]) -> list[Question]:
        """The pinned question, else the split's (and database's) questions, without the trivial ones unless
        `include_empty`."""
        if self.task_id is not None:
            pinned = [q for q in questions if q.id == self.task_id]
            if not pinned:
                last = len(questions) - 1
                raise ValueError(f"unknown task {self.task_id!r}: {self.dataset} question ids run 0-{last}")
            return pinned
        return [
            q
            for q in questions
            if (self.include_empty or (q.gold_rows > 0 and rows_per_database[q.db] > 0))
            and self.split in ("all", self.split_of(q))
            and self.database in (None, q.db)
        ]

    def split_of(self, question: Question) -> str:
        return "test" if question.db in self.test_dbs else "train"

    def describe(self) -> str:
        tries = "one query" if self.turns == 1 else f"up to {self.turns} queries"
        return (
            "You answer questions about a SQLite database by writing SQL. You see the database schema and a "
            f"question; you may send {tries}. Each query runs read-only and you see its result (the first "
            f"{SHOWN_ROWS} rows) or its error. You succeed when your query returns exactly the rows of the correct "
            f"answer (in the same order when the question asks for an order); {COLUMN_RULES[self.metric]}, so select "
            f"only what is asked. {ANSWER_FORMAT}"
        )

    # ---- episode ---------------------------------------------------------------------------------------------------

    def instance_count(self) -> int:
        return len(self.questions)

    def reset(self, seed: int) -> Observation:
        self.question = self.questions[seed % len(self.questions)]
        return self.restart()

    def restart(self) -> Observation:
        if self.question is None:
            raise ValueError("restart() needs a question: call reset(seed) first")
        self.attempts = []
        return self._observation()

    @property
    def _current(self) -> Question:
        if self.question is None:
            raise ValueError("no question yet: call reset(seed) first")
        return self.question

    @property
    def db_path(self) -> Path:
        return self.data_dir / f"{self._current.db}.sqlite"

    @property
    def solved(self) -> bool:
        return any(a.solved for a in self.attempts)

    @property
    def done(self) -> bool:
        return self.solved or len(self.attempts) >= self.turns

    def legal_actions(self) -> tuple[str, ...]:
        return ()

    def parse_action(self, text: str, legal_actions: Sequence[str]) -> str | None:
        return parse_sql(text)

    def step(self, action: str) -> StepResult:
        """Run `action` as one SQL query and compare its rows with the gold query's."""
        self._check_running()
        result = run_query(self.db_path, action, self.timeout_ms)
        return self._record(Attempt(action, result, self.judge(action, result)))

    def judge(self, query: str, result: QueryResult) -> bool:
        """Whether `query`, whose run gave `result`, answers the current question, by the env's metric."""
        if self.metric == "exec":
            gold = self._current.gold
            return exec_match(self.db_path, gold, self._gold_rows(), result, query, self.timeout_ms)
        return result.ok and rows_match(result.rows, self._gold_rows(), self._current.ordered)

    def invalid_step(self, reply: str) -> StepResult:
        """A reply without a query uses up the turn and costs INVALID_PENALTY."""
        self._check_running()
        return self._record(Attempt(None, None, False))

    def _check_running(self) -> None:
        if self.done:
            raise ValueError("the episode is over; call reset(seed) or restart()")

    def _record(self, attempt: Attempt) -> StepResult:
        self.attempts.append(attempt)
        info = {"solved": attempt.solved, "error": attempt.result.error if attempt.result else "no query"}
        return StepResult(self._observation(), attempt.reward, self.done, info)

    def _gold_rows(self) -> tuple[tuple, ...]:
        """The gold query's rows (normalised as Spider's evaluator runs it under `metric=exec`), computed once per
        question. The gold SQL is the data set's own, so it runs in this process, through the same read-only
        connection and value conversion as the agent's queries get in the child (`sql_sandbox.execute`); the data
        build already ran every gold query this way."""
        question = self._current
        if question.id not in self._gold_rows_by_id:
            sql = normalise(question.gold) if self.metric == "exec" else question.gold
            gold = execute(str(self.db_path), sql, GOLD_TIMEOUT_MS)
            if "error" in gold:
                raise RuntimeError(f"gold query of {self.dataset} question {question.id} failed: {gold['error']}")
            self._gold_rows_by_id[question.id] = tuple(tuple(row) for row in gold["rows"])
        return self._gold_rows_by_id[question.id]

    def format_answer(self, actions: Sequence[str]) -> str:
        """The last query sent, in the ```sql block the agent answers with."""
        return f"```sql\n{actions[-1]}\n```" if actions else ""

    def rejudge(self, instance: dict[str, Any], action: str) -> bool:
        """The verdict on a recorded query, played alone on the recorded question (a one-turn attempt)."""
        matching = [q for q in self.questions if q.id == instance["question_id"]]
        if not matching:
            raise ValueError(f"question {instance['question_id']} is not among this environment's questions")
        self.question = matching[0]
        return self.judge(action, run_query(self.db_path, action, self.timeout_ms))

    def oracle_action(self, seed: int = 0) -> str:
        """The gold SQL of the current question."""
        return self._current.gold

    # ---- reporting -------------------------------------------------------------------------------------------------

    def score(self) -> float:
        """Total reward: 1 for the matching query, INVALID_PENALTY for each reply without one."""
        return sum(a.reward for a in self.attempts)

    def success(self) -> bool:
        return self.solved

    def task(self) -> str:
        question = self._current
        return f"SQL question on database {question.db}: {question.question}"

    def instance_stats(self) -> dict[str, Any]:
        question = self._current
        stats = {"db": question.db, "question_id": question.id, "split": self.split_of(question)}
        stats |= {"gold_rows": question.gold_rows, "ordered": question.ordered, "answer_key": answer_key(question)}
        if question.hardness:
            stats["hardness"] = question.hardness
        return stats

    def transcript(self) -> str:
        """The question, then each query tried (in the ```sql block the agent answers with, so that a memory that
        shows it does not teach another format) with its result or error, then the outcome. Never the gold SQL."""
        lines = [self.task()]
        for number, attempt in enumerate(self.attempts, 1):
            shown = f"```sql\n{attempt.query}\n```" if attempt.query else "(none found in the reply)"
            lines.append(f"Query {number}:\n{shown}")
            lines.append(attempt.feedback())
        outcome = "Correct." if self.solved else "Not solved." if self.done else "Unfinished."
        return "\n".join([*lines, outcome])

    def _observation(self) -> Observation:
        """Text: database, schema, question, then the last attempt's feedback and what to do next. `data`: db,
        question, attempt (queries sent), turns, solved."""
        question = self._current
        lines = [f"Database {question.db}:", compact_schema(self.db_path), "", f"Question: {question.question}"]
        if self.attempts:
            last = self.attempts[-1]
            lines += ["", f"Your query {len(self.attempts)}: {last.query or '(none)'}", last.feedback()]
            if self.solved:
                lines.append("Correct: this matches the expected answer.")
            elif self.done:
                lines.append("This is not the expected answer, and no attempts are left.")
            else:
                remaining = self.turns - len(self.attempts)
                lines.append(f"This is not the expected answer. {remaining} attempt(s) left. {ANSWER_FORMAT}")
        else:
            lines.append(ANSWER_FORMAT)
        data = {
            "db": question.db,
            "question": question.question,
            "attempt": len(self.attempts),
            "turns": self.turns,
            "solved": self.solved,
        }
        return Observation("\n".join(lines), (), data)
