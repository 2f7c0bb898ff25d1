"""`ttlearn proxy`: the official `openai` client talks to the learning proxy on loopback, which forwards to llama.cpp's
OpenAI-compatible server with the embedded model (behind a recording relay, tests/fault_proxy.py, that shows what the
upstream received). The memory is MemRL's `sql` preset (one verified answer, no exploration) on the hash embedder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
openai = pytest.importorskip("openai", reason="needs the openai client (the test extra)")
import httpx2  # noqa: E402
import uvicorn  # noqa: E402
from fault_proxy import FaultProxy  # noqa: E402

from ttlearn.envs.base import ENVS, Env  # noqa: E402
from ttlearn.llm.local_server import free_port, llama_server  # noqa: E402
from ttlearn.llm.models import model_path  # noqa: E402
from ttlearn.memory.remote import MemoryClient  # noqa: E402
from ttlearn.memory.store import MemoryStore  # noqa: E402
from ttlearn.players.llm import build_messages  # noqa: E402
from ttlearn.serve.proxy import (  # noqa: E402
    CONVERSATION_HEADER,
    EXCHANGE_HEADER,
    TASK_HEADER,
    Exchange,
    PendingExchanges,
    Turn,
    conversation_task,
    create_proxy_app,
    place_memory,
)
from ttlearn.types import MemoryText, Observation, StepResult  # noqa: E402

ADMIN = "admin-key-for-tests-0123456789abcdefghijkl"
TASK = "Name the colour of a clear daytime sky in one word."


# -- the pure parts ----------------------------------------------------------------------------------------------


def test_memory_is_placed_as_the_llm_player_places_it():
    rules, observation = "You answer questions.", "What is 2 + 2?\n\nAnswer in the format the rules ask for."
    asked = [{"role": "system", "content": rules}, {"role": "user", "content": observation}]
    for memory in ("Task: sum\nVerified answer:\n4", MemoryText("notes", (("What is 1 + 1?", "2"),)), ""):
        assert place_memory(asked, memory) == build_messages(rules, memory, "What is 2 + 2?", [])


def test_memory_without_a_system_message_gets_one():
    placed = place_memory([{"role": "user", "content": "hi"}], "a note")
    assert placed == [
        {"role": "system", "content": "Your notes from earlier games:\na note"},
        {"role": "user", "content": "hi"},
    ]


def test_the_task_is_the_header_else_the_first_user_text():
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": [{"type": "text", "text": "first"}]},
        {"role": "user", "content": "second"},
    ]
    assert conversation_task(messages, None) == "first"
    assert conversation_task(messages, "named") == "named"
    with pytest.raises(ValueError, match="no user message"):
        conversation_task([{"role": "system", "content": "rules"}], None)


def exchange(namespace: str, created: float, shown: list[int] | None = None) -> Exchange:
    return Exchange(namespace, "task", "model", shown or [], [Turn("question")], created)


def test_pending_exchanges_are_bounded_in_count_and_age():
    pending = PendingExchanges(max_count=2, max_age_s=10.0)
    now = time.monotonic()
    old = pending.add(exchange("a", now - 11))
    first, second, third = (pending.add(exchange("a", now)) for _ in range(3))
    assert pending.take(old, "a") is None  # too old
    assert pending.take(first, "a") is None  # pushed out by the count
    assert pending.take(second, "b") is None  # another namespace's
    assert pending.take(second, "a") is not None and pending.take(second, "a") is None  # taken once
    assert pending.take(third, "a") is not None


def test_pending_exchanges_are_bounded_in_characters_and_a_put_back_one_waits_anew():
    pending = PendingExchanges(max_count=10, max_age_s=10.0, max_chars=2 * len("task" + "question"))
    now = time.monotonic()
    first, second, third = (pending.add(exchange("a", now)) for _ in range(3))
    assert pending.take(first, "a") is None and pending.take(second, "a") is not None
    taken = pending.take(third, "a")
    taken.created = now - 11  # as old as can be: put back, it waits its whole age again
    pending.put_back(third, taken)
    assert pending.take(third, "a") is taken


def test_a_conversation_gathers_its_turns_and_shown_items_in_one_exchange():
    pending = PendingExchanges(max_count=10, max_age_s=10.0)
    now = time.monotonic()
    first = pending.add(exchange("a", now, [1, 2]), "chat-7")
    other = pending.add(exchange("b", now, [9]), "chat-7")  # another namespace's conversation of the same name
    failed = exchange("a", now, [3])
    assert pending.add(exchange("a", now, [2, 4]), "chat-7") == pending.add(failed, "chat-7") == first == other
    pending.drop_turn(first, "a", failed.turns[0])  # the upstream did not answer that request
    gathered = pending.take("conversation:chat-7", "a")
    assert len(gathered.turns) == 2 and gathered.shown == [1, 2, 4, 3]
    assert pending.take(other, "b").shown == [9]


@pytest.mark.parametrize(
    ("memory", "options", "refusal"),
    [
        ("memrl", {"bogus": 1}, "has no option bogus"),
        ("memrl", {"store": "elsewhere.sqlite"}, "keeps the memories in its --store"),
        ("memrl", {"k2": "many"}, "k2"),
        ("expel", {}, "learns with memrl, memp, rag"),
    ],
)
def test_a_wrong_memory_or_option_stops_the_start_with_one_line(tmp_path, memory, options, refusal):
    with pytest.raises(ValueError, match=refusal):
        create_proxy_app(tmp_path / "s.sqlite", admin_key=ADMIN, upstream="http://x/v1", memory=memory,
                         memory_options=options)  # fmt: skip


# -- against a real upstream -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def relay(tmp_path_factory):
    """llama.cpp's server with the embedded model, behind a relay that records the bodies it forwards."""
    pytest.importorskip("llama_cpp", reason="needs llama-cpp-python[server] (the test extras)")
    log = tmp_path_factory.mktemp("upstream") / "server.log"
    with llama_server(model_path("smollm2"), "smollm2", log) as base:
        relay = FaultProxy(int(base.rsplit(":", 1)[1].split("/")[0]))
        yield relay
        relay.close()


class Proxy:
    """The proxy's app under uvicorn in a thread on a free loopback port, with one namespace and its key."""

    def __init__(self, store: str | Path, upstream: str, **options: object) -> None:
        self.app = create_proxy_app(store, admin_key=ADMIN, upstream=upstream, rate=0, auth_rate=0, **options)
        self.url = f"http://127.0.0.1:{free_port()}"
        config = uvicorn.Config(self.app, host="127.0.0.1", port=int(self.url.rsplit(":", 1)[1]), log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the proxy did not start"
            time.sleep(0.05)
        with MemoryClient(self.url, ADMIN) as admin:
            self.key = admin.create_namespace("team", embedder="hash")
        self.client = openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.key, max_retries=0)

    def ask(self, question: str, **extra: object) -> tuple[str, str]:
        """(exchange id, reply) of one chat completion through the proxy."""
        raw = self.client.chat.completions.with_raw_response.create(
            model="smollm2",
            messages=[{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": question}],
            max_tokens=8,
            temperature=0.0,
            seed=1,
            **extra,
        )
        completion = raw.parse()
        assert completion.model_extra["ttlearn_exchange"] == raw.headers[EXCHANGE_HEADER]
        return raw.headers[EXCHANGE_HEADER], completion.choices[0].message.content

    def feedback(self, exchange_id: str, reward: float, key: str | None = None) -> httpx2.Response:
        headers = {"Authorization": f"Bearer {key or self.key}"}
        return httpx2.post(
            f"{self.url}/v1/feedback", json={"exchange": exchange_id, "reward": reward}, headers=headers, timeout=60
        )

    def items(self) -> list[dict]:
        with MemoryClient(self.url, self.key) as client:
            return client.export_namespace("team")["items"]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def proxy(relay, tmp_path):
    running = Proxy(tmp_path / "proxy.sqlite", f"http://127.0.0.1:{relay.port}/v1", memory_options={"preset": "sql"})
    relay.bodies.clear()
    yield running
    running.stop()


def sent_messages(relay: FaultProxy) -> list[dict]:
    return json.loads(relay.bodies[-1])["messages"]


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path) -> str:
    """The proxy's store: a SQLite file, or a fresh PostgreSQL database."""
    return str(tmp_path / "proxy.sqlite") if request.param == "sqlite" else request.getfixturevalue("postgres_url")


@pytest.mark.model
def test_an_agent_learns_through_the_proxy(store, relay):
    proxy = Proxy(store, f"http://127.0.0.1:{relay.port}/v1", memory_options={"preset": "sql"})
    relay.bodies.clear()
    try:
        learns_from_two_exchanges(proxy, relay)
    finally:
        proxy.stop()


def learns_from_two_exchanges(proxy: Proxy, relay: FaultProxy) -> None:
    """A first exchange shown nothing and rewarded; a second on the same task shown its item and punished."""
    first, reply = proxy.ask(TASK)
    assert sent_messages(relay) == [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": TASK},
    ]  # an empty memory: the prompt passes unchanged
    done = proxy.feedback(first, 1.0)
    assert done.status_code == 200, done.text
    assert done.json() == {"exchange": first, "success": True, "shown": []}
    [item] = proxy.items()
    assert item["experience"] == f"Task: {TASK}\nVerified answer:\n{reply}" and item["q_value"] == 0.0

    second, _ = proxy.ask(TASK)
    system = sent_messages(relay)[0]["content"]
    assert system == f"Answer briefly.\n\nYour notes from earlier games:\n{item['experience']}"
    done = proxy.feedback(second, -1.0)
    assert done.json() == {"exchange": second, "success": False, "shown": [item["id"]]}
    [after] = proxy.items()  # the sql preset keeps successes only; the shown item's Q moved toward -1 by α = 0.3
    assert after["q_value"] == pytest.approx(-0.3) and after["visits"] == 1


@pytest.mark.model
def test_batch_feedback_learns_every_exchange_in_one_write_and_records_who_wrote(store, relay):
    """Two exchanges' feedback in one batch: refused whole while one is unknown (both still await it), then learnt
    in one transaction; each item names its exchange and the key whose request opened it."""
    options = {"preset": "sql", "write": "trajectory", "keep": "all"}
    proxy = Proxy(store, f"http://127.0.0.1:{relay.port}/v1", memory_options=options)
    try:
        first, _ = proxy.ask(TASK)
        second, _ = proxy.ask("Say hello.")

        def batch(*items: dict) -> httpx2.Response:
            headers = {"Authorization": f"Bearer {proxy.key}"}
            return httpx2.post(f"{proxy.url}/v1/feedback/batch", json={"items": items}, headers=headers, timeout=60)

        refused = batch({"exchange": first, "reward": 1.0}, {"exchange": "unknown", "reward": 1.0})
        assert refused.status_code == 404 and "'unknown'" in refused.json()["detail"] and proxy.items() == []
        done = batch({"exchange": first, "reward": 1.0}, {"exchange": second, "reward": -1.0})
        assert done.status_code == 200, done.text
        assert [(d["exchange"], d["success"]) for d in done.json()["items"]] == [(first, True), (second, False)]
        key_id = proxy.key.split(".")[0]
        items = proxy.items()
        assert [(i["exchange"], i["key_id"]) for i in items] == [(first, key_id), (second, key_id)]
        assert items[0]["created"] == items[1]["created"]  # one transaction's time
    finally:
        proxy.stop()


@pytest.mark.model
def test_a_streamed_answer_passes_through_and_is_learnt(proxy, relay):
    with proxy.client.chat.completions.with_streaming_response.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=6,
        temperature=0.0,
        stream=True,
        extra_headers={TASK_HEADER: "greet"},
    ) as response:
        exchange_id = response.headers[EXCHANGE_HEADER]
        chunks = list(response.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and json.loads(relay.bodies[-1])["stream"] is True
    assert proxy.feedback(exchange_id, 1.0).status_code == 200
    [item] = proxy.items()
    assert item["experience"] == f"Task: greet\nVerified answer:\n{text}"


@pytest.mark.model
def test_a_conversation_is_one_episode_of_several_steps(relay, tmp_path):
    upstream = f"http://127.0.0.1:{relay.port}/v1"
    proxy = Proxy(tmp_path / "proxy.sqlite", upstream, memory_options={"preset": "sql", "write": "trajectory"})
    try:
        conversation = {"extra_headers": {CONVERSATION_HEADER: "chat-1"}}
        first, reply = proxy.ask(TASK, **conversation)
        second, again = proxy.ask("Are you sure?", **conversation)
        assert first == second == "conversation:chat-1"
        both = httpx2.post(
            f"{proxy.url}/v1/feedback",
            json={"exchange": first, "conversation": "chat-1", "reward": 1.0},
            headers={"Authorization": f"Bearer {proxy.key}"},
        )
        assert both.status_code == 422 and "one of them" in both.text
        done = httpx2.post(
            f"{proxy.url}/v1/feedback",
            json={"conversation": "chat-1", "reward": 1.0},
            headers={"Authorization": f"Bearer {proxy.key}"},
        )
        assert done.status_code == 200 and done.json()["exchange"] == first
        [item] = proxy.items()
        steps = f"{TASK} -> {reply} (reward 0)\nAre you sure? -> {again} (reward 1)"
        assert item["experience"] == f"Task: {TASK}\nOutcome: success (score 1)\nTrajectory:\n{steps}"
    finally:
        proxy.stop()


@pytest.mark.model
def test_feedback_on_an_unknown_spent_or_foreign_exchange_is_404(proxy):
    exchange_id, _ = proxy.ask(TASK)
    with MemoryClient(proxy.url, ADMIN) as admin:
        other = admin.create_namespace("other", embedder="hash")
    refused = proxy.feedback(exchange_id, 1.0, key=other)
    assert refused.status_code == 404 and "no exchange" in refused.json()["detail"]
    assert proxy.feedback(exchange_id, 1.0).status_code == 200
    spent = proxy.feedback(exchange_id, 1.0)
    assert spent.status_code == 404 and "already given feedback, or forgotten" in spent.json()["detail"]


def test_keys_and_hostile_bodies_get_what_serve_gives(tmp_path):
    proxy = Proxy(tmp_path / "proxy.sqlite", f"http://127.0.0.1:{free_port()}/v1", max_body=1000)
    try:
        url, key = f"{proxy.url}/v1/chat/completions", {"Authorization": f"Bearer {proxy.key}"}
        assert httpx2.post(url, json={"messages": []}).status_code == 401
        wrong = httpx2.post(url, json={"messages": []}, headers={"Authorization": "Bearer a.b"})
        assert wrong.status_code == 401
        for body in (b"{", b'{"messages": [{"role": "user", "content": "x"}], "t": NaN}', b'{"messages": []}'):
            refused = httpx2.post(url, content=body, headers=key)
            assert refused.status_code == 422, refused.text
        assert httpx2.post(url, content=b"x" * 2000, headers=key).status_code == 413
        hostile = b'{"exchange": "x", "reward": 1e400}'
        feedback = httpx2.post(f"{proxy.url}/v1/feedback", content=hostile, headers=key)
        assert feedback.status_code == 422
        down = httpx2.post(url, json={"messages": [{"role": "user", "content": "x"}]}, headers=key, timeout=30)
        assert down.status_code == 502 and "did not answer" in down.json()["detail"]
    finally:
        proxy.stop()


@pytest.mark.model
def test_notes_are_written_by_the_model_that_answered_and_a_failed_note_can_be_retried(relay, tmp_path):
    proxy = Proxy(tmp_path / "proxy.sqlite", f"http://127.0.0.1:{relay.port}/v1")  # MemRL's defaults: write=notes
    try:
        exchange_id, _ = proxy.ask(TASK)
        relay.schedule(["status:400"])  # the note's request refused: nothing is learnt, the exchange waits again
        refused = proxy.feedback(exchange_id, 1.0)
        assert refused.status_code == 502 and "could not write MemRL's note" in refused.json()["detail"]
        assert proxy.items() == []
        assert proxy.feedback(exchange_id, 1.0).status_code == 200
        [item] = proxy.items()
        assert item["experience"].startswith(f"Task: {TASK}\nOutcome: success (score 1)\nStrategy:\n")
        assert json.loads(relay.bodies[-1])["model"] == "smollm2"
    finally:
        proxy.stop()


# -- the same learning as `ttlearn run` ---------------------------------------------------------------------------

QUIZ = (
    ("What is the capital of France?", "paris"),
    ("What colour is fresh grass?", "green"),
    ("How many legs does a spider have?", "eight"),
)


@ENVS.register("proxy-quiz")
class Quiz(Env):
    """One question per instance, answered in one free-text reply; solved when the reply names the answer. Its answer
    (`format_answer`) is the reply as written, what the proxy sees of it."""

    reply_tokens = 8

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def describe(self) -> str:
        return "Answer the question in one word."

    def reset(self, seed: int) -> Observation:
        self.question, self.expected = QUIZ[seed % len(QUIZ)]
        self.reply: str | None = None
        return Observation(self.question, ())

    def restart(self) -> Observation:
        return self.reset(QUIZ.index((self.question, self.expected)))

    def step(self, action: str) -> StepResult:
        self.reply = action
        return StepResult(Observation("done", ()), self.score(), True)

    def legal_actions(self) -> tuple[str, ...]:
        return ()

    def parse_action(self, text: str, legal_actions: object) -> str:
        return text

    def score(self) -> float:
        return float(self.reply is not None and self.expected in self.reply.lower())

    def success(self) -> bool:
        return self.score() > 0

    def task(self) -> str:
        return self.question

    def instance_count(self) -> int:
        return len(QUIZ)


def learnt(items: list[dict]) -> list[tuple[str, float, int]]:
    """What a namespace learnt, without its ids (a run renumbers them when it reloads its state between units)."""
    return sorted((item["experience"], round(item["q_value"], 12), item["visits"]) for item in items)


@pytest.mark.model
def test_a_task_stream_learns_through_the_proxy_as_ttlearn_run_does(relay, tmp_path):
    """The same six tasks (three questions, twice) and seeds, played by `ttlearn run --memory memrl -m preset=sql`
    and by an agent with the openai client through the proxy: the upstream receives the same prompts and seeds,
    answers the same, and both memories end with the same items, Q values and visits."""
    from ttlearn.rollout.run import play as play_units
    from ttlearn.rollout.run import prepare
    from ttlearn.rollout.unit import unit_seeds
    from ttlearn.runs import RunConfig

    upstream = f"http://127.0.0.1:{relay.port}/v1"
    options = {"preset": "sql", "embedder": "hash"}
    player = f"openai:{upstream}#smollm2"
    config = RunConfig(env="proxy-quiz", memory="memrl", memory_options=options, player=player, units=3, epochs=2)
    relay.bodies.clear()
    with prepare(tmp_path / "run", config) as run:
        play_units(run)
        units = run.total
        by_run = [json.loads(body) for body in relay.bodies]
        store = MemoryStore(run.dir.memrl_store)
        run_items = learnt(store.export_namespace("default")["items"])
        store.close()

    proxy = Proxy(tmp_path / "proxy.sqlite", upstream, memory_options={"preset": "sql"})
    relay.bodies.clear()
    try:
        env = Quiz()
        for index in range(1, units + 1):
            seeds = unit_seeds(config, index, env.instance_count())
            obs = env.reset(seeds.instance)
            raw = proxy.client.chat.completions.with_raw_response.create(
                model="smollm2",
                messages=build_messages(env.describe(), "", obs.text, []),
                max_tokens=env.reply_tokens,
                temperature=config.temperature,
                seed=seeds.act(1, 0),
                extra_headers={TASK_HEADER: env.task()},
            )
            env.step(raw.parse().choices[0].message.content or "")
            assert proxy.feedback(raw.headers[EXCHANGE_HEADER], env.score()).status_code == 200
        by_proxy = [json.loads(body) for body in relay.bodies]
        proxy_items = learnt(proxy.items())
    finally:
        proxy.stop()
    assert by_proxy == by_run and len(by_run) == units == 6
    assert proxy_items == run_items
    assert any(q != 0 for _, q, _ in run_items), "the stream should move some Q (a question answered right twice)"
    assert any("Your notes from earlier games" in body["messages"][0]["content"] for body in by_run)


@pytest.mark.model
def test_the_command_serves_the_embedded_model_without_an_upstream_and_stops_it_on_sigterm(tmp_path):
    from processes import descendants, running

    port = free_port()
    command = [sys.executable, "-m", "ttlearn", "proxy", "--store", str(tmp_path / "s.sqlite"), "--model", "smollm2"]
    env = {**os.environ, "TTLEARN_ADMIN_KEY": ADMIN, "OMP_NUM_THREADS": "1"}
    with open(tmp_path / "proxy.log", "w") as log:
        proc = subprocess.Popen([*command, "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
    try:
        while True:
            try:
                if httpx2.get(f"{url}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx2.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "proxy.log").read_text()
                time.sleep(0.3)
        with MemoryClient(url, ADMIN) as admin:
            key = admin.create_namespace("team", embedder="hash")
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="smollm2", messages=[{"role": "user", "content": TASK}], max_tokens=4
        )
        assert raw.parse().choices[0].message.content and raw.headers[EXCHANGE_HEADER]
        children = descendants(proc.pid)
        assert children
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=60)
    assert status == 0 and not any(running(pid) for pid in children)
