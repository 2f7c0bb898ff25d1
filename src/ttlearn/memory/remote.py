"""The client side of `ttlearn serve`: `MemoryClient` (and `AsyncMemoryClient`, the same calls for asyncio) for any
Python program, `RemoteMemories` for the MemRL memories.

Each call is built once (`_MemoryAPI`: its path, body and how its answer is read); the sync client sends it on an
`httpx.Client`, the async one on an `httpx.AsyncClient`. Each keeps one HTTP connection pool (httpx2, the successor
of httpx) and turns every refusal into a `MemoryServiceError` that says what the service answered. Connection
attempts are retried (a request that never reached the server is safe to send again); a request that reached it is
not, so a write is never applied twice.

With `-m url=http://HOST:PORT` and the key in TTLEARN_MEMORY_KEY (or `-m key=KEY`, which the CLI moves there: a
run never records it) the `memrl`, `memp` and `rag` memories keep their memories in a namespace of the service
(`-m namespace=NAME`, default "default"), shared with every run, trial and agent holding its key.
"""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ttlearn.memory.backends import MemoryBackend, TaskReward
from ttlearn.memory.base import MEMORY_KEY_ENV
from ttlearn.memory.items import Candidate, NewItem
from ttlearn.memory.retrieval import RetrievalConfig

try:
    import httpx2 as httpx
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(f"the memory service client needs httpx2 ({exc}): pip install 'ttlearn[serve]'") from exc


class MemoryServiceError(ValueError):
    """The memory service refused a request, or could not be reached."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass(frozen=True)
class Call:
    """One request to the service and how its answer is read: what both clients send, built once."""

    method: str
    path: str
    body: Any = None
    params: dict[str, Any] | None = None
    read: Callable[[Any], Any] = lambda answer: answer


def _checked(call: Call, response: httpx.Response) -> Any:
    """The answer to `call`, read; a MemoryServiceError that says what the service answered when it refused."""
    if response.is_success:
        return call.read(response.json() if response.content else None)
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    retry = response.headers.get("Retry-After")
    hint = f" (retry after {retry} s)" if retry else ""
    raise MemoryServiceError(
        f"{call.method} {call.path} → {response.status_code}: {detail}{hint}", status_code=response.status_code
    )


def _unreachable(call: Call, url: str, exc: Exception) -> MemoryServiceError:
    return MemoryServiceError(f"{call.method} {url}{call.path} failed ({exc!r}); is the service running?")


def _q_by_id(answer: dict[str, Any]) -> dict[int, float]:
    return {item["id"]: item["q"] for item in answer["items"]}


INSPECT_FILTERS = {"run_id", "unit", "key", "exchange", "since", "until"}


def _inspect_params(limit: int, filters: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(filters) - INSPECT_FILTERS)
    if unknown:
        raise ValueError(f"inspect filters by {', '.join(sorted(INSPECT_FILTERS))}, not {', '.join(unknown)}")
    return {"limit": limit, **{name: value for name, value in filters.items() if value is not None}}


class _MemoryAPI(ABC):
    """The service's calls, each built once as a `Call`; `_send` runs it (the sync client returns the answer, the
    async one an awaitable of it)."""

    url: str

    @abstractmethod
    def _send(self, call: Call) -> Any: ...

    # -- any caller

    def health(self) -> Any:
        return self._send(Call("GET", "/v1/health"))

    # -- with the admin key

    def namespaces(self) -> Any:
        return self._send(Call("GET", "/v1/namespaces"))

    def create_namespace(
        self, name: str, embedder: str = "minilm", *, ttl_s: float | None = None, capacity: int | None = None
    ) -> Any:
        """Create a namespace (with its forgetting policy, if given); returns its key (shown only this once)."""
        policy = {field: value for field, value in (("ttl_s", ttl_s), ("capacity", capacity)) if value is not None}
        body = {"name": name, "embedder": embedder, **policy}  # without a policy, what services before it accept
        return self._send(Call("POST", "/v1/namespaces", body, read=lambda answer: answer["key"]))

    def rotate_key(self, namespace: str) -> Any:
        return self._send(Call("POST", f"/v1/namespaces/{namespace}/key", read=lambda answer: answer["key"]))

    def revoke_key(self, namespace: str) -> Any:
        return self._send(Call("DELETE", f"/v1/namespaces/{namespace}/key"))

    def set_policy(self, namespace: str, *, ttl_s: float | None = None, capacity: int | None = None) -> Any:
        """The namespace's forgetting policy: a time to live in seconds and a capacity in items (None: no limit)."""
        return self._send(Call("PUT", f"/v1/namespaces/{namespace}/policy", {"ttl_s": ttl_s, "capacity": capacity}))

    def prune(self, namespace: str) -> Any:
        """Apply the namespace's forgetting policy now; returns how many items expired, were evicted, and intent keys
        went with them."""
        return self._send(Call("POST", f"/v1/namespaces/{namespace}/prune"))

    # -- with the namespace's key

    def add(self, namespace: str, intent: str, experience: str, **fields: Any) -> Any:
        """Write one experience; `fields`: q, run_id, episode (the attempt), unit, exchange, join_threshold. Returns
        id, intent_id, joined."""
        body = {"intent": intent, "experience": experience, **fields}
        return self._send(Call("POST", f"/v1/namespaces/{namespace}/memories", body))

    def add_batch(self, namespace: str, items: Sequence[dict[str, Any]], **options: Any) -> Any:
        """Write several experiences in one transaction (all or none); each item: intent, experience and `add`'s
        fields but join_threshold, which `options` gives for the batch. Returns id, intent_id, joined per item."""
        body = {"items": list(items), **options}
        return self._send(
            Call("POST", f"/v1/namespaces/{namespace}/memories/batch", body, read=lambda answer: answer["items"])
        )

    def retrieve(self, namespace: str, query: str, k: int = 3, **options: Any) -> Any:
        """MemRL's two-phase retrieval; `options`: k1, delta, q_min, w_sim, w_q, sim_mean, sim_std, epsilon, seed."""
        return self._send(Call("POST", f"/v1/namespaces/{namespace}/retrieve", {"query": query, "k": k, **options}))

    def feedback(self, namespace: str, ids: Sequence[int], reward: float, **options: Any) -> Any:
        """Update the Q of the items retrieved for a finished task; `options`: alpha, skip_missing (skip ids no longer
        in the namespace instead of refusing). Returns Q by id."""
        body = {"ids": list(ids), "reward": reward, **options}
        return self._send(Call("POST", f"/v1/namespaces/{namespace}/feedback", body, read=_q_by_id))

    def feedback_batch(self, namespace: str, tasks: Sequence[dict[str, Any]], **options: Any) -> Any:
        """Several tasks' feedback in one transaction (all or none, in order); each task: ids, reward and alpha as
        `feedback` takes them; `options`: skip_missing. Returns Q by id per task."""
        return self._send(
            Call(
                "POST",
                f"/v1/namespaces/{namespace}/feedback/batch",
                {"items": list(tasks), **options},
                read=lambda answer: [_q_by_id(task) for task in answer["items"]],
            )
        )

    def inspect(self, namespace: str, limit: int = 10, **filters: Any) -> Any:
        """Counts, Q statistics, the policy and the newest `limit` items with their provenance; `filters`: run_id,
        unit, key (the key id, before the dot), exchange, since and until (Unix times)."""
        params = _inspect_params(limit, filters)
        return self._send(Call("GET", f"/v1/namespaces/{namespace}/inspect", params=params))

    def export_namespace(self, namespace: str) -> Any:
        return self._send(Call("GET", f"/v1/namespaces/{namespace}/export"))

    def import_namespace(self, namespace: str, snapshot: dict[str, Any]) -> Any:
        """Replace the namespace's memories by a snapshot (from this client's or the store's `export_namespace`)."""
        return self._send(Call("POST", f"/v1/namespaces/{namespace}/import", snapshot))


def _client_options(url: str, key: str, timeout_s: float) -> dict[str, Any]:
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"a memory service url starts with http:// or https://, got {url!r}")
    return {"base_url": url.rstrip("/"), "headers": {"Authorization": f"Bearer {key}"}, "timeout": timeout_s}


class MemoryClient(_MemoryAPI):
    """A connection to a memory service with one key (a namespace's key, or the admin key for the admin calls);
    every call returns the service's answer."""

    def __init__(self, url: str, key: str, *, timeout_s: float = 30.0, connect_retries: int = 2) -> None:
        options = _client_options(url, key, timeout_s)
        self.url = options["base_url"]
        self._http = httpx.Client(**options, transport=httpx.HTTPTransport(retries=connect_retries))

    def _send(self, call: Call) -> Any:
        try:
            response = self._http.request(call.method, call.path, json=call.body, params=call.params)
        except httpx.HTTPError as exc:
            raise _unreachable(call, self.url, exc) from None
        return _checked(call, response)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncMemoryClient(_MemoryAPI):
    """`MemoryClient` for asyncio programs: the same calls, each returning an awaitable of the same answer, on one
    `httpx.AsyncClient` (use it inside one event loop; `async with` closes it)."""

    def __init__(self, url: str, key: str, *, timeout_s: float = 30.0, connect_retries: int = 2) -> None:
        options = _client_options(url, key, timeout_s)
        self.url = options["base_url"]
        self._http = httpx.AsyncClient(**options, transport=httpx.AsyncHTTPTransport(retries=connect_retries))

    async def _send(self, call: Call) -> Any:
        try:
            response = await self._http.request(call.method, call.path, json=call.body, params=call.params)
        except httpx.HTTPError as exc:
            raise _unreachable(call, self.url, exc) from None
        return _checked(call, response)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncMemoryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class RemoteMemories(MemoryBackend):
    """The MemRL memories in a namespace of a memory service (what `MemRLMemory` uses with `url=`)."""

    def __init__(self, url: str, key: str | None, namespace: str, embedder: str) -> None:
        key = key or os.environ.get(MEMORY_KEY_ENV)
        if not key:
            raise ValueError(f"a memory on a service needs its namespace's key: -m key=KEY, or set {MEMORY_KEY_ENV}")
        self.client = MemoryClient(url, key)
        self.namespace = namespace
        self.embedder = embedder
        self._checked = False

    def bind_run(self, store: Path) -> None:
        """Nothing to place: the memories live in the service."""

    def _check_embedder(self) -> None:
        """Refuse, on first use, a namespace that embeds with another embedder than this memory was configured with."""
        if not self._checked:
            served = self.client.inspect(self.namespace, limit=0)["embedder"]
            if served != self.embedder:
                raise ValueError(
                    f"namespace {self.namespace!r} of {self.client.url} embeds with {served!r}, not {self.embedder!r}; "
                    f"pass -m embedder={served}"
                )
            self._checked = True

    def retrieve(
        self, query: str, cfg: RetrievalConfig, rng: np.random.Generator, run_id: str | None
    ) -> list[Candidate]:
        """The service's two-phase retrieval with this memory's settings; exploration draws its seed from `rng`."""
        self._check_embedder()
        answer = self.client.retrieve(
            self.namespace,
            query,
            k=cfg.k2,
            k1=cfg.k1,
            delta=cfg.delta,
            q_min=None if math.isinf(cfg.q_min) else cfg.q_min,
            w_sim=cfg.w_sim,
            w_q=cfg.w_q,
            sim_mean=cfg.sim_mean,
            sim_std=cfg.sim_std,
            epsilon=cfg.epsilon,
            seed=int(rng.integers(2**63)) if cfg.epsilon > 0 else None,
        )
        return [
            Candidate(i["id"], i["intent_id"], i["similarity"], i["q"], i["visits"], i["experience"])
            for i in answer["items"]
        ]

    def apply(
        self, feedback: Sequence[TaskReward], alpha: float, items: Sequence[NewItem], join_threshold: float
    ) -> None:
        """Two transactions of the service, each all or nothing: the Q updates (`feedback_batch`), then the new items
        (`add_batch`; the service records its key as theirs)."""
        tasks = [{"ids": list(ids), "reward": reward, "alpha": alpha} for ids, reward in feedback if ids]
        if tasks:
            self.client.feedback_batch(self.namespace, tasks, skip_missing=True)
        if items:
            self._check_embedder()
            fields = [
                {"intent": item.intent, "experience": item.experience, "q": item.q_value, "run_id": item.run_id,
                 "episode": item.episode, "unit": item.unit, "exchange": item.exchange}
                for item in items
            ]  # fmt: skip
            self.client.add_batch(self.namespace, fields, join_threshold=join_threshold)

    def finish_episode(self, attempt: int, unit: int | None) -> None:
        """Nothing to do: the service does not log retrievals."""

    def state(self) -> dict[str, Any]:
        """Where the memories are (never the key): they are shared, so a snapshot does not copy them."""
        return {"url": self.client.url, "namespace": self.namespace}

    def load(self, state: dict[str, Any]) -> dict[int, int]:
        """Leave the shared namespace as it is; returns no id changes."""
        if "url" not in state:
            raise ValueError(
                "this MemRL state holds the memories of a local store; a memory on a service never overwrites its "
                "shared namespace with them. Copy them explicitly with MemoryClient.import_namespace "
                "(POST /v1/namespaces/NAME/import), or load the state into a memory without url="
            )
        return {}
