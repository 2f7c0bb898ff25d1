"""The OpenAI-compatible client against a real server: llama.cpp's, started on loopback with the embedded GGUF,
directly and behind a fault-injecting proxy (tests/fault_proxy.py)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from fault_proxy import FaultProxy

from ttlearn.llm import make_llm
from ttlearn.llm.local_server import free_port, llama_server
from ttlearn.llm.models import model_path
from ttlearn.llm.openai import OpenAIChat, RequestRefused, RetryPolicy, ServerUnavailable

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("uvicorn", reason="needs llama-cpp-python[server] (the test extras)")
    log = tmp_path_factory.mktemp("server") / "server.log"
    with llama_server(model_path("smollm2"), "smollm2", log) as base:
        yield base


MESSAGES = [
    {"role": "system", "content": "You play rock-paper-scissors."},
    {"role": "user", "content": "Which move beats rock? Answer with one word."},
]


def test_free_text_completion_reports_usage(server):
    llm = make_llm(f"openai:{server}#smollm2")
    reply = llm.complete(MESSAGES, max_tokens=8, temperature=0.0, seed=1)
    assert reply.text and reply.prompt_tokens > 10 and 0 < reply.completion_tokens <= 8


def test_choices_come_back_as_one_of_them(server):
    llm = make_llm(f"openai:{server}#smollm2")
    for seed in range(3):
        reply = llm.complete(MESSAGES, max_tokens=16, temperature=0.7, seed=seed, choices=["rock", "paper", "scissors"])
        assert reply.text in {"rock", "paper", "scissors"}


def test_a_short_session_over_the_server(server, tmp_path):
    from ttlearn.rollout.run import play as play_units
    from ttlearn.rollout.run import prepare
    from ttlearn.runs import RunConfig

    config = RunConfig(
        env="rps",
        env_options={"opponent": "constant", "rounds": 3},
        memory="none",
        player=f"openai:{server}#smollm2",
        units=1,
        attempts=1,
        carry_memory=True,
    )
    run = prepare(tmp_path / "r", config)
    play_units(run)
    calls = run.calls()
    assert len(calls) == 3 and all(c["completion"]["latency_s"] > 0 for c in calls)


def test_dead_server_is_a_clear_error():
    llm = make_llm(f"openai:http://127.0.0.1:{free_port()}/v1#none?max_retries=0")
    with pytest.raises(ServerUnavailable, match="after 1 tries.*is the server up"):
        llm.complete(MESSAGES, max_tokens=4)


def test_bad_spec_is_refused():
    with pytest.raises(ValueError, match="openai:<base-url>#<model>"):
        make_llm("openai:http://127.0.0.1:1/v1")
    with pytest.raises(ValueError, match="side_by_side must be at least 1"):
        make_llm("openai:http://127.0.0.1:1/v1#m?side_by_side=0")


@pytest.fixture(scope="module")
def invariant_server(tmp_path_factory):
    """llama.cpp's server evaluating one token per batch: its replies do not depend on the requests around them."""
    pytest.importorskip("uvicorn", reason="needs llama-cpp-python[server] (the test extras)")
    log = tmp_path_factory.mktemp("server") / "invariant.log"
    with llama_server(model_path("smollm2"), "smollm2", log, batch_invariant=True) as base:
        yield base


def test_a_declared_server_answers_side_by_side_as_alone(invariant_server):
    assert make_llm(f"openai:{invariant_server}#smollm2").side_by_side == 1  # undeclared: one at a time
    llm = make_llm(f"openai:{invariant_server}#smollm2?side_by_side=2")
    assert llm.side_by_side == 2
    questions = [[{"role": "user", "content": f"Name a {thing}."}] for thing in ("fruit", "river", "tool", "bird")]

    def ask(question):
        return llm.complete(question, max_tokens=8, temperature=0.0).text

    alone = [ask(q) for q in questions]
    with ThreadPoolExecutor(llm.side_by_side) as pool:
        assert list(pool.map(ask, questions)) == alone
    assert len(set(alone)) > 1  # different questions, different replies: a mix-up would show


# -- behind the fault proxy -------------------------------------------------------------------------------------------

FAST = dict(backoff_base_s=0.01, backoff_cap_s=0.05)  # retries in milliseconds; the faults are what we test


@pytest.fixture(scope="module")
def proxy(server):
    upstream_port = int(server.split(":")[-1].split("/")[0])
    proxy = FaultProxy(upstream_port)
    yield proxy
    proxy.close()


def client(proxy: FaultProxy, **policy) -> OpenAIChat:
    return OpenAIChat(f"http://127.0.0.1:{proxy.port}/v1", "smollm2", policy=RetryPolicy(**{**FAST, **policy}))


def faults_seen(proxy: FaultProxy) -> list[str]:
    return [fault for _, fault, _ in proxy.log]


def test_transient_faults_are_retried_until_an_answer(proxy):
    faults = ["drop", "status:500", "status:502", "status:503", "status:429"]
    proxy.schedule(faults)
    reply = client(proxy, max_retries=len(faults)).complete(MESSAGES, max_tokens=4)
    assert reply.text and reply.completion_tokens > 0
    assert faults_seen(proxy) == faults + ["pass"]


def test_a_hung_server_times_out_and_is_retried(proxy):
    proxy.schedule(["stall:8"])
    start = time.monotonic()
    reply = client(proxy, timeout_s=2.5, max_retries=1).complete(MESSAGES, max_tokens=4)
    assert reply.text and faults_seen(proxy) == ["stall:8", "pass"]
    assert 2.5 <= proxy.log[1][0] - start < 6  # the retry came when the client timed out, not when the proxy gave up


def test_a_slow_answer_within_the_timeout_is_not_retried(proxy):
    proxy.schedule(["delay:0.5"])
    assert client(proxy, timeout_s=30).complete(MESSAGES, max_tokens=4).text
    assert faults_seen(proxy) == ["delay:0.5"]


def test_gives_up_after_the_bound_with_a_clear_error(proxy):
    proxy.schedule(["status:500"] * 3 + ["drop"] * 10)
    with pytest.raises(ServerUnavailable, match=r"after 5 tries \(last: RemoteProtocolError.*is the server up"):
        client(proxy, max_retries=4).complete(MESSAGES, max_tokens=4)
    assert faults_seen(proxy) == ["status:500"] * 3 + ["drop"] * 2


def test_retry_after_is_honoured(proxy):
    proxy.schedule(["status:429:1"])
    assert client(proxy, backoff_cap_s=5).complete(MESSAGES, max_tokens=4).text
    (asked, _, _), (retried, _, _) = proxy.log
    assert 1.0 <= retried - asked < 5  # the server's second, not a backoff of at most 0.01 s


def test_retry_after_is_capped(proxy):
    proxy.schedule(["status:503:3600"])
    assert client(proxy, backoff_cap_s=0.2).complete(MESSAGES, max_tokens=4).text
    (asked, _, _), (retried, _, _) = proxy.log
    assert 0.2 <= retried - asked < 2


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_other_client_errors_fail_at_once_with_the_servers_answer(proxy, status):
    proxy.schedule([f"status:{status}"])
    with pytest.raises(RequestRefused, match=rf"refused the request \({status}\): .*injected fault {status}"):
        client(proxy).complete(MESSAGES, max_tokens=4)
    assert len(proxy.log) == 1


def test_a_real_404_fails_at_once(proxy):
    proxy.schedule([])
    llm = OpenAIChat(f"http://127.0.0.1:{proxy.port}/no-such-api", "smollm2", policy=RetryPolicy(**FAST))
    with pytest.raises(RequestRefused, match=r"\(404\)") as caught:
        llm.complete(MESSAGES, max_tokens=4)
    assert caught.value.status == 404 and len(proxy.log) == 1


def test_connections_are_reused(proxy):
    proxy.schedule([])
    llm = client(proxy)
    for _ in range(3):
        llm.complete(MESSAGES, max_tokens=2)
    assert len({port for _, _, port in proxy.log}) == 1 and len(proxy.log) == 3


def test_many_threads_share_one_client_through_faults(proxy):
    """Four threads, one client, faults on the way: every answer is a choice, and the threads that were refused a
    structured-output spelling together learn the same spelling as a client used by one thread."""
    choices = ["rock", "paper", "scissors"]
    proxy.schedule([])
    alone = client(proxy)
    alone.complete(MESSAGES, max_tokens=16, choices=choices)
    proxy.schedule(["drop", "status:503", "status:429:0", "drop"])
    shared = client(proxy, max_retries=4)
    answers: list[str] = []

    def play(seed: int) -> None:
        answers.append(shared.complete(MESSAGES, max_tokens=16, temperature=0.7, seed=seed, choices=choices).text)

    threads = [threading.Thread(target=play, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert len(answers) == 4 and set(answers) <= set(choices)
    assert shared._format == alone._format


def test_a_run_stopped_by_a_dead_server_resumes_to_the_same_scores(proxy, tmp_path):
    from ttlearn.rollout.run import play as play_units
    from ttlearn.rollout.run import prepare
    from ttlearn.runs import Run, RunConfig

    def config() -> RunConfig:
        player = f"openai:http://127.0.0.1:{proxy.port}/v1#smollm2?max_retries=1&backoff_base_s=0.01"
        options = {"opponent": "cycle3", "rounds": 1}
        return RunConfig(
            env="rps", env_options=options, memory="none", player=player, units=2, attempts=1, carry_memory=True
        )

    proxy.schedule([])
    clean = prepare(tmp_path / "clean", config())
    play_units(clean)
    first_game_requests = len(proxy.log) - len(clean.calls(2))
    proxy.schedule(["pass"] * first_game_requests + ["drop"] * 50)  # the server dies after the first game
    broken = prepare(tmp_path / "broken", config())
    with pytest.raises(ServerUnavailable, match="after 2 tries"):
        play_units(broken)
    broken.close()  # the process that played it ended
    assert Run.open(broken.path).done == 1
    proxy.schedule([])  # the server is back
    resumed = Run.open(broken.path, write=True)
    play_units(resumed)
    assert [r["score"] for r in resumed.records] == [r["score"] for r in clean.records] and resumed.done == 2
