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

Engines (`_db_bench_engine`, one protocol): `sqlite` (the default; every reply's statements run in a sandboxed
child) and `mariadb` (the faithful one: a real MySQL-compatible server the environment starts at its first task and
stops when it is closed, each task in a fresh database with a user of its own). Each engine judges by its own ground
truth (`data.db_bench`: the recorded answer where the gold reproduces it there, else the gold's result there; a task
whose gold does not run there is left out). A statement the sandbox refuses (a right the task lacks, the time limit,
a result over the row or size cap) is an invalid step whose reason the agent sees as the server's answer. A reply
can end its own task, never the run: a table it grew past what can be read fails the task, and whatever it left open
is ended when the task closes.

The prompts are `_db_bench_prompts`, the reply's parse `_db_bench_reply`, the splits `data.db_bench`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ttlearn.data.db_bench import ENGINES, SPLIT_CHOICES, Task, in_split, load_tasks
from ttlearn.envs._db_bench_engine import Table, open_engine
from ttlearn.envs._db_bench_prompts import INSTRUCTION, MEMORY_HEADING, OUTPUT_FORMAT, SYSTEM_PROMPT
from ttlearn.envs._db_bench_reply import read_reply
from ttlearn.envs._llb_verdict import answer_matches, server_answer
from ttlearn.envs.base import Env
from ttlearn.sandbox.statements import Outcome, StatementLimits
from ttlearn.types import Observation, StepResult

MAX_ROUND = 15
"""The runner's round limit: `experiment.max_steps` (configs/rl_llb_config.yaml:115), passed as the task's
`max_round` (memrl/run/llb_rl_runner.py:698-706)."""


@dataclass(frozen=True)
class Turn:
    """One reply and what the server answered (None: the reply ended the task); for an operation, its statements
    and whether they changed a row."""

    reply: str
    answer: str | None
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
        if split not in SPLIT_CHOICES:
            raise ValueError(f"split must be one of {', '.join(SPLIT_CHOICES)}, got {split!r}")
        for name, value in (("max_round", max_round), ("reply_tokens", reply_tokens), ("timeout_ms", timeout_ms),
                            ("max_rows", max_rows), ("max_bytes", max_bytes)):  # fmt: skip
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if not isinstance(stop_repeats, bool):
            raise ValueError(f"stop_repeats must be true or false, got {stop_repeats!r}")
        self.split, self.task_id, self.max_round, self.reply_tokens = split, task, max_round, reply_tokens
        self.stop_repeats, self.seed = stop_repeats, seed
        self.engine = open_engine(engine, StatementLimits(timeout_ms, max_rows, max_bytes))
        """Where the tasks' tables live; a server it needs starts at the first task and stops at `close`."""
        self.deterministic = self.engine.deterministic
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
        self.table: Table | None = None
        self.history: list[Turn] = []
        self.verdict: bool | None = None

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
        self.table = self.engine.open_table(task)
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
        return (
            f"{task.instruction}\nThe name of this table is {task.table}, and the headers of this table are {headers}."
        )

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
        outcome = self._table.execute(parsed.statements) if parsed.statements else Outcome(rows=None)
        answer = outcome.error if outcome.error is not None else server_answer(outcome.rows)
        self.history.append(Turn(action, answer, parsed.statements, outcome.changed))
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
        """The benchmark's verdict: a mutation task by its table's hash now (a table grown past what can be read
        fails), a SELECT task by the final answer; `ended` says why the task ended (answer, unreadable, round limit,
        repeat)."""
        expected = self._task.expected(self.engine.name)
        if expected.md5 is not None:
            digest = self._table.table_hash()
            self.verdict = digest is not None and digest == expected.md5
        else:
            self.verdict = answer_matches(answer, expected.rows or ())
        self._close_table()
        reward = 1.0 if self.verdict else 0.0
        return StepResult(self._observation(), reward, True, {"solved": self.verdict, "ended": ended})

    @property
    def _table(self) -> Table:
        if self.table is None:
            raise ValueError("no task yet: call reset(seed) first")
        return self.table

    def _close_table(self) -> None:
        if self.table is not None:
            table, self.table = self.table, None
            table.close()

    def close(self) -> None:
        try:
            self._close_table()
        finally:
            self.engine.close()

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
            "engine": self.engine.name,
            "truth": task.truth[self.engine.name].source,
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
        data = {
            "task_id": self._task.id,
            "round": len(self.history),
            "max_round": self.max_round,
            "solved": self.verdict,
        }
        return Observation(text, (), data)
