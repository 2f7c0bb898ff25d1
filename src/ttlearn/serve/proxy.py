"""`ttlearn proxy`: an OpenAI-compatible endpoint that learns, for agents that only know one URL (docs/proxy.md).

`POST /v1/chat/completions` is forwarded to an upstream OpenAI-compatible server. Before that, the key's namespace
gives the MemRL memories for the conversation's task (the header `X-TTLearn-Task`, else the first user message),
placed in the messages as the LLM player places a memory's text for `ttlearn run` (`place_memory`); the rest of the
body, streaming included, passes through. The answer names its exchange (header `X-TTLearn-Exchange`, and the field
`ttlearn_exchange` of a JSON answer); requests that share an `X-TTLearn-Conversation` header are one exchange, as a
run's episode of several decisions is one episode. `POST /v1/feedback` with that id and the task's reward then learns
as a run does: MemRL's `observe` updates the Q of the items that were shown and writes the experience.

The learning is the `memrl` memory itself, one per namespace (`NamespaceLearner`): its `context` retrieves and
renders, its `observe` updates and writes, with the options `ttlearn run … -m` takes. The proxy only keeps, for each
exchange in flight, what was asked, shown and answered (bounded in count, characters and age: `PendingExchanges`).
Keys, namespaces and limits are the memory service's own: the proxy is `ttlearn serve`'s app with these two routes
added. The agent's key stays here; the upstream gets OPENAI_API_KEY, if set.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from fastapi import FastAPI, HTTPException, Request, status
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field, model_validator
from starlette.concurrency import run_in_threadpool

from ttlearn.llm.base import LLM, LLMError, credential_target, make_llm
from ttlearn.memory.base import MEMORIES, Memory
from ttlearn.memory.store import MemoryStore
from ttlearn.players.llm import NOTES_HEADING
from ttlearn.serve import DEFAULT_MAX_PENDING, DEFAULT_PENDING_AGE_S, DEFAULT_PENDING_CHARS, MAX_BATCH
from ttlearn.serve.app import Credentials, Value, _Request, create_app, namespace_service
from ttlearn.serve.bodies import BodyError, read_json
from ttlearn.types import Episode, Step

TASK_HEADER = "X-TTLearn-Task"
CONVERSATION_HEADER = "X-TTLearn-Conversation"
MAX_CONVERSATION_CHARS = 200
EXCHANGE_HEADER = "X-TTLearn-Exchange"
UPSTREAM_TIMEOUT_S = 600.0
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "server", "date"}
"""Headers of the upstream's answer that describe its own hop, not relayed."""


# -- the conversation --------------------------------------------------------------------------------------------


def _text(content: Any) -> str:
    """A message's text: its string, or the text parts of a multi-part content."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def conversation_task(messages: list[dict[str, Any]], named: str | None) -> str:
    """The task whose memories are shown: the one the header names, else the first user message's text."""
    if named:
        return named
    for message in messages:
        if message.get("role") == "user" and (text := _text(message.get("content"))):
            return text
    raise ValueError(f"no task: the messages hold no user message with text, and no {TASK_HEADER} header names one")


def place_memory(messages: list[dict[str, Any]], memory: str) -> list[dict[str, Any]]:
    """`messages` with the memory's text placed as the LLM player places it (`build_messages`, `note_at="system"`):
    its exchanges as earlier user/assistant turns after the system message, else its notes under `NOTES_HEADING` at
    the end of the system message (one is added first when the conversation has none). Empty memory: unchanged."""
    exchanges = list(getattr(memory, "exchanges", ()))
    note = memory.strip() if not exchanges else ""
    if not exchanges and not note:
        return messages
    head, rest = (messages[:1], messages[1:]) if messages and messages[0].get("role") == "system" else ([], messages)
    if note:
        addition = f"{NOTES_HEADING}\n{note}"
        if not head:
            head = [{"role": "system", "content": addition}]
        elif isinstance(head[0].get("content"), list):
            head = [{**head[0], "content": [*head[0]["content"], {"type": "text", "text": f"\n\n{addition}"}]}]
        else:
            head = [{**head[0], "content": f"{head[0].get('content') or ''}\n\n{addition}"}]
    earlier = [
        {"role": role, "content": text}
        for task, answer in exchanges
        for role, text in (("user", task), ("assistant", answer))
    ]
    return [*head, *earlier, *rest]


# -- exchanges awaiting feedback ---------------------------------------------------------------------------------


@dataclass
class Turn:
    """One forwarded request: its last message's text, and the reply's text in the pieces it arrived in (one for a
    JSON answer, a delta per chunk when streamed)."""

    question: str
    answer: list[str] = field(default_factory=list)


@dataclass
class Exchange:
    """What awaits feedback: one request, or every request of one conversation (an episode of several steps), with
    the task, the ids of the items shown for it and the model that answered."""

    namespace: str
    task: str
    model: str
    shown: list[int]
    turns: list[Turn]
    created: float
    key_id: str | None = None
    """The key whose request opened it: the provenance of the item its feedback writes."""

    @property
    def chars(self) -> int:
        """What it holds of its requests (the replies are bounded by the upstream's answers)."""
        return len(self.task) + sum(len(turn.question) for turn in self.turns)


def conversation_exchange(conversation: str) -> str:
    """The exchange id of a conversation the client names: its own namespace of ids, apart from the random ones."""
    return f"conversation:{conversation}"


class PendingExchanges:
    """Exchanges awaiting feedback: at most `max_count` holding at most `max_chars` characters of task and questions
    together, none older than `max_age_s` since its last request (the oldest go first). The characters are bounded
    too because each request may hold a whole body's text. Ids are per namespace."""

    def __init__(self, max_count: int, max_age_s: float, max_chars: int = DEFAULT_PENDING_CHARS) -> None:
        if max_count < 1 or max_age_s <= 0 or max_chars < 1:
            raise ValueError(
                f"pending exchanges need a count ≥ 1, an age > 0 s and characters ≥ 1, got {max_count}, {max_age_s}, "
                f"{max_chars}"
            )
        self.max_count, self.max_age_s, self.max_chars = max_count, max_age_s, max_chars
        self._waiting: OrderedDict[tuple[str, str], Exchange] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def add(self, exchange: Exchange, conversation: str | None = None) -> str:
        """The id `exchange` awaits feedback under: a new random one, or its conversation's, whose exchange then
        takes its turn and the items shown for it."""
        exchange_id = secrets.token_urlsafe(16) if conversation is None else conversation_exchange(conversation)
        with self._lock:
            ongoing = self._waiting.get((exchange.namespace, exchange_id))
            if ongoing is not None:
                self._pop(exchange.namespace, exchange_id)
                ongoing.turns += exchange.turns
                ongoing.shown += [item for item in exchange.shown if item not in ongoing.shown]
                ongoing.created = exchange.created
                exchange = ongoing
            self._keep(exchange_id, exchange)
        return exchange_id

    def take(self, exchange_id: str, namespace: str) -> Exchange | None:
        """The exchange, no longer pending; None when unknown, expired, or another namespace's."""
        with self._lock:
            self._forget_old(time.monotonic())
            if (namespace, exchange_id) not in self._waiting:
                return None
            return self._pop(namespace, exchange_id)

    def put_back(self, exchange_id: str, exchange: Exchange) -> None:
        """An exchange taken for feedback that could not be learnt, awaiting it again from now."""
        exchange.created = time.monotonic()
        with self._lock:
            self._keep(exchange_id, exchange)

    def drop_turn(self, exchange_id: str, namespace: str, turn: Turn) -> None:
        """A request the upstream did not answer: its turn leaves the exchange (and the exchange goes, if that was
        its only turn)."""
        with self._lock:
            exchange = self._waiting.get((namespace, exchange_id))
            if exchange is None or not any(kept is turn for kept in exchange.turns):
                return
            self._pop(namespace, exchange_id)
            exchange.turns = [kept for kept in exchange.turns if kept is not turn]
            if exchange.turns:
                self._keep(exchange_id, exchange)

    def _keep(self, exchange_id: str, exchange: Exchange) -> None:
        self._forget_old(exchange.created)
        self._waiting[(exchange.namespace, exchange_id)] = exchange
        self._chars += exchange.chars
        while len(self._waiting) > self.max_count or self._chars > self.max_chars:
            self._pop(*next(iter(self._waiting)))

    def _pop(self, namespace: str, exchange_id: str) -> Exchange:
        exchange = self._waiting.pop((namespace, exchange_id))
        self._chars -= exchange.chars
        return exchange

    def _forget_old(self, now: float) -> None:
        while self._waiting and now - next(iter(self._waiting.values())).created > self.max_age_s:
            self._pop(*next(iter(self._waiting)))


# -- the learning, one memrl memory per namespace ----------------------------------------------------------------


class NamespaceLearner:
    """The `memrl` memory of one namespace, used under a lock: what `ttlearn run` does with one episode at a time,
    done per exchange. `show` takes the ids the memory retrieved (its `_retrieved`) so that each exchange keeps its
    own; `learn` gives them back to `observe`, which updates their Q and writes the experience."""

    def __init__(self, memory: Memory) -> None:
        self.memory: Any = memory  # a MemRL memory (memrl, memp, rag), a plug-in this room reaches by its registry
        self.episodes = 0
        self.lock = threading.Lock()

    def show(self, task: str) -> tuple[str, list[int]]:
        with self.lock:
            self.memory._retrieved = []
            text = self.memory.context(task)
            shown, self.memory._retrieved = self.memory._retrieved, []
        return text, shown

    @property
    def writes_notes(self) -> bool:
        """Whether its experiences are notes an LLM writes (`write=notes`); the other kinds need none."""
        return self.memory.write == "notes"

    def learn(self, graded: Sequence[Graded], writers: Sequence[LLM | None]) -> list[bool]:
        """Each exchange as an episode, a step per turn, scoring its reward (its last step's reward); a success when
        its `success` says so, else when the reward is over the memory's success threshold, as in a run; its answer
        is the last reply, and its item records the exchange and the key (provenance). `writers[i]` writes MemRL's
        notes of exchange i (`write=notes`). Their learning lands together, in one transaction, or, on an error,
        not at all (`applied_together`). Returns whether each counted as a success."""
        with self.lock, self.memory.applied_together():
            return [self._observe(one, writer) for one, writer in zip(graded, writers)]

    def _observe(self, graded: Graded, writer: LLM | None) -> bool:
        exchange_id, exchange, reward, success = graded
        answers = ["".join(turn.answer) for turn in exchange.turns]
        rewards = [0.0] * (len(answers) - 1) + [reward]
        steps = tuple(Step(t.question, a, r, raw=a) for t, a, r in zip(exchange.turns, answers, rewards))
        info = {"answer": answers[-1], "exchange": exchange_id, "key_id": exchange.key_id}
        episode = Episode(self.episodes, self.episodes, exchange.task, steps, reward, success, info)
        self.episodes += 1
        self.memory.llm = writer
        self.memory._retrieved = list(exchange.shown)
        try:
            self.memory.observe(episode)
        finally:
            self.memory.llm = None
        return bool(self.memory.succeeded(episode))


Graded = tuple[str, Exchange, float, "bool | None"]
"""An exchange given feedback: its id, the exchange, its reward and whether it succeeded (None: by the reward)."""


MEMRL_FAMILY = ("memrl", "memp", "rag")
"""The memories the proxy can run: MemRL and its baselines, which keep what they showed until `observe`."""


PLACED_BY_PROXY = {"store", "url", "key", "namespace", "embedder"}
"""Memory options the proxy sets itself."""


class Learning:
    """The proxy's state: a learner per namespace, the exchanges awaiting feedback, and the upstream's clients."""

    def __init__(
        self, store: str, upstream: str, memory: str, options: dict[str, Any], pending: PendingExchanges
    ) -> None:
        if memory not in MEMRL_FAMILY:
            raise ValueError(f"the proxy learns with {', '.join(MEMRL_FAMILY)}, not {memory!r}")
        placed = sorted(set(options) & PLACED_BY_PROXY)
        if placed:
            raise ValueError(
                f"memory option {', '.join(placed)}: the proxy keeps the memories in its --store, one "
                "namespace per key (its embedder the namespace's)"
            )
        MEMORIES.check(memory, options, reserved=("llm",))  # a wrong option fails at start, not at the first request
        self.store, self.upstream, self.memory, self.options = store, upstream.rstrip("/"), memory, options
        self.pending = pending
        _, key_env = credential_target(f"openai:{self.upstream}#-") or ("", "")
        key = os.environ.get(key_env) if key_env else None
        self.client = httpx2.AsyncClient(
            timeout=UPSTREAM_TIMEOUT_S, headers={"Authorization": f"Bearer {key or 'none'}"}
        )
        self._learners: dict[str, NamespaceLearner] = {}
        self._lock = threading.Lock()

    def writer(self, model: str) -> LLM:
        """The upstream's `model`, to write MemRL's notes about its own exchange (`write=notes`); the caller closes it
        (one per note, which costs a model call anyway: the model names come from the callers, so none is kept)."""
        return make_llm(f"openai:{self.upstream}#{model or '-'}")

    def learner(self, namespace: str) -> NamespaceLearner:
        """The namespace's learner, made on its first exchange with the options `ttlearn run -m` takes (its store,
        namespace and embedder are the proxy's; its writer comes with each feedback)."""
        with self._lock:
            if namespace not in self._learners:
                with MemoryStore(self.store) as store:
                    embedder = store.embedder_of(namespace)
                given = {"embedder": embedder, "run_id": f"proxy-{namespace}", **self.options}
                memory = MEMORIES.build(
                    self.memory, reserved=("llm",), llm=None, **given, store=self.store, namespace=namespace
                )
                self._learners[namespace] = NamespaceLearner(memory)
            return self._learners[namespace]


# -- the routes --------------------------------------------------------------------------------------------------


class FeedbackIn(_Request):
    exchange: str | None = Field(
        None, min_length=1, max_length=250, description=f"The answer's {EXCHANGE_HEADER} header."
    )
    conversation: str | None = Field(
        None, min_length=1, max_length=MAX_CONVERSATION_CHARS, description=f"Or the requests' {CONVERSATION_HEADER}."
    )
    reward: Value = Field(description="The task's score; a success when over the memory's success_threshold (0).")
    success: bool | None = Field(None, description="Says whether the task succeeded, whatever the reward.")

    @model_validator(mode="after")
    def _one_exchange(self) -> FeedbackIn:
        if (self.exchange is None) == (self.conversation is None):
            raise ValueError("name the exchange or the conversation, one of them")
        return self

    @property
    def exchange_id(self) -> str:
        return self.exchange if self.conversation is None else conversation_exchange(self.conversation)


class FeedbackBatchIn(_Request):
    items: list[FeedbackIn] = Field(
        min_length=1, max_length=MAX_BATCH, description="Exchanges' feedback, learnt together in one transaction."
    )


class FeedbackDone(BaseModel):
    exchange: str
    success: bool = Field(description="Whether MemRL counted it a success (its reward_success, else reward_failure).")
    shown: list[int] = Field(description="The items shown for it, whose Q the feedback updated.")


class FeedbackBatchDone(BaseModel):
    items: list[FeedbackDone]


def _chat_body(raw: bytes) -> dict[str, Any]:
    """The request body, read by the service's rules (`read_json`); it must hold a list of messages."""
    try:
        body = read_json(raw)
    except BodyError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "the body needs 'messages': a list of objects")
    return body


def _key_namespace(request: Request, credentials: Credentials) -> tuple[str, str]:
    """The namespace the caller's key opens and the key's id, after the service's own checks (`namespace_service`:
    a missing or wrong key 401, counted against the address; the key's rate limit 429)."""
    service = request.app.state.service
    owner = service.keys.owner(credentials.credentials) if credentials is not None else None
    namespace = owner.namespace if owner is not None else "-"
    namespace_service(namespace, request, credentials)
    return namespace, request.state.key_id


def _reply_text(data: Any) -> str:
    try:
        return _text(data["choices"][0]["message"]["content"])
    except (KeyError, IndexError, TypeError):
        return ""


def _delta_text(line: str) -> str:
    """The text a streamed chunk (`data: {...}`) adds to the reply."""
    if not line.startswith("data:") or line[5:].strip() == "[DONE]":
        return ""
    try:
        return _text(json.loads(line[5:])["choices"][0]["delta"].get("content"))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return ""


def _outgoing(learning: Learning, request: Request, credentials: Credentials, raw: bytes) -> tuple[dict, Exchange]:
    """The body to forward, its memories placed, and its exchange (in one worker thread: the key, the body and the
    retrieval all touch the store or the CPU)."""
    namespace, key_id = _key_namespace(request, credentials)
    if len(request.headers.get(CONVERSATION_HEADER, "")) > MAX_CONVERSATION_CHARS:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"{CONVERSATION_HEADER} is over {MAX_CONVERSATION_CHARS} characters"
        )
    body = _chat_body(raw)
    try:
        task = conversation_task(body["messages"], request.headers.get(TASK_HEADER))
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    memory, shown = learning.learner(namespace).show(task)
    turn = Turn(_text(body["messages"][-1].get("content")))
    exchange = Exchange(namespace, task, str(body.get("model", "")), shown, [turn], time.monotonic(), key_id)
    return {**body, "messages": place_memory(body["messages"], memory)}, exchange


def add_proxy_routes(app: FastAPI, learning: Learning) -> None:
    """The two routes of the learning proxy on the memory service's `app`."""

    @app.post("/v1/chat/completions", tags=["proxy"])
    async def chat_completions(request: Request, credentials: Credentials) -> Response:
        """An OpenAI chat completion, forwarded upstream with the namespace's MemRL memories for the task placed in
        its messages; the answer's X-TTLearn-Exchange header names the exchange to give feedback on."""
        raw = await request.body()
        body, exchange = await run_in_threadpool(_outgoing, learning, request, credentials, raw)
        [turn] = exchange.turns
        exchange_id = learning.pending.add(exchange, request.headers.get(CONVERSATION_HEADER))
        url = f"{learning.upstream}/chat/completions"
        try:
            reply = await learning.client.send(learning.client.build_request("POST", url, json=body), stream=True)
        except httpx2.HTTPError as exc:
            learning.pending.drop_turn(exchange_id, exchange.namespace, turn)
            raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"the upstream {url} did not answer: {exc}") from None
        headers = {k: v for k, v in reply.headers.items() if k.lower() not in HOP_HEADERS}
        if reply.status_code >= 400 or "text/event-stream" not in reply.headers.get("content-type", ""):
            content = await reply.aread()
            await reply.aclose()
            if reply.status_code >= 400:
                learning.pending.drop_turn(exchange_id, exchange.namespace, turn)
                return Response(content, reply.status_code, headers)
            try:
                data = json.loads(content)
            except ValueError:
                learning.pending.drop_turn(exchange_id, exchange.namespace, turn)
                raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"the upstream {url} answered no JSON") from None
            turn.answer.append(_reply_text(data))
            return JSONResponse(
                {**data, "ttlearn_exchange": exchange_id}, headers={**headers, EXCHANGE_HEADER: exchange_id}
            )

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for line in reply.aiter_lines():
                    turn.answer.append(_delta_text(line))
                    yield f"{line}\n".encode()
            finally:
                await reply.aclose()

        return StreamingResponse(relay(), reply.status_code, headers={**headers, EXCHANGE_HEADER: exchange_id})

    @app.post("/v1/feedback", tags=["proxy"])
    def feedback(body: FeedbackIn, request: Request, credentials: Credentials) -> FeedbackDone:
        """The reward of an exchange: MemRL updates the Q of the items shown for it and writes it as an experience."""
        namespace, _ = _key_namespace(request, credentials)
        return _learn(learning, [body], namespace)[0]

    @app.post("/v1/feedback/batch", tags=["proxy"])
    def feedback_batch(body: FeedbackBatchIn, request: Request, credentials: Credentials) -> FeedbackBatchDone:
        """Up to 1000 exchanges' rewards, learnt together in one transaction: all or none (an unknown exchange
        refuses the batch, and every exchange in it awaits its feedback again)."""
        namespace, _ = _key_namespace(request, credentials)
        return FeedbackBatchDone(items=_learn(learning, body.items, namespace))


def _learn(learning: Learning, bodies: Sequence[FeedbackIn], namespace: str) -> list[FeedbackDone]:
    """Take the exchanges the feedback names and learn from them together; on any refusal each goes back to await
    its feedback, and nothing was learnt."""
    taken: list[tuple[str, Exchange]] = []

    def put_back() -> None:
        for exchange_id, exchange in taken:
            learning.pending.put_back(exchange_id, exchange)

    for body in bodies:
        exchange = learning.pending.take(body.exchange_id, namespace)
        if exchange is None:
            put_back()
            raise HTTPException(
                status.HTTP_404_NOT_FOUND,
                f"no exchange {body.exchange_id!r} awaits feedback in namespace {namespace!r}: unknown, already given "
                f"feedback, or forgotten (kept {learning.pending.max_age_s:g} s, at most {learning.pending.max_count})",
            )
        taken.append((body.exchange_id, exchange))
    learner = learning.learner(namespace)
    writers: list[LLM | None] = []
    try:
        try:
            for _, exchange in taken:
                writers.append(learning.writer(exchange.model) if learner.writes_notes else None)
        except ValueError as exc:  # a model name no spec can hold: nothing was learnt
            put_back()
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"the exchange's model: {exc}") from None
        graded = [(i, exchange, body.reward, body.success) for (i, exchange), body in zip(taken, bodies)]
        successes = learner.learn(graded, writers)
    except LLMError as exc:  # MemRL's note could not be written: nothing was learnt, the feedback may come again
        put_back()
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"the upstream could not write MemRL's note: {exc}") from None
    finally:
        for writer in writers:
            if writer is not None:
                writer.close()
    return [
        FeedbackDone(exchange=exchange_id, success=success, shown=exchange.shown)
        for (exchange_id, exchange), success in zip(taken, successes)
    ]


def create_proxy_app(
    store: str | Path,
    *,
    admin_key: str,
    upstream: str,
    memory: str = "memrl",
    memory_options: dict[str, Any] | None = None,
    max_pending: int = DEFAULT_MAX_PENDING,
    pending_age_s: float = DEFAULT_PENDING_AGE_S,
    **limits: Any,
) -> FastAPI:
    """The memory service over `store` (`create_app`, with `limits`) that also forwards chat completions to
    `upstream` and learns from their feedback with a `memory` (memrl, memp, rag) of `memory_options` per namespace."""
    app = create_app(store, admin_key=admin_key, **limits)
    pending = PendingExchanges(max_pending, pending_age_s)
    learning = Learning(str(store), upstream, memory, memory_options or {}, pending)
    add_proxy_routes(app, learning)
    app.state.learning = learning
    return app
