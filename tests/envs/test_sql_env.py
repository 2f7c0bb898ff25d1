"""The `sql` environment on the shipped mini set: gold answers pass, wrong ones fail with their result shown, and
model-written SQL can neither change a database nor run forever."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ttlearn.data.sql_mini import QUESTIONS
from ttlearn.envs.sql import SQLEnv, compact_schema, format_result, held_out_databases, parse_sql, rows_match
from ttlearn.sandbox.python import run_python
from ttlearn.sandbox.sqlite import QueryResult, run_query


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory):
    """A private cache for the whole module, so the mini set is generated here rather than found."""
    with pytest.MonkeyPatch.context() as patch:
        path = tmp_path_factory.mktemp("cache")
        patch.setenv("TTLEARN_CACHE", str(path))
        yield path


def mini(**options) -> SQLEnv:
    return SQLEnv(dataset="mini", **options)


def question_id(text: str) -> int:
    return next(i for i, q in enumerate(QUESTIONS) if q["question"] == text)


def test_oracle_solves_every_mini_question(cache):
    env = mini()
    assert env.instance_count() == len(QUESTIONS) == 32
    for index in range(env.instance_count()):
        env.reset(index)
        result = env.step(env.oracle_action(index))
        assert (result.reward, result.done, env.success()) == (1.0, True, True), env.instance_stats()


def test_wrong_query_fails_and_shows_its_result(cache):
    env = mini(task=question_id("How many students are there?"))
    env.reset(0)
    result = env.step("SELECT count(*) FROM courses")
    assert (result.reward, result.done, env.success(), env.score()) == (0.0, True, False, 0.0)
    assert "Result: 1 row\ncount(*)\n5" in result.observation.text
    assert "not the expected answer" in result.observation.text
    transcript = env.transcript()
    assert "Query 1:\n```sql\nSELECT count(*) FROM courses\n```" in transcript and "Not solved." in transcript
    assert env.oracle_action() not in transcript


def test_sql_error_is_shown(cache):
    env = mini(task=0)
    env.reset(0)
    result = env.step("SELECT nope FROM students")
    assert result.reward == 0.0
    assert "Error: OperationalError: no such column: nope" in result.observation.text


def test_order_counts_only_when_the_gold_query_orders(cache):
    ordered = mini(task=question_id("List the titles of the Math department's courses in alphabetical order."))
    ordered.reset(0)
    assert ordered.step("SELECT title FROM courses WHERE department = 'Math' ORDER BY title DESC").reward == 0.0
    unordered = mini(task=question_id("List the names of the students from Oslo."))
    unordered.reset(0)
    assert unordered.step("SELECT name FROM students WHERE city = 'Oslo' ORDER BY name DESC").reward == 1.0


WRITES = [
    "INSERT INTO students VALUES (9, 'Mallory', 1, 'Oslo')",
    "UPDATE students SET name = 'Mallory'",
    "DELETE FROM enrollments",
    "DROP TABLE students",
    "CREATE TABLE evil (a)",
    "PRAGMA user_version = 7",
    "PRAGMA query_only = OFF",
    "SELECT 1; DROP TABLE students",
    "BEGIN",
]


def test_writes_are_refused_and_the_database_is_unchanged(cache, tmp_path: Path):
    outside = [f"ATTACH '{tmp_path / 'attached.db'}' AS other", f"VACUUM INTO '{tmp_path / 'copy.db'}'"]
    env = mini(task=0, turns=len(WRITES) + len(outside))
    env.reset(0)
    before = hashlib.sha256(env.db_path.read_bytes()).hexdigest()
    listing = sorted(p.name for p in env.db_path.parent.iterdir())
    for query in WRITES + outside:
        result = env.step(query)
        assert result.reward == 0.0 and result.info["error"], query
    assert "refused: only read-only queries run here" in env.transcript()
    assert hashlib.sha256(env.db_path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in env.db_path.parent.iterdir()) == listing
    assert list(tmp_path.iterdir()) == []


def test_runaway_query_times_out(cache):
    env = mini(task=0, timeout_ms=300)
    env.reset(0)
    start = time.monotonic()
    result = env.step("WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT count(*) FROM n")
    assert time.monotonic() - start < 10
    assert result.info["error"] == "timed out after 300 ms"
    assert "Error: timed out after 300 ms" in result.observation.text


COUNT_TO = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n LIMIT {})"


@pytest.mark.parametrize(
    "query, error",
    [
        (COUNT_TO.format(10_001) + " SELECT x FROM n", "more than 10,000 rows"),
        (COUNT_TO.format(3_000) + " SELECT hex(randomblob(2000)) FROM n", "longer than 8,000,000 characters"),
    ],
)
def test_oversized_results_are_refused(cache, query: str, error: str):
    env = mini(task=0)
    env.reset(0)
    assert error in run_query(env.db_path, query, timeout_ms=2000).error


def test_unparseable_reply_passes_the_turn_with_a_penalty(cache):
    env = mini(task=0, turns=2)
    env.reset(0)
    assert env.parse_action("I am not sure.", ()) is None
    passed = env.invalid_step("I am not sure.")
    assert (passed.reward, passed.done) == (-0.1, False)
    assert "No SQL query found" in passed.observation.text and "1 attempt(s) left" in passed.observation.text
    assert env.step(env.oracle_action()).reward == 1.0
    assert env.score() == pytest.approx(0.9)
    with pytest.raises(ValueError, match="episode is over"):
        env.step("SELECT 1")


def test_restart_replays_the_question_from_scratch(cache):
    env = mini(turns=2)
    first = env.reset(4)
    env.step("SELECT 1")
    assert env.restart().text == first.text
    assert env.attempts == [] and env.instance_stats()["question_id"] == 4


def test_pinned_and_unknown_tasks(cache):
    env = mini(task=7)
    assert env.instance_count() == 1
    env.reset(123)
    assert env.instance_stats()["question_id"] == 7
    with pytest.raises(ValueError, match="unknown task 999: mini question ids run 0-31"):
        mini(task=999)
    with pytest.raises(ValueError, match="dataset must be one of spider, mini"):
        SQLEnv(dataset="bird")


def test_missing_spider_data_names_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TTLEARN_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="run `ttlearn data prepare sql` first"):
        SQLEnv(dataset="spider")


def test_splits_are_by_database_and_cover_everything(cache):
    train, test, everything = mini(split="train"), mini(split="test"), mini()
    assert {q.db for q in test.questions} == {"shop"}
    assert {q.db for q in train.questions} == {"school", "library"}
    assert train.instance_count() + test.instance_count() == everything.instance_count()
    train.reset(0)
    assert train.instance_stats()["split"] == "train"


def test_database_option_keeps_one_database_within_the_split(cache):
    shop = mini(database="shop")
    assert {q.db for q in shop.questions} == {"shop"}
    assert shop.instance_count() == mini(split="test").instance_count()
    with pytest.raises(ValueError, match="no questions about database 'shop' in split 'train'"):
        mini(split="train", database="shop")
    with pytest.raises(ValueError, match="unknown database 'shops' in mini; one of: library, school, shop"):
        mini(database="shops")


def test_held_out_databases_take_hash_order_until_the_share_is_reached():
    # SHA-256 order of the names: d (18ac…), c (2e7d…), b (3e23…), a (ca97…)
    assert held_out_databases({"a": 10, "b": 30, "c": 20, "d": 40}) == {"d"}
    assert held_out_databases({"a": 50, "b": 10, "c": 15, "d": 10}) == {"d", "c", "b"}


def test_observation_shows_schema_and_question_never_the_gold(cache):
    env = mini(task=question_id("What is the total revenue of all orders (price times quantity)?"))
    text = env.reset(0).text
    assert "CREATE TABLE products (product_id INTEGER PRIMARY KEY, name TEXT, category TEXT, price REAL);" in text
    assert "Question: What is the total revenue of all orders (price times quantity)?" in text
    assert "```sql" in text and env.oracle_action() not in text
    assert env.legal_actions() == ()


def test_compact_schema_lists_keys(cache):
    env = mini(task=0)
    env.reset(0)
    assert compact_schema(env.db_path).splitlines()[-1] == (
        "CREATE TABLE enrollments (student_id INTEGER, course_id INTEGER, grade INTEGER, "
        "PRIMARY KEY (student_id, course_id), FOREIGN KEY (course_id) REFERENCES courses(course_id), "
        "FOREIGN KEY (student_id) REFERENCES students(student_id));"
    )


@pytest.mark.parametrize(
    "reply, query",
    [
        ("Here:\n```sql\nSELECT a FROM t;\n```\nDone.", "SELECT a FROM t"),
        ("```SQLite\nselect 1\n```", "select 1"),
        ("```sql SELECT count(*) FROM singer ```", "SELECT count(*) FROM singer"),
        ("```sql\nSELECT 1\n```\n```sql\nSELECT 2\n```", "SELECT 1"),
        ("The answer is\nSELECT name\nFROM singer\nWHERE age > 3; -- done", "SELECT name\nFROM singer\nWHERE age > 3"),
        ("```\nWITH x AS (SELECT 1) SELECT * FROM x\n```", "WITH x AS (SELECT 1) SELECT * FROM x"),
        ("select count(*) from t\n\nThis counts rows.", "select count(*) from t"),
        ("I would select the names.", None),
        ("```sql\n\n```", None),
    ],
)
def test_parse_sql_rule(reply: str, query: str | None):
    assert parse_sql(reply) == query


def test_rows_match_as_multiset_or_ordered_list():
    assert rows_match([(1,), (2,)], [(2,), (1,)], ordered=False)
    assert not rows_match([(1,), (2,)], [(2,), (1,)], ordered=True)
    assert not rows_match([(1,), (1,)], [(1,)], ordered=False)  # duplicates count
    assert rows_match([(1.0, "a")], [(1, "a")], ordered=True)
    assert not rows_match([("A",)], [("a",)], ordered=False)


def test_format_result_shows_the_first_rows_and_the_count():
    rows = tuple((i, None if i == 0 else f"n{i}") for i in range(12))
    text = format_result(QueryResult(("id", "name"), rows))
    assert text.splitlines()[:3] == ["Result: 12 rows (first 10 shown)", "id | name", "0 | NULL"]
    assert len(text.splitlines()) == 12
    assert format_result(QueryResult(error="boom")) == "Error: boom"


@pytest.mark.parametrize(
    "query, error",
    [
        ("SELECT length(randomblob(1e9))", "DataError: string or blob too big"),
        ("SELECT length(zeroblob(2000000000))", "DataError: string or blob too big"),
        ("SELECT '\ud800'", "the query is not valid UTF-8 text: surrogates not allowed at character 8"),
        ("SELECT fts3_tokenizer('simple', x'0000000000000000')", "refused: the function fts3_tokenizer() is not"),
        ("SELECT load_extension('/tmp/x')", "refused: the function load_extension() is not available here"),
    ],
)
def test_one_huge_call_bad_text_and_unneeded_functions_are_reported_as_what_they_are(cache, query, error):
    env = mini(task=0)
    env.reset(0)
    start = time.monotonic()
    result = run_query(env.db_path, query, timeout_ms=2000)
    assert result.error.startswith(error) and time.monotonic() - start < 2


GOLD_HACK = """
import os
for folder, _, names in os.walk(TOP):
    print(sorted(n for n in names if n.endswith(".sqlite")))
    if "questions.jsonl" in names:
        print(open(os.path.join(folder, "questions.jsonl")).readline())
"""


def test_the_gold_queries_of_the_cache_cannot_be_read_from_the_sandbox(monkeypatch):
    """The sandbox once read any world-readable file: the cache's questions.jsonl (every gold query) and the other
    databases were one `open` away from the child that runs a query. It now reads only its directory (the one
    database it is given) and the standard library; a gold query smuggled through ATTACH earns nothing either, and
    the oracle still passes."""
    shared = Path(tempfile.mkdtemp(dir="/tmp", prefix="leak-"))
    try:
        monkeypatch.setenv("TTLEARN_CACHE", str(shared))
        env = mini()
        env.reset(0)
        for folder, _, names in os.walk(shared):  # readable by every user, as a shared cache would be
            os.chmod(folder, 0o755)
            for name in names:
                os.chmod(os.path.join(folder, name), 0o644)
        (questions,) = shared.rglob("questions.jsonl")
        program = f"TOP = {str(shared)!r}\n" + GOLD_HACK
        outside = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
        assert '"gold": "SELECT' in outside.stdout and "school.sqlite" in outside.stdout  # the hack itself works
        hack = run_python(program)
        assert "SELECT" not in hack.output and ".sqlite" not in hack.output, hack.output
        attached = env.step(f"ATTACH DATABASE '{questions}' AS gold; SELECT * FROM gold.sqlite_master")
        assert attached.reward < 1.0 and not env.success()
        env.reset(0)
        assert env.step(env.oracle_action(0)).reward == 1.0
    finally:
        shutil.rmtree(shared)
