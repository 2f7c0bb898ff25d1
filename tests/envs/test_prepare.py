"""Building question sets: the MySQL-to-SQLite conversion, the manifest check on load, and (with the package index
reachable) the real Spider preparation, which takes about 5 seconds."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ttlearn.cli import app
from ttlearn.data.prepare import (
    PrepareError,
    build_question_set,
    load_question_set,
    mysql_dump_to_sqlite,
    orders_rows,
    prepare_sql,
)

DUMP = r"""
CREATE DATABASE IF NOT EXISTS `zoo` /*!40100 DEFAULT CHARACTER SET utf8mb4 */;
USE `zoo`;
/*!40101 SET NAMES utf8 */;
DROP TABLE IF EXISTS `animal`;
CREATE TABLE `animal` (
  `id` int NOT NULL AUTO_INCREMENT,
  `name` varchar(20) COLLATE utf8mb4_general_ci DEFAULT NULL,
  `keeper` int DEFAULT NULL,
  PRIMARY KEY (`id`),
  UNIQUE KEY `animal_name` (`name`),
  KEY `animal_FK` (`keeper`),
  CONSTRAINT `animal_FK` FOREIGN KEY (`keeper`) REFERENCES `keeper` (`id`)
) ENGINE=InnoDB AUTO_INCREMENT=3 DEFAULT CHARSET=utf8mb4;
LOCK TABLES `animal` WRITE;
INSERT INTO `animal` VALUES (1,'O\'Toole the cat',7),(2,'Zed',NULL);
UNLOCK TABLES;
-- Dump completed
CREATE DATABASE IF NOT EXISTS `prizes`;
USE `prizes`;
CREATE TABLE `award` (`year` text NOT NULL, `who` text, PRIMARY KEY (`who`(20),`year`(4)));
INSERT INTO `award` VALUES ('2001','Zed');
"""


def test_mysql_dump_becomes_sqlite_statements_per_database():
    converted = mysql_dump_to_sqlite(DUMP)
    assert list(converted) == ["zoo", "prizes"]
    rows = {}
    for name, statements in converted.items():
        with sqlite3.connect(":memory:") as connection:
            for statement in statements:
                connection.execute(statement)
            table = "animal" if name == "zoo" else "award"
            rows[name] = connection.execute(f"SELECT * FROM {table}").fetchall()
            if name == "zoo":  # the collation is gone: text compares exactly, as in Spider's SQLite files
                assert connection.execute("SELECT count(*) FROM animal WHERE name = 'zed'").fetchone() == (0,)
    assert rows == {"zoo": [(1, "O'Toole the cat", 7), (2, "Zed", None)], "prizes": [("2001", "Zed")]}


def test_orders_rows_looks_at_the_outermost_query_only():
    assert orders_rows("SELECT name FROM t ORDER BY age DESC LIMIT 1")
    assert orders_rows("SELECT a FROM t UNION SELECT a FROM u ORDER BY a")
    assert not orders_rows("SELECT name FROM t WHERE age = (SELECT age FROM t ORDER BY age LIMIT 1)")
    assert not orders_rows("SELECT count(*) FROM t")


TINY = {"farm": ["CREATE TABLE cow (name TEXT, milk REAL)", "INSERT INTO cow VALUES ('Bella', 20.5), ('Daisy', 18)"]}


def test_built_set_records_gold_facts_and_a_checksum(tmp_path: Path):
    questions = [
        {"db": "farm", "question": "Best cow?", "gold": "SELECT name FROM cow ORDER BY milk DESC LIMIT 1"},
        {"db": "farm", "question": "Cows giving 100 l?", "gold": "SELECT name FROM cow WHERE milk > 100"},
    ]
    directory = build_question_set(tmp_path / "set", TINY, questions, {"data": "test"})
    manifest, loaded = load_question_set(directory)
    assert (manifest["databases"], manifest["questions"], manifest["empty_gold"]) == (1, 2, 1)
    assert manifest["rows_per_database"] == {"farm": 2}
    assert sorted(manifest["files"]) == ["farm.sqlite", "questions.jsonl"]
    assert [(q.id, q.ordered, q.gold_rows) for q in loaded] == [(0, True, 1), (1, False, 0)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]  # no staging folder left behind


def test_changed_data_is_refused_with_the_rebuild_command(tmp_path: Path):
    question = [{"db": "farm", "question": "How many cows?", "gold": "SELECT count(*) FROM cow"}]
    directory = build_question_set(tmp_path / "set", TINY, question, {"data": "test"})
    with (directory / "farm.sqlite").open("ab") as database:
        database.write(b"\0")
    with pytest.raises(ValueError, match=r"farm.sqlite does not match the checksum .*`ttlearn data prepare sql`"):
        load_question_set(directory)
    with pytest.raises(FileNotFoundError, match="run `ttlearn data prepare sql` first"):
        load_question_set(tmp_path / "nothing")


def test_a_failing_gold_query_stops_the_build(tmp_path: Path):
    question = [{"db": "farm", "question": "?", "gold": "SELECT horns FROM cow"}]
    with pytest.raises(PrepareError, match="gold query 0 on farm fails: .*no such column: horns"):
        build_question_set(tmp_path / "set", TINY, question, {"data": "test"})
    assert list(tmp_path.iterdir()) == []


def test_cli_refuses_an_unknown_family():
    result = CliRunner().invoke(app, ["data", "prepare", "chess"])
    assert result.exit_code == 2
    assert "no data to prepare for 'chess'; families: sql" in result.output


@pytest.mark.network
def test_prepare_sql_builds_spider_dev(tmp_path: Path):
    directory = prepare_sql(tmp_path / "spider")
    manifest, questions = load_question_set(directory)
    assert (manifest["databases"], manifest["questions"], len(questions)) == (20, 1034, 1034)
    assert len({q.db for q in questions}) == 20
    assert manifest["rows_per_database"]["wta_1"] == 0  # its tables are empty in the dump
    assert min(rows for db, rows in manifest["rows_per_database"].items() if db != "wta_1") > 0
