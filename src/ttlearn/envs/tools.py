"""Tool use: BFCL's multi-turn function-calling tasks (Berkeley Function Calling Leaderboard v4, Apache-2.0).

800 tasks: 200 scenarios over 8 simulated Python APIs (a file system, messaging, Twitter-like posting, support
tickets, a trading bot, travel booking, vehicle control, maths), each in BFCL's four categories: `base`,
`long_context` (the back end holds large distracting data), `miss_func` (a function the user needs is withheld for
one turn and offered the turn after) and `miss_param` (a request lacks a value; the right move is to ask). A user
makes 1-8 requests in turn; the agent answers each with function calls, one per step, then ends the turn.

Scoring is BFCL's own checker: at the end of every user turn with expected calls, the gold calls run on a second,
gold back end, and the turn passes when the agent's back-end state equals the gold one *and* the gold calls'
results are among the agent's results so far. `score` is the fraction of checked turns that passed (each passing
turn rewards 1/checked), `success` that all passed (BFCL's verdict on the task). BFCL's limit of 20 steps in one
user turn applies, doubled because a step here is one call (BFCL's steps may hold several): the reply after 40
in one turn ends the episode as failed, as BFCL's force-quit does.

The APIs run in a child process (`_bfcl_worker.py`): each episode loads fresh instances there, so nothing leaks
between episodes, and a call that runs past `call_timeout_s` or exhausts the child's memory ends the episode and
nothing else. Agent calls are parsed here with `ast`/`json` into a name and literal values; nothing is `eval`-ed.

The data and the API modules come from the `bfcl-eval` wheel, which `prepare()` (`ttlearn data prepare tools`)
downloads once with `pip download --no-deps`, checks against its SHA-256 and unpacks into the cache. The wheel is
not installed: its declared requirements (an exact numpy, LLM provider SDKs, tree-sitter, faiss, …) would fight the
project's, while the multi-turn APIs need only the standard library and mpmath (in the `tasks` extra).
"""

from __future__ import annotations

import ast
import json
import keyword
import math
import re
import select
import subprocess
import sys
import unicodedata
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ttlearn.data.bfcl import PREPARE_COMMAND, bfcl_dir
from ttlearn.envs.base import Env
from ttlearn.types import Observation, StepResult

CATEGORIES = ("base", "long_context", "miss_func", "miss_param")
SPLITS = ("train", "test", "all")
SCENARIOS = 200
TEST_EVERY = 5
"""Scenario i is a test scenario when i % 5 == 0: 40 test and 160 train scenarios, all four variants of a scenario
on the same side (they share questions and back-end states, so splitting tasks would leak)."""
TURN_CALL_LIMIT = 40
"""The replies one user turn allows. BFCL allows 20 model steps a turn, each of which may hold several calls; here a
step is one call, so the limit is doubled (the longest gold turn has 34 calls)."""
LOAD_TIMEOUT_S = 120.0
"""How long the back end may take to start and load a task (imports, long-context data) on a loaded machine."""
INVALID_PENALTY = -0.1
END_TURN = "done"
_HELD_OUT_PROMPT = "I have updated some more functions you can choose from: {names}. What about now?"
_WORKER = Path(__file__).with_name("_bfcl_worker.py")


class MalformedCall(ValueError):
    """A reply that tries to call a function but cannot be read as one call; the message says why."""


# -- data ---------------------------------------------------------------------------------------------------------


def _prepared_dir() -> Path:
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


# -- reading a call -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    def text(self) -> str:
        """The canonical Python-call form, e.g. `mv(source='a.txt', destination='tmp')`."""
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs]
        return f"{self.name}({', '.join(parts)})"


# a name starts only where no name character precedes it: each scan then starts once per word (linear time)
_PY_CALL = re.compile(r"(?<![A-Za-z0-9_.])[A-Za-z_][A-Za-z0-9_.]*\(")
_JSON_TYPES = (str, bool, type(None))
MAX_INT_BITS = 13_000
"""Integers up to ~3,900 digits: Python refuses to print one past 4,300, so no canonical text could hold it."""
PARSE_ERRORS = (SyntaxError, ValueError, TypeError, RecursionError, MemoryError)
"""What Python's parsers raise on hostile text (deep nesting, huge literals, long chains of unary minus)."""


def _json_value(value: Any, depth: int = 0) -> Any:
    """The literal as a JSON value (tuples become lists); MalformedCall for sets, bytes, complex numbers, numbers that
    are not finite or too long to print, and nesting deeper than 100."""
    if depth > 100:
        raise MalformedCall("argument values are nested more than 100 levels deep")
    if isinstance(value, _JSON_TYPES):
        return value
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_BITS:
            raise MalformedCall("integers must have fewer than 3,900 digits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise MalformedCall(f"numbers must be finite, got {value!r}")
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(v, depth + 1) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _json_value(v, depth + 1) for k, v in value.items()}
    raise MalformedCall(f"argument values must be strings, numbers, booleans, None, lists or dicts, got {value!r}")


def _name(text: str, what: str) -> str:
    """`text` as a function or argument name of a canonical Python call, else MalformedCall. NFKC first, as Python's
    own parser reads identifiers (`ｌｓ` is `ls`, `ﬁle` is `file`), then ASCII only: the call must read back from
    its `text()` as the very same call, and the Python syntax matches ASCII names."""
    name = unicodedata.normalize("NFKC", text)
    if not name.isascii() or not name.isidentifier() or keyword.iskeyword(name):
        raise MalformedCall(f"{what} must be an ASCII Python identifier and not a keyword, got {text[:60]!r}")
    return name


def _closing_paren(text: str, start: int) -> int:
    """The index of the ')' closing the '(' at `start`, skipping quoted strings; MalformedCall if none."""
    depth, quote, index = 0, "", start
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index
        index += 1
    raise MalformedCall("the call's parentheses are not closed")


def _python_call(text: str, start: int, paren: int) -> Call:
    source = text[start : _closing_paren(text, paren) + 1]
    shown = source if len(source) <= 80 else source[:77] + "..."
    try:
        node = ast.parse(source, mode="eval").body
    except PARSE_ERRORS as error:
        reason = getattr(error, "msg", type(error).__name__)
        raise MalformedCall(f"{shown!r} is not valid call syntax ({reason})") from None
    if not isinstance(node, ast.Call) or any(k.arg is None for k in node.keywords):
        raise MalformedCall(f"{shown!r} is not a single call with named or positional arguments")
    try:
        args = tuple(_json_value(ast.literal_eval(a)) for a in node.args)
        kwargs = tuple(
            (_name(k.arg, "an argument name"), _json_value(ast.literal_eval(k.value))) for k in node.keywords
        )
    except MalformedCall:
        raise
    except PARSE_ERRORS:
        raise MalformedCall("argument values must be literals: quote strings, no variables or expressions") from None
    return Call(_name(source[: paren - start].rsplit(".", 1)[-1], "a function name"), args, kwargs)


def _json_call(text: str, start: int) -> Call:
    try:
        value, _ = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as error:
        raise MalformedCall(f"the JSON object does not parse ({error.msg})") from None
    except PARSE_ERRORS as error:  # nesting past the recursion limit, an integer past 4,300 digits
        raise MalformedCall(f"the JSON object cannot be read ({type(error).__name__})") from None
    name = value.get("name") if isinstance(value, dict) else None
    if not isinstance(name, str) or not name:
        raise MalformedCall('a JSON call needs a "name" string, e.g. {"name": "ls", "arguments": {}}')
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):  # OpenAI's tool calls carry the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except PARSE_ERRORS:
            raise MalformedCall('"arguments" must be a JSON object') from None
    if not isinstance(arguments, dict):
        raise MalformedCall('"arguments" must be a JSON object')
    kwargs = tuple((_name(k, "an argument name"), _json_value(v)) for k, v in arguments.items())
    return Call(_name(name, "a function name"), (), kwargs)


def read_call(reply: str) -> Call | None:
    """The one function call a reply makes; None when it makes none (it ends the user's turn).

    The rule: the first call in the reply counts, in whichever syntax comes first —
    Python `name(arg=value, ...)` (no space before the parenthesis; positional values allowed; a dotted prefix such
    as `functions.ls(` is dropped; values must be literals) or JSON `{"name": ..., "arguments": {...}}`
    ("parameters" is accepted for "arguments"). A reply with neither, such as `done` or plain prose, makes no call.
    A reply that starts a call but cannot be read raises MalformedCall with the reason (never another exception).
    A call reads back from its canonical `text()` as the very same call: names are identifiers, values are plain
    finite JSON values, so what `parse_action` accepted, `step` runs.
    """
    python = _PY_CALL.search(reply)
    brace = reply.find("{")
    if python is None and brace < 0:
        return None
    if python is not None and (brace < 0 or python.start() < brace):
        return _python_call(reply, python.start(), python.end() - 1)
    return _json_call(reply, brace)


# -- the back end -------------------------------------------------------------------------------------------------


class BackendFailure(RuntimeError):
    """The API child process ran past its time limit or died; the episode cannot go on."""


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout):
        if stream is not None:
            stream.close()


class Backend:
    """A `_bfcl_worker.py` child process and its request/answer pipe, with a time limit per request."""

    def __init__(self, root: Path, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.process = subprocess.Popen(
            [sys.executable, str(_WORKER), str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._finalizer = weakref.finalize(self, _stop, self.process)

    def ask(self, request: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """Send one request and wait for its answer, up to `timeout_s` (default: the per-call limit)."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise BackendFailure("the API back end had stopped") from None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.close()
            reason = f"ran past {timeout_s:g} s" if not ready else "crashed (out of memory?)"
            raise BackendFailure(f"the API call {reason} and was stopped")
        return json.loads(line)

    def close(self) -> None:
        self._finalizer()

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


# -- the environment ----------------------------------------------------------------------------------------------


class Tools(Env):
    """A user asks for things over several turns; the agent fulfils each request by calling the simulated APIs,
    one call per step, and ends the turn with `done` (or any reply that makes no call).

    Observation: the user's current request, the functions available now (compact signatures) and the API's answer
    to the last call (or its error), truncated to `answer_chars`. A reply that starts a call but cannot be read is an
    invalid step (`invalid_step`): the penalty −0.1, the error in the observation, and it counts toward the turn's
    40 replies. The back-end child starts at the first `reset`; `close()` stops it.
    """

    reply_tokens = 96

    def __init__(
        self,
        split: str = "train",
        categories: tuple[str, ...] | list[str] = CATEGORIES,
        answer_chars: int = 1500,
        call_timeout_s: float = 5.0,
        seed: int = 0,
    ) -> None:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        categories = (categories,) if isinstance(categories, str) else tuple(categories)
        unknown = [c for c in categories if c not in CATEGORIES]
        if unknown or not categories:
            raise ValueError(f"categories must be some of {', '.join(CATEGORIES)}, got {list(categories)}")
        if answer_chars < 100:
            raise ValueError(f"answer_chars must be >= 100, got {answer_chars}")
        if call_timeout_s <= 0:
            raise ValueError(f"call_timeout_s must be > 0, got {call_timeout_s}")
        self.split, self.categories = split, tuple(c for c in CATEGORIES if c in categories)
        self.answer_chars, self.call_timeout_s = answer_chars, call_timeout_s
        self.seed = seed  # the run passes its seed to every env; tasks are chosen by reset(seed) alone
        self._backend: Backend | None = None
        self._task: Task | None = None

    def close(self) -> None:
        """Stop the API child process; a later `reset` starts a new one."""
        if self._backend is not None:
            self._backend.close()
            self._backend = None

    def tasks(self) -> tuple[Task, ...]:
        """The configured split's tasks in play order (`reset(seed)` plays `tasks()[seed % len]`)."""
        every = load_tasks(_prepared_dir())
        return tuple(t for t in every if t.category in self.categories and in_split(t.scenario, self.split))

    def _started(self) -> Task:
        if self._task is None:
            raise ValueError("no task yet: call reset(seed) first")
        return self._task

    # -- instance ---------------------------------------------------------------------------------------------
    def reset(self, seed: int) -> Observation:
        tasks = self.tasks()
        self._task = tasks[seed % len(tasks)]
        return self.restart()

    def restart(self) -> Observation:
        task = self._started()
        if self._backend is None or not self._backend.alive:
            self._backend = Backend(_prepared_dir(), self.call_timeout_s)
        load = {"config": task.config, "classes": list(task.classes), "long_context": task.category == "long_context"}
        self._backend.ask({"op": "load", **load}, timeout_s=LOAD_TIMEOUT_S)
        self._docs = {doc["name"]: doc for cls in task.classes for doc in load_function_docs(_prepared_dir())[cls]}
        self._hidden = {name for names in task.held_out.values() for name in names}
        self._turn, self._turn_replies, self._turn_calls = 0, 0, 0
        self._verdicts: list[bool | None] = []
        self._over, self._forced_out = False, ""
        self._log: list[str] = []
        return self._open_turn()

    def _open_turn(self) -> Observation:
        task = self._started()
        self._turn_replies = self._turn_calls = 0
        if self._turn in task.held_out:
            self._hidden -= set(task.held_out[self._turn])
        self._log.append(f"User: {self._request()}")
        return self._observe("")

    def _request(self) -> str:
        task = self._started()
        message = task.messages[self._turn]
        return message if message is not None else _HELD_OUT_PROMPT.format(names=", ".join(task.held_out[self._turn]))

    # -- play -------------------------------------------------------------------------------------------------
    def legal_actions(self) -> tuple[str, ...]:
        return ()

    def parse_action(self, text: str, legal_actions: Sequence[str] = ()) -> str | None:
        """The reply's call in canonical form, `done` when it makes none, None when it is malformed (see read_call)."""
        try:
            call = read_call(text)
        except MalformedCall:
            return None
        if call is None:
            return END_TURN
        self._parsed = (call.text(), call)  # step runs this very call, not a re-reading of its text
        return call.text()

    def step(self, action: str) -> StepResult:
        self._started()
        if self._over:
            raise ValueError("the episode is over; call restart() or reset()")
        parsed = getattr(self, "_parsed", None)
        # what parse_action read; other text is read here (MalformedCall is a ValueError: validate with parse_action)
        call = parsed[1] if parsed is not None and parsed[0] == action else read_call(action)
        self._parsed = None
        if self._turn_replies >= TURN_CALL_LIMIT and call is not None:
            return self._force_out(f"more than {TURN_CALL_LIMIT} calls in one user turn")
        if call is None:
            return self._end_turn()
        self._turn_replies += 1
        self._turn_calls += 1
        if call.name not in self._docs:  # held-out functions are unlisted but callable, as in BFCL
            answer = f"Error: there is no function {call.name!r}; call one of the functions listed."
        else:
            try:
                answer = self._backend.ask({"op": "call", **_payload(call)})["result"]
            except BackendFailure as failure:
                return self._force_out(str(failure))
        self._log.append(f"Call: {call.text()}\nAnswer: {self._clip(answer)}")
        observation = self._observe(f"Last call: {call.text()}\nAnswer: {self._clip(answer)}")
        return StepResult(observation, 0.0, False, {"call": call.name})

    def invalid_step(self, reply: str) -> StepResult:
        self._started()
        if self._over:
            raise ValueError("the episode is over; call restart() or reset()")
        if self._turn_replies >= TURN_CALL_LIMIT:
            return self._force_out(f"more than {TURN_CALL_LIMIT} calls in one user turn")
        self._turn_replies += 1
        try:
            read_call(reply)
            reason = "it makes no call"
        except MalformedCall as error:
            reason = str(error)
        text = (
            f"Could not read a function call from your reply: {reason}. Write one call, e.g. "
            f'ls(a=True) or {{"name": "ls", "arguments": {{"a": true}}}}, or {END_TURN} to end your turn.'
        )
        self._log.append(f"Invalid reply: {reply.strip()[:120]}\n{text}")
        return StepResult(self._observe(text), INVALID_PENALTY, False, {"invalid": True})

    def _end_turn(self) -> StepResult:
        task = self._started()
        gold = task.gold[self._turn]
        reward, verdict = 0.0, None
        if gold:
            try:
                answer = self._backend.ask({"op": "check", "gold": [_payload(_gold_call(text)) for text in gold]})
            except BackendFailure as failure:
                return self._force_out(str(failure))
            verdict = bool(answer["passed"])
            reward = 1.0 / self._checked_turns() if verdict else 0.0
        self._verdicts.append(verdict)
        if verdict is not None:
            matches = "matches" if verdict else "does not match"
            self._log.append(f"Turn {self._turn + 1} ended: the back end {matches} the expected state.")
        self._turn += 1
        if self._turn == len(task.messages):
            self._over = True
            return StepResult(self._observe("The user has no more requests."), reward, True, {"turn_passed": verdict})
        observation = self._open_turn()
        return StepResult(observation, reward, False, {"turn_passed": verdict})

    def _force_out(self, reason: str) -> StepResult:
        self._over, self._forced_out = True, reason
        self._log.append(f"Episode stopped: {reason}.")
        return StepResult(self._observe(f"Episode stopped: {reason}."), 0.0, True, {"forced_out": reason})

    def oracle_action(self, seed: int = 0) -> str:
        """The current turn's gold calls one by one, then `done`."""
        task = self._started()
        gold = task.gold[self._turn]
        return _gold_call(gold[self._turn_calls]).text() if self._turn_calls < len(gold) else END_TURN

    # -- reporting --------------------------------------------------------------------------------------------
    def _checked_turns(self) -> int:
        return sum(bool(turn) for turn in self._started().gold)

    def score(self) -> float:
        return sum(v is True for v in self._verdicts) / self._checked_turns()

    def success(self) -> bool:
        return self._over and not self._forced_out and self.score() == 1.0

    def describe(self) -> str:
        return (
            "You are an assistant that acts by calling functions of simulated APIs (a file system, messaging, "
            "posting, support tickets, trading, travel booking, vehicle control, maths). A user makes requests over "
            "several turns. Fulfil the current request by calling functions, ONE call per reply, written as "
            'name(arg="value", other=2) or as JSON {"name": "name", "arguments": {"arg": "value"}}; you then see the '
            f"function's answer. Reply {END_TURN} when the request is complete (a reply with no call also ends the "
            "turn). If a request lacks information or no listed function can do it, reply with a question instead "
            "of calling. After each turn the back end's state is compared with the expected one."
        )

    def task(self) -> str:
        task = self._started()
        return f"{task.messages[0]}\nAPIs: {', '.join(task.classes)}"

    def _clip(self, text: str) -> str:
        return text if len(text) <= self.answer_chars else f"{text[: self.answer_chars]} ... [{len(text)} characters]"

    def _observe(self, last: str) -> Observation:
        task = self._started()
        turn = min(self._turn + 1, len(task.messages))
        request = "(none)" if self._over else self._request()
        lines = [f"User request (turn {turn} of {len(task.messages)}): {request}"]
        if not self._over:
            lines.append("Functions:")
            lines += [f"- {signature(doc)}" for name, doc in self._docs.items() if name not in self._hidden]
        if last:
            lines.append(last)
        data = {"turn": self._turn, "calls_this_turn": self._turn_calls, "verdicts": list(self._verdicts)}
        return Observation("\n".join(lines), (), data)

    def transcript(self) -> str:
        self._started()
        matched = sum(v is True for v in self._verdicts)
        outcome = f"Score {self.score():.2f}: {matched} of {self._checked_turns()} checked turns matched."
        return "\n".join([*self._log, outcome])

    def instance_stats(self) -> dict[str, Any]:
        task = self._started()
        return {
            "task_id": task.id,
            "category": task.category,
            "scenario": task.scenario,
            "split": self.split,
            "apis": list(task.classes),
            "turns": len(task.messages),
            "checked_turns": self._checked_turns(),
            "gold_calls": sum(len(turn) for turn in task.gold),
            "turn_verdicts": list(self._verdicts),
            "forced_out": self._forced_out,
        }

    def instance_count(self) -> int:
        test = SCENARIOS // TEST_EVERY
        scenarios = {"train": SCENARIOS - test, "test": test, "all": SCENARIOS}[self.split]
        return scenarios * len(self.categories)

    def config(self) -> dict[str, Any]:
        return {
            "split": self.split,
            "categories": list(self.categories),
            "answer_chars": self.answer_chars,
            "call_timeout_s": self.call_timeout_s,
            "seed": self.seed,
        }


def _gold_call(text: str) -> Call:
    call = read_call(text)
    if call is None:
        raise ValueError(f"BFCL's gold call {text!r} does not read as a call")
    return call


def _payload(call: Call) -> dict[str, Any]:
    """A call as the back end takes it."""
    return {"name": call.name, "args": list(call.args), "kwargs": dict(call.kwargs)}
