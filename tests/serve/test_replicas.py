"""Several service replicas on one store: a quota that holds across them, and replicas that ride out a restart of
their PostgreSQL. Each replica is the service's ASGI app with its own store connection, driven in process."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from ttlearn.memory.retrieval import commit_order  # noqa: E402
from ttlearn.memory.store import MemoryStore  # noqa: E402
from ttlearn.serve.app import create_app  # noqa: E402

ADMIN = "admin-key-for-tests-0123456789abcdefghijkl"
ITEM_BYTES = 500 + 256 + 1 + 1368 + 96
"""What the quota counts for one item (`snapshot.export_size`): a 500-byte experience, the item record, a 1-character
intent, the base64 of its 256 float32 (4·⌈4·256/3⌉) and the intent record."""


@contextmanager
def replicas(store: str, count: int, **limits) -> Iterator[list[TestClient]]:
    clients = [TestClient(create_app(store, admin_key=ADMIN, rate=0, auth_rate=0, **limits)) for _ in range(count)]
    for client in clients:
        client.__enter__()
    try:
        yield clients
    finally:
        for client in clients:
            client.__exit__(None, None, None)


def call(client: TestClient, path: str, key: str, body: dict) -> tuple[int, dict]:
    response = client.post(path, json=body, headers={"Authorization": f"Bearer {key}"})
    return response.status_code, response.json()


def create(client: TestClient, name: str) -> str:
    """A new namespace (hash embedder); its key, which every replica of the store accepts."""
    return call(client, "/v1/namespaces", ADMIN, {"name": name, "embedder": "hash"})[1]["key"]


def add(client: TestClient, key: str, name: str, intent: str, experience: str) -> tuple[int, dict]:
    return call(client, f"/v1/namespaces/{name}/memories", key, {"intent": intent, "experience": experience})


@contextmanager
def namespace_write_lock(store: str, name: str) -> Iterator[None]:
    """Hold namespace `name`'s write lock from outside, as a replica's transaction would."""
    if store.startswith("postgresql://"):
        import psycopg

        from ttlearn.memory.postgres import _INTENT_LOCK_CLASS

        with psycopg.connect(store, autocommit=True) as pg:
            (ns_id,) = pg.execute("SELECT id FROM namespaces WHERE name = %s", (name,)).fetchone()
            pg.execute("SELECT pg_advisory_lock(%s, %s)", (_INTENT_LOCK_CLASS, ns_id))
            yield
            pg.execute("SELECT pg_advisory_unlock(%s, %s)", (_INTENT_LOCK_CLASS, ns_id))
    else:
        conn = sqlite3.connect(store, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        yield
        conn.execute("ROLLBACK")
        conn.close()


@pytest.fixture
def store(store_location: str) -> str:
    return store_location


def test_a_quota_holds_across_replicas(store: str) -> None:
    """Two replicas each take a write that fits alone but not together, while the namespace's writers wait: the
    quota is checked under the namespace's write lock, so exactly one is written (checked before it, both were)."""
    quota = 3 * ITEM_BYTES + 300
    with replicas(store, 2, quota=quota) as (a, b):
        key = create(a, "q")
        for i in range(2):
            assert add(a, key, "q", f"{i}", "x" * 500)[0] == 201
        with ThreadPoolExecutor(2) as pool:
            with namespace_write_lock(store, "q"):
                racing = [pool.submit(add, replica, key, "q", f"{n}", "y" * 500) for n, replica in ((2, a), (3, b))]
                time.sleep(1.5)  # both requests reach the lock
            statuses = sorted(future.result()[0] for future in racing)
    assert statuses == [201, 507]
    with MemoryStore(store) as check:
        assert check.usage("q") == 3 * ITEM_BYTES <= quota


@contextmanager
def namespaces_write_lock(store: str) -> Iterator[None]:
    """Hold back every namespace creation from outside (reads go on), as a replica's transaction would."""
    if store.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(store) as pg:  # one transaction until the block ends
            pg.execute("LOCK TABLE namespaces IN EXCLUSIVE MODE")
            yield
            pg.rollback()
    else:
        conn = sqlite3.connect(store, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        yield
        conn.execute("ROLLBACK")
        conn.close()


def test_one_namespace_created_on_two_replicas_at_once_is_created_once(store: str) -> None:
    """Two replicas create one name while creations are held back (issue 53): both used to see no namespace, then
    one created it, the other opened it, and both answered 201 with a key, the first dead on arrival. Creation and
    first key are now one transaction that refuses a name that exists: one 201 with a working key, one 409."""
    with replicas(store, 2) as (a, b):
        with ThreadPoolExecutor(2) as pool:
            body = {"name": "twice", "embedder": "hash"}
            with namespaces_write_lock(store):
                racing = [pool.submit(call, replica, "/v1/namespaces", ADMIN, body) for replica in (a, b)]
                time.sleep(1.5)  # both requests reach the lock
            answers = sorted((future.result() for future in racing), key=lambda answer: answer[0])
        assert [status for status, _ in answers] == [201, 409]
        key = answers[0][1]["key"]
        for replica in (a, b):
            inspected = replica.get("/v1/namespaces/twice/inspect", headers={"Authorization": f"Bearer {key}"})
            assert inspected.status_code == 200
    with MemoryStore(store) as check:
        assert [n["name"] for n in check.namespaces()] == ["twice"]


def test_replicas_ride_out_database_restarts_losing_no_feedback(own_postgres) -> None:
    """Clients send feedback through two replicas while the server restarts twice (`fast`, then crash-like
    `immediate`): every request is answered 200 (a replica waits for the database rather than failing), and every
    feedback is applied exactly once."""
    per_client, alpha = 60, 0.3
    with replicas(own_postgres.url, 2) as (a, b):
        key = create(a, "r")
        ids = [add(a, key, "r", f"s{i}", f"e{i}")[1]["id"] for i in range(2)]
        answers: list[tuple[int, float, dict]] = []
        sent = threading.Semaphore(0)

        def client(replica: TestClient, worker: int) -> None:
            for n in range(per_client):
                reward = (1.0, -1.0, 0.5)[(worker + n) % 3]
                body = {"ids": ids, "reward": reward, "alpha": alpha}
                status, body = call(replica, "/v1/namespaces/r/feedback", key, body)
                answers.append((status, reward, {item["id"]: item["q"] for item in body.get("items", [])}))
                sent.release()

        with ThreadPoolExecutor(4) as pool:
            workers = [pool.submit(client, replica, w) for w, replica in enumerate((a, b, a, b))]
            for mode, after in (("fast", 40), ("immediate", 60)):
                for _ in range(after):
                    sent.acquire(timeout=120)
                own_postgres.restart(mode)
            for worker in workers:
                worker.result(timeout=300)
    assert sorted({status for status, _, _ in answers}) == [200]
    assert len(answers) == 4 * per_client
    with MemoryStore(own_postgres.url) as store:
        items = {m.id: m for m in store.inspect("r")}
    for item_id in ids:
        updates = [(reward, alpha, q[item_id]) for _, reward, q in answers]
        order = commit_order(0.0, updates)
        assert items[item_id].visits == len(updates) and order is not None
        assert items[item_id].q_value == updates[order[-1]][2]
