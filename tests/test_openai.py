"""The OpenAI-compatible client against a real server: llama.cpp's, started on loopback with the embedded GGUF."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from ttlearn.llm import LLMError, make_llm
from ttlearn.llm.models import model_path

pytestmark = pytest.mark.model


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("uvicorn", reason="needs llama-cpp-python[server] (the test extras)")
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    log_fh = open(log, "w")  # a file, not a pipe: llama.cpp logs enough to fill a pipe and stall the server
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model_path("smollm2")),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_threads",
            "1",
            "--n_ctx",
            "2048",
            "--model_alias",
            "smollm2",
        ],
        stdout=log_fh,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.time() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{base}/models", timeout=2) as response:
                json.loads(response.read())
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                pytest.fail(f"llama.cpp server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
    yield base
    proc.terminate()
    proc.wait(timeout=30)
    log_fh.close()


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
    from ttlearn.runs import Run, RunConfig
    from ttlearn.session import build_session

    config = RunConfig(
        env="rps",
        env_options={"opponent": "constant", "rounds": 3},
        memory="none",
        player=f"openai:{server}#smollm2",
        games=1,
    )
    run = Run.create(tmp_path / "r", config)
    build_session(run).play()
    calls = [e for e in run.events() if e["type"] == "call"]
    assert len(calls) == 3 and all(c["completion"]["latency_s"] > 0 for c in calls)


def test_dead_server_is_a_clear_error():
    llm = make_llm(f"openai:http://127.0.0.1:{free_port()}/v1#none")
    llm.retries = 0
    with pytest.raises(LLMError, match="is the server up"):
        llm.complete(MESSAGES, max_tokens=4)


def test_bad_spec_is_refused():
    with pytest.raises(ValueError, match="openai:<base-url>#<model>"):
        make_llm("openai:http://127.0.0.1:1/v1")
