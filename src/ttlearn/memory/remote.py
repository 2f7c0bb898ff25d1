"""The client side of `ttlearn serve`: `MemoryClient` for any Python program, `RemoteMemories` for the MemRL memories.

`MemoryClient` keeps one HTTP connection pool (httpx2, the successor of httpx) and turns every refusal into a
`MemoryServiceError` that says what the service answered. Connection attempts are retried (a request that never
reached the server is safe to send again); a request that reached it is not, so a write is never applied twice.

With `-m url=http://HOST:PORT` and the key in TTLEARN_MEMORY_KEY (or `-m key=KEY`, which the CLI moves there: a
run never records it) the `memrl`, `memp` and `rag` memories keep their memories in a namespace of the service
(`-m namespace=NAME`, default "default"), shared with every run, trial and agent holding its key.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ttlearn.memory.backends import MemoryBackend
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


class MemoryClient:
    """A connection to a memory service with one key (a namespace's key, or the admin key for the admin calls)."""

    def __init__(self, url: str, key: str, *, timeout_s: float = 30.0, connect_retries: int = 2) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"a memory service url starts with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout_s,
            transport=httpx.HTTPTransport(retries=connect_retries),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        try:
            response = self._http.request(method, path, json=body, params=params)
        except httpx.HTTPError as exc:
            raise MemoryServiceError(f"{method} {self.url}{path} failed ({exc!r}); is the service running?") from None
        if response.is_success:
            return response.json() if response.content else None
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        retry = response.headers.get("Retry-After")
        hint = f" (retry after {retry} s)" if retry else ""
        raise MemoryServiceError(
            f"{method} {path} → {response.status_code}: {detail}{hint}", status_code=response.status_code
        )

    # -- any caller

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/v1/health")

    # -- with the admin key

    def namespaces(self) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/namespaces")

    def create_namespace(self, name: str, embedder: str = "minilm") -> str:
        """Create a namespace; returns its key (the service shows it only this once)."""
        return self._call("POST", "/v1/namespaces", {"name": name, "embedder": embedder})["key"]

    def rotate_key(self, namespace: str) -> str:
        return self._call("POST", f"/v1/namespaces/{namespace}/key")["key"]

    def revoke_key(self, namespace: str) -> None:
        self._call("DELETE", f"/v1/namespaces/{namespace}/key")

    # -- with the namespace's key

    def add(self, namespace: str, intent: str, experience: str, **fields: Any) -> dict[str, Any]:
        """Write one experience; `fields`: q, run_id, episode (the attempt), unit, join_threshold. Returns id,
        intent_id, joined."""
        body = {"intent": intent, "experience": experience, **fields}
        return self._call("POST", f"/v1/namespaces/{namespace}/memories", body)

    def retrieve(self, namespace: str, query: str, k: int = 3, **options: Any) -> dict[str, Any]:
        """MemRL's two-phase retrieval; `options`: k1, delta, q_min, w_sim, w_q, sim_mean, sim_std, epsilon, seed."""
        return self._call("POST", f"/v1/namespaces/{namespace}/retrieve", {"query": query, "k": k, **options})

    def feedback(self, namespace: str, ids: Sequence[int], reward: float, **options: Any) -> dict[int, float]:
        """Update the Q of the items retrieved for a finished task; `options`: alpha. Returns Q by id."""
        body = {"ids": list(ids), "reward": reward, **options}
        answer = self._call("POST", f"/v1/namespaces/{namespace}/feedback", body)
        return {item["id"]: item["q"] for item in answer["items"]}

    def inspect(self, namespace: str, limit: int = 10) -> dict[str, Any]:
        return self._call("GET", f"/v1/namespaces/{namespace}/inspect", params={"limit": limit})

    def export_namespace(self, namespace: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/namespaces/{namespace}/export")

    def import_namespace(self, namespace: str, snapshot: dict[str, Any]) -> dict[str, Any]:
        """Replace the namespace's memories by a snapshot (from this client's or the store's `export_namespace`)."""
        return self._call("POST", f"/v1/namespaces/{namespace}/import", snapshot)


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

    def reinforce(self, item_ids: Sequence[int], reward: float, alpha: float) -> None:
        self.client.feedback(self.namespace, item_ids, reward, alpha=alpha)

    def add(self, item: NewItem, join_threshold: float) -> None:
        self._check_embedder()
        self.client.add(
            self.namespace,
            item.intent,
            item.experience,
            q=item.q_value,
            run_id=item.run_id,
            episode=item.episode,
            unit=item.unit,
            join_threshold=join_threshold,
        )

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
