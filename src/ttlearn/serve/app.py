"""`ttlearn serve`: the MemRL store as an HTTP service that deployed agents share (FastAPI on uvicorn).

Each namespace of the store is one learning memory with its own key. An agent writes experiences
(`POST /v1/namespaces/{ns}/memories`), asks for the best ones for its situation (`.../retrieve`: MemRL's two phases,
similarity then learned Q) and reports how the task went (`.../feedback`: the Q update of the items it was given).
Interactive API docs at /docs; the guide is docs/serve.md.

Concurrency: requests run in a thread pool; the store's one connection is used under a lock, and texts are embedded
before taking it (the embedder has a lock of its own). The store file itself is safe for several processes, so more
server processes, or local runs, may share it. On a PostgreSQL store (`--store postgresql://…`) the process keeps no
state of its own beyond caches that follow the database (vector index, keys read per request), so replicas on several
machines serve one database behind a load balancer (docs/serve.md). Every write is one transaction, taken only after
the request passed authentication, rate limit, body limit and schema checks, so a refused request writes nothing.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from ttlearn.memory.embed import Embedder, make_embedder
from ttlearn.memory.forgetting import Policy
from ttlearn.memory.items import (
    DEFAULT_JOIN_THRESHOLD,
    MAX_COUNT,
    EmbedderMismatchError,
    MemoryItem,
    Namespace,
    NewItem,
)
from ttlearn.memory.retrieval import DEFAULT_ALPHA, RetrievalConfig, q_update_rule, two_phase_retrieve
from ttlearn.memory.snapshot import MAX_MAGNITUDE, NamespaceSnapshot, export_size, json_text_bytes
from ttlearn.memory.store import MemoryStore, NamespaceExistsError
from ttlearn.serve import (
    DEFAULT_AUTH_BURST,
    DEFAULT_AUTH_RATE,
    DEFAULT_BURST,
    DEFAULT_CONNECTIONS_PER_CLIENT,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_PIPELINED,
    DEFAULT_MAX_UNSENT,
    DEFAULT_MAX_WAITING,
    DEFAULT_QUOTA,
    DEFAULT_RATE,
    DEFAULT_READ_TIMEOUT_S,
    DEFAULT_WRITE_TIMEOUT_S,
    MAX_BATCH,
)
from ttlearn.serve.auth import NAME_PATTERN, AdminKey, KeyRing, NewKey
from ttlearn.serve.bodies import ThreadedBodyRoute, short_validation_error
from ttlearn.serve.connections import ACCEPT_BATCH, guarded_h11
from ttlearn.serve.limits import BodyLimit, LogRateLimit, RateLimiter, release_large_blocks
from ttlearn.version import __version__

_RETRIEVAL = RetrievalConfig()
Finite = Annotated[float, Field(allow_inf_nan=False)]
Value = Annotated[float, Field(allow_inf_nan=False, ge=-MAX_MAGNITUDE, le=MAX_MAGNITUDE)]
"""A number without bounds of its own: bounded all the same, so no score, Q or statistic overflows into a non-JSON
inf (a field's own ge/le would replace these, so bounded fields use Finite and state both ends)."""
NamespaceName = Annotated[str, PathParam(pattern=NAME_PATTERN, description="The namespace (its key opens it).")]


# -- request and response bodies ---------------------------------------------------------------------------------


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PolicyIn(_Request):
    """A namespace's forgetting policy (`memory.forgetting`): applied by every write that adds items, and by prune."""

    ttl_s: Finite | None = Field(
        None,
        gt=0,
        le=MAX_MAGNITUDE,
        description="Items untouched (not written, no Q update) this long go (null: never).",
    )
    capacity: int | None = Field(
        None,
        ge=1,
        le=MAX_COUNT,
        description="Items it holds at most; the lowest Q + 1/√(1+visits) − age/30 d go first.",
    )

    @property
    def policy(self) -> Policy:
        return Policy(self.ttl_s, self.capacity)


class NamespaceCreate(PolicyIn):
    name: str = Field(pattern=NAME_PATTERN, description="1-63 of a-z, 0-9, '_', '-'; starts with a letter or digit.")
    embedder: str = Field("minilm", description="Embeds its texts: minilm (by meaning, 384-d) or hash (shared words).")


class Pruned(BaseModel):
    expired: int = Field(description="Items past the time to live.")
    evicted: int = Field(description="Items over the capacity.")
    intents: int = Field(description="Intent keys left without items.")


class NamespaceKey(BaseModel):
    name: str
    key: str = Field(description="Shown once: the service keeps only its hash.")


class NamespaceInfo(BaseModel):
    name: str
    embedder: str
    items: int
    has_key: bool


class NewMemory(_Request):
    intent: str = Field(min_length=1, max_length=20_000, description="The situation it is about: its retrieval key.")
    experience: str = Field(min_length=1, max_length=500_000, description="What to show an agent in that situation.")
    q: Value = Field(0.0, description="Its starting Q-value (MemRL: 0).")
    run_id: str | None = Field(None, max_length=200)
    episode: int | None = Field(None, description="The attempt that wrote it (provenance).")
    unit: int | None = Field(None, description="The run's task or game, 1-based, that attempt belongs to.")
    exchange: str | None = Field(None, max_length=250, description="The exchange (a conversation) it came from.")


class JoinThreshold(_Request):
    join_threshold: Finite = Field(
        DEFAULT_JOIN_THRESHOLD,
        gt=0,
        le=MAX_MAGNITUDE,
        description="Join an intent key at least this similar (> 1: never join).",
    )


class MemoryIn(NewMemory, JoinThreshold):
    """One experience to write."""


class MemoryBatchIn(JoinThreshold):
    items: list[NewMemory] = Field(min_length=1, max_length=MAX_BATCH, description="Written in one transaction.")


class MemoryAdded(BaseModel):
    id: int
    intent_id: int
    joined: bool


class MemoriesAdded(BaseModel):
    items: list[MemoryAdded]


class RetrieveIn(_Request):
    query: str = Field(min_length=1, max_length=20_000, description="The agent's current situation.")
    k: int = Field(_RETRIEVAL.k2, ge=1, le=100, description="How many items to return (MemRL's k2).")
    k1: int | None = Field(None, ge=1, le=1000, description="Intent keys recalled in phase A (default max(5, k)).")
    delta: Value = Field(_RETRIEVAL.delta, description="Phase A keeps keys with similarity ≥ delta.")
    q_min: Value | None = Field(_RETRIEVAL.q_min, description="Phase B drops items with Q < q_min (null: none).")
    w_sim: Value = _RETRIEVAL.w_sim
    w_q: Value = _RETRIEVAL.w_q
    sim_mean: Value = _RETRIEVAL.sim_mean
    sim_std: Finite = Field(_RETRIEVAL.sim_std, ge=1e-6, le=MAX_MAGNITUDE)
    epsilon: Finite = Field(_RETRIEVAL.epsilon, ge=0, le=1, description="Probability of a random pick (exploration).")
    seed: int | None = Field(None, ge=0, lt=2**63, description="Makes exploration reproducible.")


class RetrievedItem(BaseModel):
    id: int
    intent_id: int
    similarity: float
    q: float
    score: float
    visits: int
    experience: str


class Retrieved(BaseModel):
    items: list[RetrievedItem]
    candidates: int = Field(description="Items that reached phase B.")
    explored: bool = Field(description="True when the items are a random pick (probability epsilon).")


class FeedbackTask(_Request):
    ids: list[int] = Field(
        min_length=1, max_length=1000, fail_fast=True, description="The items retrieved for the finished task."
    )
    reward: Value = Field(description="The task's reward r (MemRL: +1 success, -1 failure).")
    alpha: Finite = Field(DEFAULT_ALPHA, ge=0, le=1, description="Q ← (1 − α)·Q + α·r (MemRL's γ = 0).")


class SkipMissing(_Request):
    skip_missing: bool = Field(
        False, description="Skip ids no longer in the namespace (forgotten since they were shown) instead of refusing."
    )


class FeedbackIn(FeedbackTask, SkipMissing):
    """One task's feedback."""


class FeedbackBatchIn(SkipMissing):
    items: list[FeedbackTask] = Field(
        min_length=1, max_length=MAX_BATCH, description="Tasks' feedback, applied in order in one transaction."
    )


class QValue(BaseModel):
    id: int
    q: float


class FeedbackOut(BaseModel):
    items: list[QValue]


class FeedbackBatchOut(BaseModel):
    items: list[FeedbackOut]


class QStats(BaseModel):
    mean: float
    std: float
    min: float
    max: float


class Inspection(BaseModel):
    name: str
    embedder: str
    dim: int
    items: int
    intents: int
    visited_items: int
    visits: int
    q: QStats | None
    ttl_s: float | None = Field(description="Its forgetting policy's time to live (null: none).")
    capacity: int | None = Field(description="Its forgetting policy's capacity (null: none).")
    newest: list[MemoryItem] = Field(
        description="The newest items (those the filters keep), with their provenance: `limit` of them, fewer past "
        "1 M characters."
    )


INSPECT_TEXT = 1_000_000
"""Characters of experience text an inspection shows at most (past its first item): its reply stays small."""


def within_budget(sizes: list[int], budget: int) -> int:
    """How many of `sizes`, taken in order, fit in `budget` together; always at least one when there is one."""
    total = 0
    for count, size in enumerate(sizes):
        total += size
        if total > budget and count > 0:
            return count
    return len(sizes)


class Imported(BaseModel):
    items: int
    intents: int


# -- the service behind the routes -------------------------------------------------------------------------------


@contextmanager
def _refusals() -> Iterator[None]:
    """The store's ValueErrors are the caller's mistakes: 409 for an embedder clash, else 422."""
    try:
        yield
    except EmbedderMismatchError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None


class MemoryService:
    """The store, the keys and the limits of one server process."""

    def __init__(
        self, store_path: str | Path, admin_key: str, *, rate: float, burst: float, quota: int, auth: RateLimiter
    ) -> None:
        self.store = MemoryStore(store_path)
        self.quota = quota
        self.keys = KeyRing(store_path)
        self.admin = AdminKey(admin_key)
        self.limiter = RateLimiter(rate, burst)
        self.failures = auth
        self._store_lock = threading.Lock()
        self._embed_lock = threading.Lock()
        self._export_lock = threading.Lock()
        self._embedders: dict[str, Embedder] = {}
        self._namespaces: dict[str, Namespace] = {}

    def close(self) -> None:
        with self._store_lock:
            self.store.close()
        self.keys.close()

    def _embedder(self, name: str) -> Embedder:
        if name not in self._embedders:
            self._embedders[name] = make_embedder(name)
        return self._embedders[name]

    def _embed(self, ns: Namespace, text: str) -> np.ndarray:
        with self._embed_lock:
            return ns.embed([text])[0]

    def _open(self, name: str) -> Namespace:
        """The namespace, opened once per process with the embedder that wrote it (call under the store lock)."""
        if name not in self._namespaces:
            embedder = self.store.embedder_of(name)
            if embedder is None:
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"no namespace {name!r}")
            with _refusals():
                self._namespaces[name] = self.store.namespace(name, self._embedder(embedder))
        return self._namespaces[name]

    # admin

    def list_namespaces(self) -> list[NamespaceInfo]:
        with self._store_lock:
            rows = self.store.namespaces()
        return [
            NamespaceInfo(
                name=n["name"], embedder=n["embedder"], items=n["items"], has_key=self.keys.has_key(n["name"])
            )
            for n in rows
        ]

    def create(self, body: NamespaceCreate) -> NamespaceKey:
        """The namespace, its policy and its first key, in one transaction that refuses (409) a name that exists,
        even one another replica is creating at this moment."""
        with _refusals():
            embedder = self._embedder(body.embedder)
        key = NewKey.make()
        with self._store_lock:
            try:
                ns = self.store.create_namespace(
                    body.name, embedder, also=lambda conn: key.store(conn, body.name), policy=body.policy
                )
            except NamespaceExistsError:
                raise HTTPException(
                    status.HTTP_409_CONFLICT, f"namespace {body.name!r} exists; rotate its key to get a new one"
                ) from None
            self._namespaces[body.name] = ns
        return NamespaceKey(name=body.name, key=key.text)

    def rotate(self, name: str) -> NamespaceKey:
        self._require(name)
        return NamespaceKey(name=name, key=self.keys.issue(name))

    def revoke(self, name: str) -> None:
        self._require(name)
        self.keys.revoke(name)

    def set_policy(self, name: str, body: PolicyIn) -> PolicyIn:
        with self._store_lock:
            self._open(name)
            self.store.set_policy(name, body.policy)
        return body

    def prune(self, name: str) -> Pruned:
        with self._store_lock:
            self._open(name)
            forgotten = self.store.prune(name)
        return Pruned(expired=forgotten.expired, evicted=forgotten.evicted, intents=forgotten.intents)

    def _require(self, name: str) -> None:
        with self._store_lock:
            self._open(name)

    # a namespace's own key

    def add(self, name: str, bodies: list[NewMemory], join_threshold: float, key_id: str) -> list[MemoryAdded]:
        """Write `bodies` in one transaction, as key `key_id` (provenance), refusing them all past the quota."""
        with self._store_lock:
            ns = self._open(name)
        with self._embed_lock:
            vectors = ns.embed([body.intent for body in bodies])
        items = [
            NewItem(b.intent, b.experience, b.q, b.run_id, b.episode, v, b.unit, key_id, b.exchange)
            for b, v in zip(bodies, vectors)
        ]
        text = sum(json_text_bytes(b.experience) + json_text_bytes(b.run_id) for b in bodies)
        intents = sum(json_text_bytes(b.intent) for b in bodies)
        growth = export_size(text, len(bodies), intents, len(bodies), ns.embedder.dim)
        admit = (lambda: self._within_quota(name, self.store.usage(name) + growth)) if self.quota else None
        with self._store_lock:  # the quota is checked under the namespace's write lock: it holds across replicas
            added = ns.add_many(items, join_threshold=join_threshold, admit=admit)
        return [MemoryAdded(id=a.item_id, intent_id=a.intent_id, joined=a.joined) for a in added]

    def retrieve(self, name: str, body: RetrieveIn) -> Retrieved:
        with _refusals():
            cfg = RetrievalConfig(
                k1=body.k1 or max(_RETRIEVAL.k1, body.k),
                k2=body.k,
                delta=body.delta,
                q_min=-math.inf if body.q_min is None else body.q_min,
                w_sim=body.w_sim,
                w_q=body.w_q,
                sim_mean=body.sim_mean,
                sim_std=body.sim_std,
                epsilon=body.epsilon,
            )
        with self._store_lock:
            ns = self._open(name)
        vector = self._embed(ns, body.query)
        with self._store_lock:
            candidates, ranked = two_phase_retrieve(ns, vector, cfg, np.random.default_rng(body.seed))
        items = [
            RetrievedItem(
                id=candidates[i].item_id,
                intent_id=candidates[i].intent_id,
                similarity=candidates[i].sim,
                q=candidates[i].q_value,
                score=ranked.scores[i],
                visits=candidates[i].visits,
                experience=candidates[i].experience,
            )
            for i in ranked.chosen
        ]
        return Retrieved(items=items, candidates=len(candidates), explored=ranked.explored)

    def feedback(self, name: str, bodies: list[FeedbackTask], skip_missing: bool) -> list[FeedbackOut]:
        """Each task's Q update, in order, in one transaction: an unknown id refuses them all (422) unless skipped."""
        updates = [(body.ids, body.reward, q_update_rule(body.reward, body.alpha)) for body in bodies]
        with self._store_lock, _refusals():
            written = self._open(name).write(feedback=updates, skip_missing=skip_missing)
        return [FeedbackOut(items=[QValue(id=i, q=v) for i, v in sorted(q.items())]) for q in written.q]

    def inspect(self, name: str, limit: int, filters: dict[str, Any]) -> Inspection:
        with self._store_lock, _refusals():
            stats = self.store.stats(name)
            newest = self.store.inspect(name, limit=limit, **filters)
        return Inspection(**stats, newest=newest[: within_budget([len(m.experience) for m in newest], INSPECT_TEXT)])

    def export(self, name: str) -> JSONResponse:
        """The namespace's snapshot, rendered. Exports are read and rendered one at a time: the memory they take
        while being built does not grow with the number of clients asking at once (once rendered, an answer its
        client does not read is held against the server's budget of unsent bytes, `guarded_h11`)."""
        with self._export_lock:
            with self._store_lock, _refusals():
                data = self.store.export_namespace(name)
            return JSONResponse(data)

    def _within_quota(self, name: str, size: int) -> None:
        """Refuse (507) a write that would make the namespace's export larger than the quota (0: no quota)."""
        if 0 < self.quota < size:
            raise HTTPException(
                status.HTTP_507_INSUFFICIENT_STORAGE,
                f"namespace {name!r} would hold about {size} bytes, over its quota of {self.quota} (ttlearn serve "
                "--quota); export it and import what it should keep, or write to another namespace",
            )

    def restore(self, name: str, snapshot: NamespaceSnapshot) -> Imported:
        items = sum(json_text_bytes(m.experience) + json_text_bytes(m.run_id) for m in snapshot.items)
        intents = sum(json_text_bytes(i.text) for i in snapshot.intents)
        self._within_quota(name, export_size(items, len(snapshot.items), intents, len(snapshot.intents), snapshot.dim))
        with self._store_lock, _refusals():
            self.store.import_namespace(name, snapshot)
        return Imported(items=len(snapshot.items), intents=len(snapshot.intents))


# -- authentication and the routes -------------------------------------------------------------------------------

_bearer = HTTPBearer(auto_error=False, description="A namespace's key; the admin key for /v1/namespaces and keys.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})


def _too_many(wait: float, detail: str) -> HTTPException:
    return HTTPException(
        status.HTTP_429_TOO_MANY_REQUESTS,
        f"{detail}; retry in {wait:.2f} s",
        headers={"Retry-After": str(max(1, math.ceil(wait)))},
    )


def _spend(service: MemoryService, key_id: str) -> None:
    wait = service.limiter.wait_s(key_id)
    if wait > 0:
        raise _too_many(wait, f"over this key's limit of {service.limiter.rate:g} requests/s")


def _address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _not_guessing(service: MemoryService, request: Request) -> None:
    """429, before any key is looked at, while the caller's address has no failed-authentication token left:
    keys cannot be guessed faster than the failure rate (tokens are spent by `_failed`)."""
    wait = service.failures.wait_s(_address(request), take=False)
    if wait > 0:
        raise _too_many(wait, f"too many failed authentications from {_address(request)}")


def _failed(service: MemoryService, request: Request, detail: str) -> HTTPException:
    """A 401 for a wrong key, spending one of the address's failed-authentication tokens."""
    service.failures.wait_s(_address(request))
    return _unauthorized(detail)


def admin_service(request: Request, credentials: Credentials) -> MemoryService:
    service: MemoryService = request.app.state.service
    if credentials is None:
        raise _unauthorized("no key: send the header 'Authorization: Bearer <admin key>'")
    _not_guessing(service, request)
    if not service.admin.matches(credentials.credentials):
        if service.keys.owner(credentials.credentials) is not None:
            raise HTTPException(status.HTTP_403_FORBIDDEN, "a namespace key cannot manage namespaces")
        raise _failed(service, request, "unknown key")
    _spend(service, "admin")
    return service


def namespace_service(ns: NamespaceName, request: Request, credentials: Credentials) -> MemoryService:
    service: MemoryService = request.app.state.service
    if credentials is None:
        raise _unauthorized("no key: send the header 'Authorization: Bearer <namespace key>'")
    _not_guessing(service, request)
    owner = service.keys.owner(credentials.credentials)
    if owner is None:
        raise _failed(service, request, "unknown or revoked key")
    if owner.namespace != ns:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"this key does not open namespace {ns!r}")
    _spend(service, owner.key_id)
    request.state.key_id = owner.key_id  # provenance of what it writes
    return service


Admin = Annotated[MemoryService, Depends(admin_service)]
Owner = Annotated[MemoryService, Depends(namespace_service)]


def create_app(
    store: str | Path,
    *,
    admin_key: str,
    max_body: int = DEFAULT_MAX_BODY,
    rate: float = DEFAULT_RATE,
    burst: float = DEFAULT_BURST,
    quota: int = DEFAULT_QUOTA,
    auth_rate: float = DEFAULT_AUTH_RATE,
    auth_burst: float = DEFAULT_AUTH_BURST,
) -> FastAPI:
    """The service over the store `store`: a SQLite file (created if missing) or a postgresql:// database."""
    failures = RateLimiter(auth_rate, auth_burst)
    service = MemoryService(store, admin_key, rate=rate, burst=burst, quota=quota, auth=failures)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        service.close()

    app = FastAPI(
        title="ttlearn memory service",
        version=__version__,
        description="MemRL memories that deployed agents share: write experiences, retrieve the best ones by "
        "similarity and learned Q, and feed back rewards. One key per namespace (`Authorization: Bearer KEY`).",
        lifespan=lifespan,
    )
    app.state.service = service
    app.router.route_class = ThreadedBodyRoute
    app.add_exception_handler(RequestValidationError, short_validation_error)
    app.add_middleware(BodyLimit, max_bytes=max_body)

    @app.get("/v1/health", tags=["service"])
    def health() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.get("/v1/namespaces", tags=["admin"])
    def list_namespaces(service: Admin) -> list[NamespaceInfo]:
        """Every namespace of the store, with its embedder, item count and whether it has a live key."""
        return service.list_namespaces()

    @app.post("/v1/namespaces", status_code=status.HTTP_201_CREATED, tags=["admin"])
    def create_namespace(body: NamespaceCreate, service: Admin) -> NamespaceKey:
        """Create a namespace and its first key (shown only in this answer)."""
        return service.create(body)

    @app.post("/v1/namespaces/{ns}/key", tags=["admin"])
    def rotate_key(ns: NamespaceName, service: Admin) -> NamespaceKey:
        """Issue a new key for the namespace; its older keys stop working at once."""
        return service.rotate(ns)

    @app.delete("/v1/namespaces/{ns}/key", status_code=status.HTTP_204_NO_CONTENT, tags=["admin"])
    def revoke_key(ns: NamespaceName, service: Admin) -> None:
        """Revoke every key of the namespace (its memories stay; rotate to get a key again)."""
        service.revoke(ns)

    @app.put("/v1/namespaces/{ns}/policy", tags=["admin"])
    def set_policy(ns: NamespaceName, body: PolicyIn, service: Admin) -> PolicyIn:
        """Set the namespace's forgetting policy (null: no limit); the next write that adds items, or prune, applies
        it."""
        return service.set_policy(ns, body)

    @app.post("/v1/namespaces/{ns}/prune", tags=["admin"])
    def prune(ns: NamespaceName, service: Admin) -> Pruned:
        """Apply the namespace's forgetting policy now, in one transaction, and drop the intent keys left empty."""
        return service.prune(ns)

    @app.post("/v1/namespaces/{ns}/memories", status_code=status.HTTP_201_CREATED, tags=["memories"])
    def add_memory(ns: NamespaceName, body: MemoryIn, service: Owner, request: Request) -> MemoryAdded:
        """Write one experience under its intent (it joins an existing intent key when similar enough); 507 when the
        namespace is full (its quota). The key that wrote it is recorded with it."""
        return service.add(ns, [body], body.join_threshold, request.state.key_id)[0]

    @app.post("/v1/namespaces/{ns}/memories/batch", status_code=status.HTTP_201_CREATED, tags=["memories"])
    def add_memories(ns: NamespaceName, body: MemoryBatchIn, service: Owner, request: Request) -> MemoriesAdded:
        """Write up to 1000 experiences in one transaction: all or none (507 when they would not all fit)."""
        return MemoriesAdded(items=service.add(ns, body.items, body.join_threshold, request.state.key_id))

    @app.post("/v1/namespaces/{ns}/retrieve", tags=["memories"])
    def retrieve(ns: NamespaceName, body: RetrieveIn, service: Owner) -> Retrieved:
        """MemRL's two phases: recall the k1 intent keys most similar to the query (≥ delta), then rank their items
        by standardised similarity and Q (items with Q < q_min dropped) and return the best k."""
        return service.retrieve(ns, body)

    @app.post("/v1/namespaces/{ns}/feedback", tags=["memories"])
    def feedback(ns: NamespaceName, body: FeedbackIn, service: Owner) -> FeedbackOut:
        """After a task: update the Q of every item retrieved for it with the task's reward (all or none)."""
        return service.feedback(ns, [body], body.skip_missing)[0]

    @app.post("/v1/namespaces/{ns}/feedback/batch", tags=["memories"])
    def feedback_batch(ns: NamespaceName, body: FeedbackBatchIn, service: Owner) -> FeedbackBatchOut:
        """Up to 1000 tasks' feedback, applied in order in one transaction: all or none."""
        return FeedbackBatchOut(items=service.feedback(ns, body.items, body.skip_missing))

    @app.get("/v1/namespaces/{ns}/inspect", tags=["memories"])
    def inspect(
        ns: NamespaceName,
        service: Owner,
        limit: Annotated[int, Query(ge=0, le=100)] = 10,
        run_id: Annotated[str | None, Query(max_length=200)] = None,
        unit: Annotated[int | None, Query(ge=-MAX_COUNT, le=MAX_COUNT)] = None,
        key: Annotated[str | None, Query(max_length=100, description="A key's id (before its dot).")] = None,
        exchange: Annotated[str | None, Query(max_length=250)] = None,
        since: Annotated[float | None, Query(ge=0, le=MAX_MAGNITUDE, description="Written at or after (Unix).")] = None,
        until: Annotated[float | None, Query(ge=0, le=MAX_MAGNITUDE, description="Written before (Unix).")] = None,
    ) -> Inspection:
        """Counts, Q statistics, the forgetting policy and the newest `limit` items with their provenance (at most
        100, and fewer past 1 M characters of text), only those the filters keep."""
        filters = {"run_id": run_id, "unit": unit, "key_id": key, "exchange": exchange, "since": since, "until": until}
        return service.inspect(ns, limit, filters)

    @app.get("/v1/namespaces/{ns}/export", tags=["memories"], response_model=NamespaceSnapshot)
    def export(ns: NamespaceName, service: Owner) -> JSONResponse:
        """The namespace's memories (intent keys with their vectors, items with Q): a snapshot to import later."""
        return service.export(ns)

    @app.post("/v1/namespaces/{ns}/import", tags=["memories"])
    def restore(ns: NamespaceName, body: NamespaceSnapshot, service: Owner) -> Imported:
        """Replace the namespace's memories by a snapshot from export (same embedder), in one transaction; 507 when
        it is over the namespace quota."""
        return service.restore(ns, body)

    return app


def serve(
    store: str | Path,
    *,
    host: str,
    port: int,
    admin_key: str,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    write_timeout_s: float = DEFAULT_WRITE_TIMEOUT_S,
    max_pipelined: int = DEFAULT_MAX_PIPELINED,
    per_client: int = DEFAULT_CONNECTIONS_PER_CLIENT,
    max_waiting: int = DEFAULT_MAX_WAITING,
    max_unsent: int = DEFAULT_MAX_UNSENT,
    trusted_proxy: str | None = None,
    make_app: Callable[..., FastAPI] | None = None,
    **limits: Any,
) -> None:
    """Serve until SIGINT or SIGTERM; uvicorn then finishes the requests in flight and the store closes cleanly.
    Connections are guarded by `guarded_h11` (the timeouts, the read-ahead, the two connection caps and the budget
    of unsent answers); `limits` go
    to `create_app`. The error log (uvicorn's and asyncio's) is rate-limited (`LogRateLimit`).
    Proxy headers (X-Forwarded-For) are ignored unless `trusted_proxy` names the proxy's address(es): uvicorn would
    otherwise believe them from loopback, and one header per request would dodge the per-address limits.
    `make_app` builds the app in place of `create_app` (the learning proxy's, `serve/proxy.py`).

    uvicorn hands a signal it stopped on back to the handler it found, so a clean exit there makes a requested stop
    end with status 0 (call from the main thread).
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _exit_cleanly)
    release_large_blocks()
    app = (make_app or create_app)(store, admin_key=admin_key, **limits)  # max_body, rate, burst, quota, auth_…
    http = guarded_h11(read_timeout_s, per_client, max_waiting, write_timeout_s, max_pipelined, max_unsent)
    proxy = {"proxy_headers": trusted_proxy is not None, "forwarded_allow_ips": trusted_proxy or ""}
    config = uvicorn.Config(
        app, host=host, port=port, http=http, backlog=ACCEPT_BATCH, timeout_graceful_shutdown=30, **proxy
    )
    quiet = LogRateLimit()  # after uvicorn.Config, which configures the loggers
    for name in ("asyncio", "uvicorn.error"):
        logging.getLogger(name).addFilter(quiet)
    uvicorn.Server(config).run()


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)
