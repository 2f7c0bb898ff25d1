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

The APIs run in a child process (`_bfcl_backend.py`, `_bfcl_worker.py`): each episode loads fresh instances there,
so nothing leaks between episodes, and a call that runs past `call_timeout_s` or exhausts the child's memory ends the
episode and nothing else. Agent calls are read by `_tool_calls.py` into a name and literal values; nothing is
`eval`-ed. The tasks and function documentation are loaded by `_bfcl_tasks.py`.

The data and the API modules come from the `bfcl-eval` wheel, which `prepare()` (`ttlearn data prepare tools`)
downloads once with `pip download --no-deps`, checks against its SHA-256 and unpacks into the cache. The wheel is
not installed: its declared requirements (an exact numpy, LLM provider SDKs, tree-sitter, faiss, …) would fight the
project's, while the multi-turn APIs need only the standard library and mpmath (in the `tasks` extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ttlearn.envs._bfcl_backend import Backend, BackendFailure
from ttlearn.envs._bfcl_tasks import (
    CATEGORIES,
    SCENARIOS,
    SPLITS,
    TEST_EVERY,
    Task,
    in_split,
    load_function_docs,
    load_tasks,
    prepared_dir,
    signature,
)
from ttlearn.envs._tool_calls import Call, MalformedCall, read_call
from ttlearn.envs.base import Env
from ttlearn.types import Observation, StepResult

TURN_CALL_LIMIT = 40
"""The replies one user turn allows. BFCL allows 20 model steps a turn, each of which may hold several calls; here a
step is one call, so the limit is doubled (the longest gold turn has 34 calls)."""
LOAD_TIMEOUT_S = 120.0
"""How long the back end may take to start and load a task (imports, long-context data) on a loaded machine."""
INVALID_PENALTY = -0.1
END_TURN = "done"
_HELD_OUT_PROMPT = "I have updated some more functions you can choose from: {names}. What about now?"


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
        if not call_timeout_s > 0:  # its ceiling: `ceilings.CEILINGS`
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
        every = load_tasks(prepared_dir())
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
            self._backend = Backend(prepared_dir(), self.call_timeout_s)
        load = {"config": task.config, "classes": list(task.classes), "long_context": task.category == "long_context"}
        self._backend.ask({"op": "load", **load}, timeout_s=LOAD_TIMEOUT_S)
        self._docs = {doc["name"]: doc for cls in task.classes for doc in load_function_docs(prepared_dir())[cls]}
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


def _gold_call(text: str) -> Call:
    call = read_call(text)
    if call is None:
        raise ValueError(f"BFCL's gold call {text!r} does not read as a call")
    return call


def _payload(call: Call) -> dict[str, Any]:
    """A call as the back end takes it."""
    return {"name": call.name, "args": list(call.args), "kwargs": dict(call.kwargs)}
