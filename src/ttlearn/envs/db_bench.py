"""LifelongAgentBench's `db_bench` (Zheng et al., 2025) as MemRL's LLB runner plays it: one table, one instruction,
SQL statements against a real database, and the benchmark's own verdict.

The protocol (MemTensor/MemRL at 7c3beba: `memrl/run/llb_rl_runner.py`, `memrl/lifelongbench_eval/prompts.py`, and
the benchmark's `src/tasks/instance/db_bench/task.py`). The agent gets the runner's system prompt (the memory's text,
when there is one, under "[Retrieved Memory Context]" before its closing format block), the benchmark's instruction
turn answered by "OK.", then the question (the instruction, the table's name and its headers). Each reply is an
"Action: Operation" with one SQL block, which runs and whose answer the agent sees as the server's client writes it
(`[(1, 'Alice')]`, `[]`, or the error), or an "Action: Answer" with "Final Answer: …", which ends the task. A reply
with neither ends it too (the benchmark's "validation failed"), and so does the round limit (15: the runner's
`max_steps`). The verdict is the benchmark's: a SELECT task's final answer against the expected rows
(`_llb_verdict.answer_matches`), an INSERT / UPDATE / DELETE task's table hash after the agent's statements against
the expected hash, whatever its final answer says.

Engines: `sqlite` (the default; every reply's statements run in a sandboxed child, `sandbox.sqlite.run_statements`)
and `mariadb` (the faithful one: a real MySQL-compatible server of our own, `sandbox.mariadb`, each task in a fresh
database with a user of its own). Each engine judges by its own ground truth (`data.db_bench`: the recorded answer
where the gold reproduces it there, else the gold's result there; a task whose gold does not run there is left out).
A statement the sandbox refuses (a right the task lacks, the time limit, a result over the row or size cap) is an
invalid step whose reason the agent sees as the server's answer.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from ttlearn.data.db_bench import ENGINES, Task, Truth, load_tasks
from ttlearn.envs._llb_verdict import answer_matches, server_answer, table_hash
from ttlearn.envs.base import Env
from ttlearn.sandbox.mariadb import Outcome, Server, TaskDatabase, temporary_server
from ttlearn.sandbox.sqlite import run_query, run_statements
from ttlearn.types import Observation, StepResult

SPLITS = ("train", "val", "all", "dev", "build")
"""The runner's `train` (361 tasks) and `val` (139), or both; `dev` and `build` cut `train` in two for development
(`dev`: the quarter of its tasks whose id hashes lowest, `build`: the rest), so that no choice needs `val`."""
DEV_SHARE = 0.25
MAX_ROUND = 15
"""The runner's round limit: `experiment.max_steps` (configs/rl_llb_config.yaml:115), passed as the task's
`max_round` (memrl/run/llb_rl_runner.py:698-706)."""

SYSTEM_PROMPT = """You are an execution-focused AI agent solving database and operating-system tasks.

You may receive a [Retrieved Memory Context] block with past experiences from similar problems.
These are **references for learning**, not guaranteed solutions:
- [MEMORY TYPE] SUCCESS_PROCEDURE: A successful approach from a similar task—learn the pattern.
- [MEMORY TYPE] FAILURE_REFLECTION: A failed attempt with lessons—avoid similar mistakes.

Use the memories as inspiration, but always analyze your current task independently and
adapt your approach based on its specific requirements."""
"""The runner's system prompt (memrl/lifelongbench_eval/prompts.py:10-20)."""
OUTPUT_FORMAT = """STRICT OUTPUT FORMAT (LLB-DB, do not violate):
1) After your reasoning, include exactly ONE action line:
   - Action: Operation
   - Action: Answer
2) If Action: Operation, put exactly ONE SQL statement in the FIRST fenced code block using ```sql, on a single line. Do not add any extra text after that block.
3) If Action: Answer, include `Final Answer: ...` on the next line and do not add extra text after that."""  # noqa: E501
"""The runner's closing format block for database tasks (prompts.py:23-30), always the system prompt's last part."""
MEMORY_HEADING = "[Retrieved Memory Context]"
"""The heading the runner puts over retrieved memories (memrl/lifelongbench_eval/memory_context.py:40)."""
INSTRUCTION = """I will ask you a question, then you should help me operate a MySQL database with SQL to answer the question.
You have to explain the problem and your solution to me and write down your thoughts.
After thinking and explaining thoroughly, every round you can choose one of the two actions: Operation or Answer.

To do operation, the format should be like this:
Action: Operation
```sql
SELECT * FROM table WHERE condition;
```
You MUST put SQL in markdown format without any other comments. Your SQL should be in one line.
I will use "Action: Operation" literally to match your SQL.
Every time you can only execute one SQL statement. I will only execute the statement in the first SQL code block. Every time you write a SQL, I will execute it for you and give you the output.
If the SQL is not executed successfully, the response will be the error message.
Otherwise, the response will be the raw MySQL response.
For SELECT queries, the response will be the result of the query, such as [(1, 'John Doe', 'HR'), (2, 'Jane Smith', 'IT'), ...], where each tuple represents a row and the elements are the values of the columns in the row.
For SQL such as INSERT, UPDATE, and DELETE, the response will be an empty list [] indicating that the SQL was executed successfully.

If you have obtain the answer by interacting with the database, and you MUST commit your final answer using the format like this:
Action: Answer
Final Answer: [(1, 'John Doe', 'HR'), (2, 'Jane Smith', 'IT'), ...]
DO NOT write this pattern unless you are sure about your answer. I expect an accurate and correct answer.
Your answer should be accurate. Your answer must be exactly the same as the correct answer.
If the question is about modifying the database, then after done operation, your answer field can be anything.
If the question is about querying the database, then after done operation, your answer field should be the result of the query.
We note that the column names will not be displayed in the result, and you need to ensure both the orders of the columns and rows are correct.
If your response cannot match any pattern I mentioned earlier, you will be judged as FAIL immediately.
Once you commit your answer or the number of rounds reaches 3, the task will be finished and the system will judge whether you pass the task or not.

Now, I will give you the question that you need to solve."""  # noqa: E501
"""The benchmark's instruction turn for db_bench (src/factories/chat_history_item/offline/task_requirement.py:7-33)
with the suffix the runner's standard prompts add (memrl/lifelongbench_eval/task_wrappers.py:66-69); the agent's
answer to it is "OK." (construct.py:19). Its "3 rounds" is the benchmark's text; the runner allows `MAX_ROUND`."""

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
    """The benchmark's parse of a reply (`DBBench._parse_agent_response`): the first "Action: Operation" or "Action:
    Answer"; an operation takes the first ```sql block, an answer the rest of the line after "\\nFinal Answer:". None:
    the reply matches neither, which ends the task."""
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


def in_split(task: Task, split: str) -> bool:
    """Whether `task` belongs to `split` (`SPLITS`)."""
    if split == "all":
        return True
    if split in ("train", "val"):
        return task.split == split
    return task.split == "train" and (dev_score(task.id) < DEV_SHARE) == (split == "dev")


def dev_score(task_id: int) -> float:
    """A task's place in [0, 1) by the SHA-256 of its id: the lowest `DEV_SHARE` of `train` is `dev`."""
    return int(hashlib.sha256(f"db_bench:{task_id}".encode()).hexdigest()[:12], 16) / 16**12


# ---- engines ---------------------------------------------------------------------------------------------------


class SQLiteTable:
    """A task's table in a SQLite file of its own (readable by the sandbox's user); every reply's statements run in a
    sandboxed child on a copy, which sends the changed file back (`run_statements`)."""

    def __init__(self, task: Task, timeout_ms: int, max_rows: int, max_bytes: int) -> None:
        self.task, self.timeout_ms, self.max_rows, self.max_bytes = task, timeout_ms, max_rows, max_bytes
        self.folder = Path(tempfile.mkdtemp(prefix="ttlearn-db-bench-"))
        self.folder.chmod(0o755)
        self.path = self.folder / "task.sqlite"
        names = ", ".join(_sqlite_name(name) for name, _ in task.columns)
        declared = ", ".join(f"{_sqlite_name(name)} {kind}" for name, kind in task.columns)
        marks = ", ".join("?" * len(task.columns))
        with closing(sqlite3.connect(self.path)) as connection, connection:
            connection.execute(f"CREATE TABLE {_sqlite_name(task.table)} ({declared})")
            # every value as a quoted string, as the benchmark inserts them (the column's affinity converts)
            rows = [tuple(None if v is None else str(v) for v in row) for row in task.rows]
            connection.executemany(f"INSERT INTO {_sqlite_name(task.table)} ({names}) VALUES ({marks})", rows)
        self.path.chmod(0o644)

    def execute(self, statements: Sequence[str]) -> Outcome:
        result, changed = run_statements(self.path, list(statements), self.timeout_ms, self.max_rows)
        if changed is not None:
            self.path.write_bytes(changed)
        touched = changed is not None
        if not result.ok:
            return Outcome(error=result.error, refused=result.error if result.refused else None, changed=touched)
        if len(server_answer(result.rows)) > self.max_bytes:
            limit = f"the result is longer than {self.max_bytes:,} characters"
            return Outcome(error=limit, refused=limit, changed=touched)
        return Outcome(rows=result.rows if result.columns else None, changed=touched)

    def table_hash(self) -> str:
        result = run_query(self.path, f"SELECT * FROM {_sqlite_name(self.task.table)}", self.timeout_ms)
        if not result.ok:
            raise RuntimeError(f"the table of db_bench task {self.task.id} cannot be read: {result.error}")
        return table_hash(result.rows)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _sqlite_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class _SharedServer:
    """One MariaDB server per process, started by the first environment that needs it and stopped when the last one
    closes (a run's memory arm, control arm and held-out tasks share it; every task has its own database)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.context: Any = None
        self.server: Server | None = None

    def acquire(self) -> Server:
        with self.lock:
            if self.server is None:
                self.context = temporary_server()
                self.server = self.context.__enter__()
            self.users += 1
            return self.server

    def release(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users == 0 and self.context is not None:
                context, self.context, self.server = self.context, None, None
                context.__exit__(None, None, None)


SHARED_SERVER = _SharedServer()


def open_table(task: Task, engine: str, server: Server | None, timeout_ms: int, max_rows: int, max_bytes: int):
    """The task's table on `engine`, ready for statements: a `SQLiteTable`, or a `TaskDatabase` on `server` (named
    after the table, as the benchmark names it, unless a task playing beside it holds that name)."""
    if engine == "sqlite":
        return SQLiteTable(task, timeout_ms, max_rows, max_bytes)
    assert server is not None
    options = {"timeout_ms": timeout_ms, "max_rows": max_rows, "max_bytes": max_bytes}
    import pymysql

    try:
        return TaskDatabase(server, task.table, task.columns, task.rows, **options)
    except pymysql.err.ProgrammingError as exc:
        if exc.args[0] != 1007:  # the database exists: a task of the same table plays beside this one
            raise
        name = f"{task.table}_{secrets.token_hex(3)}"
        return TaskDatabase(server, task.table, task.columns, task.rows, database=name, **options)


def gold_truth(task: Task, engine: str, server: Server | None = None, runs: int = 1) -> Truth:
    """What `task` is judged against on `engine`: the recorded answer when the gold SQL, run there as the agent's SQL
    runs, reproduces it (its result as the server writes it passes the benchmark's check against the recorded rows,
    in one of `runs` runs of a SELECT; or the table's hash equals the recorded one); else the gold's own result
    there, when every run gave the same; else nothing, and the task is left out: the gold does not run there, or the
    order of the rows its ORDER BY leaves tied changes from run to run (MariaDB sorts ties in no fixed order)."""
    table = open_table(task, engine, server, timeout_ms=10_000, max_rows=100_000, max_bytes=10**7)
    try:
        action = read_reply(f"Action: Operation\n```sql\n{task.gold}\n```")
        assert action is not None
        outcomes = [table.execute(action.statements) for _ in range(runs if task.answer_md5 is None else 1)]
        failed = [o.error for o in outcomes if o.error is not None]
        if failed:
            return Truth("none", why=f"the gold SQL fails on {engine}: {failed[0]}")
        if task.answer_md5 is not None:
            digest = table.table_hash()
            return Truth("recorded") if digest == task.answer_md5 else Truth("engine", md5=digest)
    finally:
        table.close()
    assert task.answer_rows is not None
    if any(answer_matches(server_answer(o.rows), task.answer_rows) for o in outcomes):
        return Truth("recorded")
    if len({repr(o.rows) for o in outcomes}) > 1:
        return Truth("none", why=f"the gold's tied rows come back in another order from run to run on {engine}")
    rows = tuple(tuple(_plain(v) for v in row) for row in outcomes[0].rows or ())
    if any(not isinstance(v, (int, float, str)) for row in rows for v in row):
        return Truth("none", why=f"the gold's result on {engine} holds a value the answer check cannot read")
    return Truth("engine", rows=rows)


def _plain(value: Any) -> Any:
    """A server value as the answer check reads an expected one: DECIMAL as float."""
    return float(value) if isinstance(value, Decimal) else value


# ---- the environment -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One reply and what the server answered (None: the reply ended the task); for an operation, its statements
    and whether they changed a row."""

    reply: str
    answer: str | None
    refused: str | None = None
    statements: tuple[str, ...] = ()
    changed: bool = False


class DBBench(Env):
    """LifelongAgentBench's `db_bench` (see the module docstring). Options: `engine` (sqlite | mariadb), `split`
    (train | val | all, the runner's; dev | build: development halves of train), `task` (pin one task id, 0-499),
    `max_round` (the runner's 15), `reply_tokens` (the most one reply may hold), `timeout_ms` (per reply's
    statements), `max_rows` / `max_bytes` (the most a result may hold before it is refused), `stop_repeats` (end
    the task at a reply that repeats the previous operation on a table it left unchanged, judged as at the round
    limit: a cost control, off in the runner), `seed`."""

    default_player = "qwen-coder"
    reply_tokens = 512

    def __init__(
        self,
        engine: str = "sqlite",
        split: str = "all",
        task: int | None = None,
        max_round: int = MAX_ROUND,
        reply_tokens: int = 512,
        timeout_ms: int = 2000,
        max_rows: int = 1000,
        max_bytes: int = 64_000,
        stop_repeats: bool = False,
        seed: int = 0,
    ) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        for name, value in (("max_round", max_round), ("reply_tokens", reply_tokens), ("timeout_ms", timeout_ms),
                            ("max_rows", max_rows), ("max_bytes", max_bytes)):  # fmt: skip
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if not isinstance(stop_repeats, bool):
            raise ValueError(f"stop_repeats must be true or false, got {stop_repeats!r}")
        self.engine, self.split, self.task_id, self.max_round = engine, split, task, max_round
        self.reply_tokens, self.timeout_ms, self.max_rows, self.max_bytes = reply_tokens, timeout_ms, max_rows, max_bytes
        self.stop_repeats, self.seed = stop_repeats, seed
        self.deterministic = engine == "sqlite"
        """MariaDB returns rows an ORDER BY leaves tied in no fixed order, so an agent's query may see them in another
        order from run to run (the golds whose ties did are left out there); SQLite answers the same every time."""
        tasks = load_tasks()
        if task is not None:
            pinned = [t for t in tasks if t.id == task]
            if not pinned:
                raise ValueError(f"unknown task {task!r}: db_bench task ids run 0-{len(tasks) - 1}")
            if pinned[0].truth[engine].source == "none":
                raise ValueError(f"task {task} is left out on {engine}: {pinned[0].truth[engine].why}")
            self.tasks = pinned
        else:
            self.tasks = [t for t in tasks if in_split(t, split) and t.truth[engine].source != "none"]
        self.current: Task | None = None
        self.table: Any = None
        self.history: list[Turn] = []
        self.verdict: bool | None = None
        self._server: Server | None = None

    def config(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "split": self.split,
            "task": self.task_id,
            "max_round": self.max_round,
            "reply_tokens": self.reply_tokens,
            "timeout_ms": self.timeout_ms,
            "max_rows": self.max_rows,
            "max_bytes": self.max_bytes,
            "stop_repeats": self.stop_repeats,
            "seed": self.seed,
        }

    def describe(self) -> str:
        return f"{SYSTEM_PROMPT}\n\n{OUTPUT_FORMAT}"

    def conversation(self, memory: str) -> list[dict[str, str]]:
        """The chat as the runner sends it: its system prompt (the memory under its heading before the format block),
        the benchmark's instruction and "OK.", the question, then each reply and the server's answer."""
        system = SYSTEM_PROMPT
        if memory.strip():
            system += f"\n\n{MEMORY_HEADING}\n{memory.strip()}"
        messages = [
            {"role": "system", "content": f"{system}\n\n{OUTPUT_FORMAT}"},
            {"role": "user", "content": INSTRUCTION},
            {"role": "assistant", "content": "OK."},
            {"role": "user", "content": self.question()},
        ]
        for turn in self.history:
            messages.append({"role": "assistant", "content": turn.reply})
            if turn.answer is not None:
                messages.append({"role": "user", "content": turn.answer})
        return messages

    # ---- episode ---------------------------------------------------------------------------------------------------

    def instance_count(self) -> int:
        return len(self.tasks)

    def reset(self, seed: int) -> Observation:
        self.current = self.tasks[seed % len(self.tasks)]
        return self.restart()

    def restart(self) -> Observation:
        task = self._task
        self._close_table()
        if self.engine == "mariadb" and self._server is None:
            self._server = SHARED_SERVER.acquire()
        self.table = open_table(task, self.engine, self._server, self.timeout_ms, self.max_rows, self.max_bytes)
        self.history, self.verdict = [], None
        return self._observation()

    @property
    def _task(self) -> Task:
        if self.current is None:
            raise ValueError("no task yet: call reset(seed) first")
        return self.current

    def question(self) -> str:
        """The question turn: the instruction, then the table's name and headers (`DBBench._construct_dataset_item`)."""
        task = self._task
        headers = ", ".join(name for name, _ in task.columns)
        return f"{task.instruction}\nThe name of this table is {task.table}, and the headers of this table are {headers}."

    @property
    def done(self) -> bool:
        return self.verdict is not None

    def legal_actions(self) -> tuple[str, ...]:
        return ()

    def parse_action(self, text: str, legal_actions: Sequence[str]) -> str | None:
        """The whole reply, when the benchmark can read an action in it (`read_reply`); None ends the task."""
        return text if read_reply(text) is not None else None

    def step(self, action: str) -> StepResult:
        """Run the reply's operation (its answer becomes the next turn) or judge its final answer."""
        if self.done:
            raise ValueError("the task is over; call reset(seed) or restart()")
        parsed = read_reply(action)
        if parsed is None:
            raise ValueError("the reply holds no action the benchmark reads: pass it to invalid_step")
        if parsed.kind == "answer":
            self.history.append(Turn(action, None))
            return self._finish(parsed.answer, "answer")
        if self.stop_repeats and self.repeats(parsed.statements):
            self.history.append(Turn(action, None, statements=parsed.statements))
            return self._finish("", "repeat")  # its answer could only be the last one again
        outcome = self.table.execute(parsed.statements) if parsed.statements else Outcome(rows=None)
        answer = outcome.error if outcome.error is not None else server_answer(outcome.rows)
        self.history.append(Turn(action, answer, outcome.refused, parsed.statements, outcome.changed))
        if len(self.history) >= self.max_round:
            return self._finish("", "round limit")  # judged on what the task holds now
        info = {"error": outcome.error, "refused": outcome.refused}
        return StepResult(self._observation(), 0.0, False, info, rejected=outcome.refused)

    def invalid_step(self, reply: str) -> StepResult:
        """A reply the benchmark cannot read ends the task ("validation failed"), judged on what the task holds."""
        if self.done:
            raise ValueError("the task is over; call reset(seed) or restart()")
        self.history.append(Turn(reply, None))
        return self._finish("", "unreadable")

    def repeats(self, statements: tuple[str, ...]) -> bool:
        """Whether `statements` are the previous reply's operation, which changed no row: on the same table they can
        only answer as they did (`stop_repeats`)."""
        last = self.history[-1] if self.history else None
        return last is not None and last.answer is not None and last.statements == statements and not last.changed

    def _finish(self, answer: str, ended: str) -> StepResult:
        """The benchmark's verdict: a mutation task by its table's hash now, a SELECT task by the final answer;
        `ended` says why the task ended (answer, unreadable, round limit, repeat)."""
        expected = self._task.expected(self.engine)
        if expected.md5 is not None:
            self.verdict = self.table.table_hash() == expected.md5
        else:
            self.verdict = answer_matches(answer, expected.rows or ())
        self._close_table()
        reward = 1.0 if self.verdict else 0.0
        return StepResult(self._observation(), reward, True, {"solved": self.verdict, "ended": ended})

    def _close_table(self) -> None:
        if self.table is not None:
            self.table.close()
            self.table = None

    def close(self) -> None:
        self._close_table()
        if self._server is not None:
            self._server = None
            SHARED_SERVER.release()

    def oracle_action(self, seed: int = 0) -> str:
        """The gold SQL first; then the final answer: the gold's result as the server answered it."""
        if not self.history:
            return f"Action: Operation\n```sql\n{self._task.gold}\n```"
        return f"Action: Answer\nFinal Answer: {self.history[-1].answer}"

    # ---- reporting -------------------------------------------------------------------------------------------------

    def score(self) -> float:
        return 1.0 if self.verdict else 0.0

    def success(self) -> bool:
        return bool(self.verdict)

    def task(self) -> str:
        """The instruction alone: what the runner retrieves memories by (`_task_description_from_entry`)."""
        return self._task.instruction

    def instance_stats(self) -> dict[str, Any]:
        task = self._task
        return {
            "task_id": task.id,
            "split": task.split,
            "skills": list(task.skills),
            "kind": task.kind,
            "engine": self.engine,
            "truth": task.truth[self.engine].source,
        }

    def transcript(self) -> str:
        """The chat from the question on, one `role: text` block per turn (the runner's trajectory after its
        instruction turn), then the outcome. Never the gold SQL or the expected answer."""
        lines = [f"user: {self.question()}"]
        for turn in self.history:
            lines.append(f"assistant: {turn.reply}")
            if turn.answer is not None:
                lines.append(f"user: {turn.answer}")
        outcome = "Correct." if self.verdict else "Not solved." if self.done else "Unfinished."
        return "\n".join([*lines, outcome])

    def _observation(self) -> Observation:
        """The last user turn (the question, or the server's answer to the last operation); `data`: task id, rounds
        played, the limit, and whether it is solved."""
        text = self.question() if not self.history or self.history[-1].answer is None else self.history[-1].answer
        data = {"task_id": self._task.id, "round": len(self.history), "max_round": self.max_round, "solved": self.verdict}
        return Observation(text, (), data)
