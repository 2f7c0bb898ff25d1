"""LifelongAgentBench's db_bench: the benchmark's answer check and table hash by hand, the runner's reply parse and
chat, the shipped data and its ground truth per engine (pinned, and checked against the golds on real engines), the
oracle on both engines, and a task's life: an invalid reply, the round limit, a mutation judged by its table."""

from __future__ import annotations

import gc
import gzip
import hashlib
import time
import tracemalloc
from decimal import Decimal
from pathlib import Path

import pytest

from ttlearn.data.db_bench import DATA_FILE, in_split, load_tasks, read_data
from ttlearn.envs import make_env
from ttlearn.envs._db_bench_mariadb import MariaDBEngine
from ttlearn.envs._db_bench_prompts import INSTRUCTION, MEMORY_HEADING, OUTPUT_FORMAT, SYSTEM_PROMPT
from ttlearn.envs._db_bench_reply import read_reply
from ttlearn.envs._db_bench_sqlite import SQLiteEngine
from ttlearn.envs._db_bench_truth import GOLD_LIMITS, gold_truth
from ttlearn.envs._llb_verdict import answer_matches, server_answer, table_hash, tuple_spans
from ttlearn.players.basic import OraclePlayer
from ttlearn.rollout.loop import play_episode
from ttlearn.sandbox.statements import Refusal, StatementLimits

ENGINES = ("sqlite", "mariadb")


@pytest.fixture(params=ENGINES)
def engine(request):
    """Each engine; the MariaDB case starts (once) the session's own server."""
    if request.param == "mariadb":
        request.getfixturevalue("mariadb_server")
    return request.param


# ---- the benchmark's answer check, by hand -------------------------------------------------------------------------


def test_a_final_answer_is_read_as_tuples_in_order():
    expected = [("Alice", 30), ("Bob", 25)]
    assert answer_matches("[('Alice', 30), ('Bob', 25)]", expected)
    assert answer_matches('[("Alice", 30.0000001), ("Bob", 25)]', expected)  # quotes of either kind; 1e-6
    assert not answer_matches("[('Bob', 25), ('Alice', 30)]", expected)  # rows in order
    assert not answer_matches("[('Alice', 30)]", expected)
    assert not answer_matches("[('alice', 30), ('Bob', 25)]", expected)  # strings exactly
    assert not answer_matches("[('Alice', 30, 1), ('Bob', 25)]", expected)


def test_numbers_decimal_and_the_benchmarks_trimming_quirk():
    assert answer_matches("[(Decimal('73.0769'),)]", [(73.0769,)])
    assert answer_matches("[(Decimal('73.0769'), 5)]", [(73.0769, 5)])
    assert answer_matches("[(73.07690004,)]", [(73.0769,)])  # relative 5e-9
    assert not answer_matches("[(73.08,)]", [(73.0769,)])
    # the benchmark keeps one non-numeric character on each side when it trims, so a quoted number does not parse
    assert not answer_matches("[('55',)]", [(55,)])
    assert not answer_matches("[(55units,)]", [(55,)])  # "55u" is left
    assert answer_matches("[(55 units,)]", [(55,)])  # "55 " is left, and float() takes it


def test_one_bare_tuple_without_parentheses_matches_a_one_row_answer():
    assert answer_matches("42", [(42,)])
    assert answer_matches("'Paris', 3", [("Paris", 3)])
    assert not answer_matches("42", [(42,), (43,)])
    assert answer_matches("", [])
    assert not answer_matches("", [(1,)])


def test_parentheses_must_pair_and_decimal_opens_no_tuple():
    assert tuple_spans("[(1, 2), (3, 4)]") == [(1, 6), (9, 14)]
    assert tuple_spans("[(Decimal('1.5'), 2)]") == [(1, 19)]
    assert tuple_spans("[(1, 2)") == [(1, 6)]
    assert tuple_spans("[(1, 2") is None
    assert tuple_spans("1, 2)") is None
    assert tuple_spans("Decimal(Decimal(1))") is None
    assert tuple_spans("((1, 2)") == [(1, 6)]  # an open tuple restarts, as the benchmark scans


def test_the_server_answer_is_the_clients_list_of_tuples():
    assert server_answer([(1, "Alice", Decimal("2.50"))]) == "[(1, 'Alice', Decimal('2.50'))]"
    assert server_answer(None) == "[]"
    assert server_answer([("O'Brien",)]) == '[("O\'Brien",)]'


def test_the_table_hash_by_hand():
    rows = [(1, "a"), (2, None)]
    row_hashes = sorted(hashlib.md5(text.encode()).hexdigest()[:5] for text in ("1,a", "2"))  # NULL skipped
    assert table_hash(rows) == hashlib.md5(",".join(row_hashes).encode()).hexdigest()
    assert table_hash([]) == "None"
    many = [(i,) for i in range(300)]  # 300 × 6 - 1 characters: cut at MySQL 8's 1024
    joined = ",".join(sorted(hashlib.md5(str(i).encode()).hexdigest()[:5] for i in range(300)))
    assert table_hash(many) == hashlib.md5(joined[:1024].encode()).hexdigest()


def test_the_table_hash_is_mariadbs_own(mariadb_server):
    from ttlearn.sandbox.task_database import TaskDatabase

    rows = [(i, f"name {i}", None if i % 7 == 0 else i * 3) for i in range(250)]
    with TaskDatabase(mariadb_server, "t", [("id", "INT"), ("name", "TEXT"), ("n", "INT")], rows) as db:
        assert db.table_hash() == table_hash(rows)  # long enough for group_concat's cut


# ---- the runner's protocol -----------------------------------------------------------------------------------------


def test_replies_are_read_as_the_benchmark_reads_them():
    operation = read_reply("I will look.\nAction: Operation\n```sql\nSELECT *\nFROM t;\n```\ntrailing")
    assert operation is not None and operation.kind == "operation" and operation.statements == ("SELECT * FROM t",)
    two = read_reply("Action: Operation\n```sql\nDELETE FROM t WHERE a = 1; SELECT * FROM t;\n```")
    assert two is not None and two.statements == ("DELETE FROM t WHERE a = 1", "SELECT * FROM t")
    answer = read_reply("Done.\nAction: Answer\nFinal Answer: [(1, 'x')]\nmore text")
    assert answer is not None and answer.kind == "answer" and answer.answer == "[(1, 'x')]"
    assert read_reply("Action: Operation\nSELECT 1") is None  # no ```sql block
    assert read_reply("Action: Answer [(1,)]") is None  # no "\nFinal Answer:"
    assert read_reply("```sql\nSELECT 1\n```") is None  # no action line
    assert read_reply("Action: Operation ```sql SELECT 1```") is None  # the block needs its newlines


def test_the_chat_is_the_runners_with_the_memory_before_the_format_block():
    env = make_env("db_bench", split="dev")
    env.reset(0)
    plain, remembered = env.conversation(""), env.conversation("Task: count rows\nSCRIPT: use COUNT(*)")
    assert plain[0]["content"] == f"{SYSTEM_PROMPT}\n\n{OUTPUT_FORMAT}"
    assert remembered[0]["content"].startswith(f"{SYSTEM_PROMPT}\n\n{MEMORY_HEADING}\nTask: count rows")
    assert remembered[0]["content"].endswith(OUTPUT_FORMAT)
    assert [m["role"] for m in plain] == ["system", "user", "assistant", "user"]
    assert plain[1]["content"] == INSTRUCTION and plain[2]["content"] == "OK."
    task = env.current
    assert plain[3]["content"].startswith(task.instruction + "\nThe name of this table is " + task.table)
    env.step(f"Action: Operation\n```sql\nSELECT COUNT(*) FROM `{task.table}`\n```")
    after = env.conversation("")
    assert [m["role"] for m in after[-2:]] == ["assistant", "user"]
    assert after[-1]["content"] == f"[({len(task.rows)},)]"
    assert task.gold not in env.transcript()
    env.close()


# ---- the data ------------------------------------------------------------------------------------------------------


def test_the_shipped_data_holds_the_runners_split_and_is_small():
    assert DATA_FILE.stat().st_size < 1_000_000
    tasks = load_tasks()
    assert [t.id for t in tasks] == list(range(500))
    assert sum(t.split == "train" for t in tasks) == 361 and sum(t.split == "val" for t in tasks) == 139
    assert sum(t.kind == "select" for t in tasks) == 350
    assert {t.kind for t in tasks if t.answer_md5} == {"insert", "update", "delete"}
    dev = [t for t in tasks if in_split(t, "dev")]
    assert all(t.split == "train" for t in dev) and 0.2 < len(dev) / 361 < 0.3
    assert not {t.id for t in dev} & {t.id for t in tasks if in_split(t, "build")}
    assert "LifelongAgentBench" in DATA_FILE.with_name("db_bench.LICENSE.md").read_text()
    assert len(gzip.decompress(DATA_FILE.read_bytes())) > 1_000_000 and read_data()["tasks"]


def test_the_ground_truth_counts_per_engine_are_pinned():
    tasks = load_tasks()
    counts = {
        e: {s: sum(t.truth[e].source == s for t in tasks) for s in ("recorded", "engine", "none")} for e in ENGINES
    }
    assert counts == {
        "sqlite": {"recorded": 414, "engine": 81, "none": 5},
        "mariadb": {"recorded": 427, "engine": 67, "none": 6},
    }
    left_out = {e: sorted(t.id for t in tasks if t.truth[e].source == "none") for e in ENGINES}
    assert all(load_tasks()[i].gold.upper().startswith(("UPDATE", "DELETE")) for i in left_out["sqlite"])
    assert all(" AS " in load_tasks()[i].gold.upper() for i in left_out["mariadb"])  # DELETE FROM t AS alias
    assert make_env("db_bench", split="val").instance_count() == 139
    assert make_env("db_bench", engine="mariadb", split="val").instance_count() == 136


def _sample(engine: str) -> list:
    """Every task whose truth is not the recorded answer, and every 25th of the others."""
    return [t for t in load_tasks() if t.truth[engine].source != "recorded" or t.id % 25 == 0]


def test_the_shipped_truth_is_what_the_golds_give_on_sqlite():
    for task in _sample("sqlite"):
        assert gold_truth(task, SQLiteEngine(GOLD_LIMITS)) == task.truth["sqlite"], task.id


def test_the_shipped_truth_is_what_the_golds_give_on_mariadb(mariadb_server):
    for task in _sample("mariadb"):
        assert gold_truth(task, MariaDBEngine(GOLD_LIMITS, mariadb_server)) == task.truth["mariadb"], task.id


def test_mariadb_returns_tied_rows_in_one_order(mariadb_server):
    """Task 18's ORDER BY leaves two pairs tied; with temporary tables in memory their order changed between runs."""
    task = load_tasks()[18]
    assert gold_truth(task, MariaDBEngine(GOLD_LIMITS, mariadb_server), runs=6).source == "recorded"
    orders = set()
    for _ in range(6):
        table = MariaDBEngine(StatementLimits(), mariadb_server).open_table(task)
        orders.add(repr(table.execute([task.gold.rstrip(";")]).rows))
        table.close()
    assert len(orders) == 1


# ---- a task's life -------------------------------------------------------------------------------------------------


def test_the_oracle_solves_tasks_of_every_kind_on_both_engines(engine):
    env = make_env("db_bench", engine=engine)
    tasks = {t.id: t for t in env.tasks}
    chosen = [
        i
        for kind in ("select", "insert", "update", "delete")
        for source, count in (("recorded", 4), ("engine", 3))
        for i in [i for i, t in enumerate(env.tasks) if t.kind == kind and t.truth[engine].source == source][:count]
    ]
    assert {tasks[env.tasks[i].id].kind for i in chosen} == {"select", "insert", "update", "delete"}
    for index in chosen:
        episode = play_episode(env, OraclePlayer(), lambda _query: "", index=1, seed=index, act_seed=lambda s: s)
        assert episode.success, (engine, env.tasks[index].id, env.transcript())
        assert env.instance_stats()["skills"] == list(env.tasks[index].skills)
    env.close()


def _mutation_task(engine: str):
    env = make_env("db_bench", engine=engine, split="all")
    index = next(i for i, t in enumerate(env.tasks) if t.kind == "update")
    return env, index


def test_a_mutation_is_judged_by_its_table_even_after_an_unreadable_reply(engine):
    env, index = _mutation_task(engine)
    env.reset(index)
    env.step(env.oracle_action())
    done = env.invalid_step("I think that is it.")
    assert done.done and done.reward == 1.0 and env.success()
    env.reset(index)
    done = env.step("Action: Answer\nFinal Answer: I updated it")  # nothing changed: the hash says no
    assert done.done and not env.success()
    env.close()


def test_the_round_limit_ends_the_task(engine):
    env = make_env("db_bench", engine=engine, split="dev", max_round=3)
    env.reset(1)
    table = env.current.table
    results = [env.step(f"Action: Operation\n```sql\nSELECT COUNT(*) FROM `{table}`\n```") for _ in range(3)]
    assert [r.done for r in results] == [False, False, True] and results[-1].reward == 0.0
    with pytest.raises(ValueError, match="over"):
        env.step("Action: Answer\nFinal Answer: 1")
    env.close()


def test_a_repeated_operation_on_an_unchanged_table_ends_the_task_when_asked(engine):
    env = make_env("db_bench", engine=engine, split="all", stop_repeats=True)
    index = next(i for i, t in enumerate(env.tasks) if t.kind == "insert" and t.rows)
    env.reset(index)
    table = f"`{env.current.table}`"
    nothing = f"Action: Operation\n```sql\nDELETE FROM {table} WHERE 1 = 0\n```"
    copy = f"Action: Operation\n```sql\nINSERT INTO {table} SELECT * FROM {table} LIMIT 1\n```"
    assert not env.step(copy).done and not env.step(copy).done  # each run added a row: the table changed
    assert not env.step(nothing).done
    done = env.step(nothing)  # the same statement on the table it left as it was: it ends the task, unrun
    assert done.done and done.info["ended"] == "repeat" and not env.success() and len(env.history) == 4
    plain = make_env("db_bench", engine=engine, split="all")  # the runner's protocol: no such rule
    plain.reset(index)
    assert not plain.step(nothing).done and not plain.step(nothing).done
    env.close()
    plain.close()


def test_a_select_answer_is_judged_by_the_benchmarks_check(engine):
    env = make_env("db_bench", engine=engine, split="all")
    index = next(i for i, t in enumerate(env.tasks) if t.kind == "select" and t.truth[engine].source == "recorded")
    env.reset(index)
    gold = env.step(env.oracle_action())
    assert not gold.done and gold.observation.text.startswith("[(")
    assert env.step(f"Action: Answer\nFinal Answer: {gold.observation.text}").reward == 1.0
    env.reset(index)
    assert env.step("Action: Answer\nFinal Answer: [(0,)]").reward == 0.0
    env.close()


# ---- hostile SQL ---------------------------------------------------------------------------------------------------

PROBES = {
    "mariadb": [
        ("DROP TABLE {table}", Refusal.RIGHT),
        ("SELECT SLEEP(30)", Refusal.TIME),
        ("SET SESSION max_statement_time = 0; SELECT SLEEP(30)", Refusal.TIME),
        ("SELECT COUNT(*) FROM {table} a, {table} b, {table} c, {table} d, {table} e, {table} f", Refusal.TIME),
        ("SELECT a.* FROM {table} a, {table} b, {table} c", Refusal.ROWS),
        ("SELECT * FROM {other}.{other}", Refusal.RIGHT),
        ("SELECT * FROM mysql.user", Refusal.RIGHT),
        ("SELECT * FROM {table} INTO OUTFILE '/tmp/ttlearn-probe.txt'", Refusal.RIGHT),
        ("CREATE TABLE extra (a INT)", Refusal.RIGHT),
        ("GRANT ALL ON *.* TO CURRENT_USER", Refusal.RIGHT),
        ("SELECT REPEAT('x', 4000000) FROM {table} a, {table} b LIMIT 1000", Refusal.SIZE),
    ],
    "sqlite": [
        ("DROP TABLE {table}", Refusal.RIGHT),
        ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n", Refusal.TIME),
        ("SELECT a.* FROM {table} a, {table} b, {table} c", Refusal.ROWS),
        ("ATTACH DATABASE '/tmp/ttlearn-probe.sqlite' AS other", Refusal.RIGHT),
        ("CREATE TABLE extra (a INT)", Refusal.RIGHT),
        ("SELECT load_extension('/tmp/x')", Refusal.RIGHT),
        ("PRAGMA writable_schema = ON", Refusal.RIGHT),
        ("SELECT printf('%.*c', 900000, 'x') FROM {table} a, {table} b LIMIT 1000", Refusal.SIZE),
    ],
}
"""Each engine's escapes, with the cause both engines name the same way (`Refusal`)."""


def test_hostile_sql_is_an_invalid_step_with_its_reason_and_leaves_nothing_behind(engine):
    env = make_env("db_bench", engine=engine, split="all", timeout_ms=1000)
    index = next(i for i, t in enumerate(env.tasks) if t.kind == "select")
    other_task = next(t for t in env.tasks if t.table != env.tasks[index].table)
    env.reset(index)
    other = env.engine.open_table(other_task)  # another task's table on the same server
    before = env.table.table_hash()
    names = {"table": f"`{env.current.table}`" if engine == "mariadb" else env.current.table,
             "other": f"`{other_task.table}`"}  # fmt: skip
    for probe, reason in PROBES[engine]:
        result = env.step(f"Action: Operation\n```sql\n{probe.format(**names)}\n```")
        assert result.rejected == reason, (probe, result.rejected, result.observation.text)
        assert result.info["refused"] == reason and not result.done
        env.history.clear()  # stay under the round limit
    assert env.table.table_hash() == before
    other.close()
    if engine == "mariadb":
        env.close()
        assert env.engine.server is None  # the environment stopped the server it started
    else:
        folders = [env.table.folder, other.folder]
        env.close()
        assert not any(folder.exists() for folder in folders)


def _on_server(server, *statements: str) -> list[tuple]:
    """The last statement's rows, run as the server's administrator."""
    with server.connect() as admin, admin.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)
        return list(cursor.fetchall())


def _clean(server) -> bool:
    """Whether the server holds nothing a task left: no database, no task user, no prepared XA transaction."""
    databases = {name for (name,) in _on_server(server, "SHOW DATABASES")}
    users = _on_server(server, "SELECT user FROM mysql.user WHERE user LIKE 'task%'")
    return (
        databases == {"information_schema", "mysql", "performance_schema", "sys"}
        and not users
        and not (_on_server(server, "XA RECOVER"))
    )


def _on_session_server(server, **options):
    """A MariaDB environment whose tables open on the session's server instead of one of its own (a start saved)."""
    env = make_env("db_bench", engine="mariadb", **options)
    env.engine = MariaDBEngine(env.engine.limits, server)
    return env


def _update_task(env) -> int:
    return next(i for i, t in enumerate(env.tasks) if t.kind == "update" and t.rows)


def test_a_prepared_xa_transaction_ends_its_task_only(mariadb_server):
    """Issue 48: XA PREPARE outlives the session and held the table's locks, so the task's DROP DATABASE waited a
    day and the run died. Now the task's clean-up rolls it back: the task is judged, the next one runs."""
    env = _on_session_server(mariadb_server, split="all", timeout_ms=1000)
    index = _update_task(env)
    env.reset(index)
    table, column = f"`{env.current.table}`", f"`{env.current.columns[0][0]}`"
    hostile = f"XA START 'x1'; UPDATE {table} SET {column} = {column}; XA END 'x1'; XA PREPARE 'x1'"
    env.step(f"Action: Operation\n```sql\n{hostile}\n```")
    server = env.engine.server
    assert _on_server(server, "XA RECOVER")  # prepared, and outliving any session
    started = time.monotonic()
    assert env.step("Action: Answer\nFinal Answer: done").done
    assert time.monotonic() - started < 15 and _clean(server)
    env.reset(index)  # the next task starts clean, on the same table name
    assert env.step(env.oracle_action()).observation.text == "[]"
    assert env.invalid_step("done").reward == 1.0
    env.close()


def test_a_changed_password_ends_no_task_and_no_run(mariadb_server):
    """Issue 48: a reply set its user's password, then ran past the watchdog; the new session, with the stored
    password, raised 1045 outside the error handling and ended the run. Now the password is set again first."""
    env = _on_session_server(mariadb_server, split="all", timeout_ms=1000)
    env.reset(0)
    hostile = "SET PASSWORD = PASSWORD('mine'); SET SESSION max_statement_time = 0; SELECT SLEEP(10)"
    assert env.step(f"Action: Operation\n```sql\n{hostile}\n```").rejected == Refusal.TIME
    result = env.step(f"Action: Operation\n```sql\nSELECT COUNT(*) FROM `{env.current.table}`\n```")
    assert result.rejected is None and result.observation.text == f"[({len(env.current.rows)},)]"
    env.close()


def test_a_table_grown_past_what_can_be_read_fails_its_task_only(engine, request):
    """Issue 48: on SQLite an INSERT … SELECT of a cross join grew the table to 50,020 rows, whose hash then read
    past the 10,000-row cap and raised, ending the run. Now such a table fails its own task."""
    options = {"split": "all", "timeout_ms": 2000}
    if engine == "mariadb":
        env = _on_session_server(request.getfixturevalue("mariadb_server"), **options)
    else:
        env = make_env("db_bench", engine=engine, **options)
    index = next(i for i, t in enumerate(env.tasks) if t.kind == "insert" and len(t.rows) >= 12)
    env.reset(index)
    table = env.current.table if engine == "sqlite" else f"`{env.current.table}`"
    grow = f"INSERT INTO {table} SELECT a.* FROM {table} a, {table} b, {table} c, {table} d LIMIT 20000"
    env.step(f"Action: Operation\n```sql\n{grow}\n```")
    done = env.step("Action: Answer\nFinal Answer: done")
    assert done.done and done.reward == 0.0
    env.reset(index)  # and the run goes on
    env.step(env.oracle_action())
    assert env.invalid_step("done").reward == 1.0
    env.close()


def test_a_result_is_measured_as_it_streams(mariadb_server):
    """Issue 48: MariaDB results were fetched (1,001 rows of 4 MB each) before the 64,000-character cap applied,
    taking the process to 646 MB. Now the rows stream in one at a time and the session ends at the cap."""
    env = _on_session_server(mariadb_server, split="dev", timeout_ms=2000)
    env.reset(0)
    table = f"`{env.current.table}`"
    huge = f"SELECT REPEAT('x', 4000000), REPEAT('y', 4000000) FROM {table} a, {table} b LIMIT 1000"
    tracemalloc.start()
    try:
        result = env.step(f"Action: Operation\n```sql\n{huge}\n```")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.rejected == Refusal.SIZE and "64,000 characters" in result.observation.text
    assert peak < 40 * 2**20, peak  # two rows' worth of packets at most, not a thousand
    env.close()


def test_a_database_name_with_a_wildcard_grants_that_database_alone(mariadb_server):
    """Issue 48: in a database-level GRANT, `_` matches any character, so the user of `staff_schedules` could read
    and delete `staffXschedules`."""
    from ttlearn.sandbox.task_database import TaskDatabase

    _on_server(mariadb_server, "CREATE DATABASE staffXschedules", "CREATE TABLE staffXschedules.t (a INT)",
               "INSERT INTO staffXschedules.t VALUES (1)")  # fmt: skip
    try:
        with TaskDatabase(mariadb_server, "staff_schedules", [("a", "INT")], [(1,)]) as db:
            for statement in ("SELECT * FROM staffXschedules.t", "DELETE FROM staffXschedules.t"):
                assert db.execute([statement]).refused == Refusal.RIGHT, statement
            assert db.execute(["SELECT * FROM staff_schedules"]).rows == ((1,),)
        assert _on_server(mariadb_server, "SELECT * FROM staffXschedules.t") == [(1,)]
    finally:
        _on_server(mariadb_server, "DROP DATABASE staffXschedules")


def test_a_finished_task_leaves_no_database_and_no_user_on_the_server(mariadb_server):
    env = _on_session_server(mariadb_server, split="dev")
    env.reset(0)
    env.step("Action: Answer\nFinal Answer: []")
    assert env.engine.server is not None and _clean(env.engine.server)
    env.close()


def test_the_servers_lifetime_is_its_engines(mariadb_server):
    """No process-wide server: an engine given one leaves it running; one that started its own stops it when closed
    or collected."""
    task = load_tasks()[0]
    given = MariaDBEngine(StatementLimits(), mariadb_server)
    given.open_table(task).close()
    given.close()
    assert _on_server(mariadb_server, "SELECT 1") == [(1,)]
    own = MariaDBEngine(StatementLimits())
    own.open_table(task).close()
    folder = Path(own.server.socket).parent
    del own
    gc.collect()
    assert not folder.exists()


def test_a_table_the_shipped_rows_cannot_build_is_a_data_error(engine):
    from dataclasses import replace

    from ttlearn.errors import BenchmarkDataError

    task = load_tasks()[0]
    broken = replace(task, rows=((1,),))  # one value for a table of several columns
    env = make_env("db_bench", engine=engine)
    with pytest.raises(BenchmarkDataError, match=f"task {task.id} cannot be built"):
        env.engine.open_table(broken)
    env.close()


def test_a_killed_process_takes_its_server_with_it(mariadb_server, tmp_path):
    """A run killed with SIGKILL runs no clean-up: its server stops all the same (PR_SET_PDEATHSIG)."""
    import os
    import subprocess
    import sys

    program = (
        "import os\nfrom ttlearn.sandbox.mariadb import temporary_server\n"
        "with temporary_server() as server:\n    print(server.socket, flush=True)\n    os.kill(os.getpid(), 9)\n"
    )
    source = str(Path(__file__).parents[2] / "src")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": source})  # fmt: skip
    folder = Path(done.stdout.strip()).parent

    def running() -> bool:
        return str(folder) in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and running():
        time.sleep(0.2)
    assert not running()
    subprocess.run(["rm", "-rf", str(folder)], check=True)


def test_a_mariadb_that_cannot_start_ends_the_command_in_one_line(monkeypatch, tmp_path):
    """Issue 53: a MariaDB that failed to install or start ended `ttlearn run` in a RuntimeError traceback."""
    from typer.testing import CliRunner

    from ttlearn.cli import app

    monkeypatch.setattr("ttlearn.sandbox.mariadb.INSTALL_PROGRAM", "false")  # an install that fails, for real
    args = ["run", "db_bench", "-e", "engine=mariadb", "--llm", "scripted:oracle", "--units", "1"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "run")], env={"COLUMNS": "200"})
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]  # beside the progress bar
    assert result.exit_code == 2 and errors == ["error: MariaDB: false failed: no output"], result.output
    assert "Traceback" not in result.output
