"""What production memory users ask for, through a real `ttlearn serve` on loopback and both clients, on SQLite and
on PostgreSQL: batch writes and batch feedback (each one transaction, bounded), the forgetting policy and prune,
provenance with its filters, and `AsyncMemoryClient` answering as `MemoryClient` does."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

pytest.importorskip("fastapi")
import uvicorn  # noqa: E402

from ttlearn.llm.local_server import free_port  # noqa: E402
from ttlearn.memory.remote import AsyncMemoryClient, MemoryClient, MemoryServiceError  # noqa: E402
from ttlearn.serve import MAX_BATCH  # noqa: E402
from ttlearn.serve.app import create_app  # noqa: E402

ADMIN = "admin-key-for-tests-0123456789abcdefghijkl"
ITEM_BYTES = 500 + 256 + 1 + 1368 + 96
"""What the quota counts for one item (`snapshot.export_size`): a 500-byte experience, the item record, a 1-character
intent, the base64 of its 256 float32 and the intent record."""


@pytest.fixture
def store(store_location: str) -> str:
    return store_location


@contextmanager
def serving(store: str, **limits) -> Iterator[str]:
    """The service on a free loopback port, in a thread; yields its URL."""
    port = free_port()
    app = create_app(store, admin_key=ADMIN, rate=0, auth_rate=0, **limits)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the service did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def memory(intent: str, size: int = 10, **fields) -> dict:
    return {"intent": intent, "experience": "x" * size, **fields}


def test_a_batch_write_is_one_transaction_bounded_in_count_bytes_and_quota(store: str) -> None:
    with serving(store, quota=4 * ITEM_BYTES, max_body=100_000) as url:
        with MemoryClient(url, ADMIN) as admin:
            key = admin.create_namespace("team", embedder="hash")
        with MemoryClient(url, key) as client:
            five = [memory(str(i), 500) for i in range(5)]
            with pytest.raises(MemoryServiceError, match="over its quota") as full:
                client.add_batch("team", five, join_threshold=2.0)  # four would fit: none is written
            assert full.value.status_code == 507 and client.inspect("team")["items"] == 0
            added = client.add_batch("team", five[:4], join_threshold=2.0)
            assert [a["joined"] for a in added] == [False] * 4 and client.inspect("team")["items"] == 4
            with pytest.raises(MemoryServiceError) as too_many:
                client.add_batch("team", [memory("a")] * (MAX_BATCH + 1))
            assert too_many.value.status_code == 422
            with pytest.raises(MemoryServiceError) as too_large:
                client.add_batch("team", [memory("a", 60_000), memory("b", 60_000)])
            assert too_large.value.status_code == 413 and client.inspect("team")["items"] == 4


def test_batch_feedback_is_all_or_nothing(store: str) -> None:
    with serving(store) as url:
        with MemoryClient(url, ADMIN) as admin:
            key = admin.create_namespace("team", embedder="hash")
        with MemoryClient(url, key) as client:
            a, b = (item["id"] for item in client.add_batch("team", [memory("rock"), memory("paper")]))
            tasks = [{"ids": [a], "reward": 1.0, "alpha": 0.5}, {"ids": [b, 10**9], "reward": -1.0, "alpha": 0.5}]
            with pytest.raises(MemoryServiceError, match=r"items \[1000000000\] are not in namespace") as refused:
                client.feedback_batch("team", tasks)
            assert refused.value.status_code == 422
            assert {m["id"]: m["q_value"] for m in client.inspect("team")["newest"]} == {a: 0.0, b: 0.0}
            assert client.feedback_batch("team", tasks, skip_missing=True) == [{a: 0.5}, {b: -0.5}]
            assert client.feedback("team", [a], 1.0, alpha=0.5) == {a: 0.75}


def test_forgetting_policy_set_by_the_admin_applies_on_write_and_prune(store: str) -> None:
    with serving(store) as url, MemoryClient(url, ADMIN) as admin:
        key = admin.create_namespace("team", embedder="hash", capacity=2)
        with MemoryClient(url, key) as client:
            rock, paper = (item["id"] for item in client.add_batch("team", [memory("rock"), memory("paper")]))
            client.feedback("team", [rock], -1.0)  # Q −0.3 after one visit: the lowest keep
            client.add("team", "scissors", "x", join_threshold=2.0)
            seen = client.inspect("team")
            assert (seen["items"], seen["capacity"], seen["ttl_s"]) == (2, 2, None)
            assert rock not in {m["id"] for m in seen["newest"]} and paper in {m["id"] for m in seen["newest"]}
            with pytest.raises(MemoryServiceError) as not_admin:
                client.prune("team")
            assert not_admin.value.status_code == 403
        assert admin.set_policy("team", ttl_s=1e-3) == {"ttl_s": 1e-3, "capacity": None}
        time.sleep(0.01)
        assert admin.prune("team") == {"expired": 2, "evicted": 0, "intents": 3}
        with pytest.raises(MemoryServiceError) as bad:
            admin.set_policy("team", capacity=0)
        assert bad.value.status_code == 422


def test_items_record_the_key_that_wrote_them_and_inspect_filters_on_provenance(store: str) -> None:
    with serving(store) as url:
        with MemoryClient(url, ADMIN) as admin:
            key = admin.create_namespace("team", embedder="hash")
            rotated = admin.rotate_key("team")
        with MemoryClient(url, rotated) as client:
            first = client.add("team", "rock", "a", run_id="r1", unit=1, exchange="x1")["id"]
            second = client.add_batch("team", [memory("paper", run_id="r2", unit=2)])[0]["id"]
            newest = client.inspect("team")["newest"]
            key_id = rotated.split(".")[0]
            assert [(m["id"], m["key_id"], m["exchange"], m["run_id"]) for m in newest] == [
                (second, key_id, None, "r2"),
                (first, key_id, "x1", "r1"),
            ]  # the key that wrote them, which the client cannot choose
            assert key.split(".")[0] != key_id

            def ids(**filters) -> list[int]:
                return [m["id"] for m in client.inspect("team", **filters)["newest"]]

            assert ids(exchange="x1") == [first] and ids(unit=2) == [second] and ids(run_id="r2") == [second]
            assert ids(key=key_id) == [second, first] and ids(key=key.split(".")[0]) == []
            assert ids(since=newest[0]["created"]) == [second] and ids(until=newest[0]["created"]) == [first]
            with pytest.raises(ValueError, match="inspect filters by"):
                client.inspect("team", owner="me")


def test_the_async_client_answers_as_the_sync_one(store: str) -> None:
    with serving(store) as url:
        with MemoryClient(url, ADMIN) as admin:
            key = admin.create_namespace("team", embedder="hash")

        async def use() -> tuple:
            async with AsyncMemoryClient(url, key) as client:
                one = await client.add("team", "rock paper scissors", "play paper", join_threshold=2.0)
                batch = await client.add_batch("team", [memory("count the singers")], join_threshold=2.0)
                found = await client.retrieve("team", "rock paper scissors", k=1, delta=0.0, epsilon=0.0)
                q = await client.feedback_batch("team", [{"ids": [one["id"]], "reward": 1.0, "alpha": 0.5}])
                seen = await client.inspect("team", limit=5)
                try:
                    await client.inspect("nope")
                except MemoryServiceError as exc:
                    refused = exc.status_code
                return one, batch, found, q, seen, refused

        one, batch, found, q, seen, refused = asyncio.run(use())
        assert [item["id"] for item in found["items"]] == [one["id"]]
        assert q == [{one["id"]: 0.5}] and refused == 403
        with MemoryClient(url, key) as client:
            assert client.inspect("team", limit=5) == seen
            assert [m["id"] for m in seen["newest"]] == [batch[0]["id"], one["id"]]
