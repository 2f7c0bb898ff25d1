"""Credentials and run directories: a memory service key is never recorded, and `resume` / `replay` send
TTLEARN_MEMORY_KEY or OPENAI_API_KEY only to URLs the user names again (a run directory may come from anyone).

A loopback listener stands in for whatever a URL points at: it records each request's Authorization header and
refuses it (401), so every run here stops at its first call.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ttlearn.cli import app
from ttlearn.llm.base import LLM, LLMS
from ttlearn.llm.openai import OPENAI_KEY_ENV
from ttlearn.memory.base import MEMORY_KEY_ENV
from ttlearn.runs import Run, RunConfig, check_trusted, credential_urls
from ttlearn.types import Completion

MEMORY_SECRET, OPENAI_SECRET = "mk.memory-secret-0123456789", "sk-openai-secret-0123456789"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


class Listener:
    """A loopback HTTP server that records the Authorization header of every request and answers 401."""

    def __init__(self) -> None:
        seen = self.seen = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
                pass

            def _refuse(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                seen.append(self.headers.get("Authorization"))
                body = json.dumps({"detail": "refused by the listener"}).encode()
                self.send_response(401)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _refuse  # noqa: N815 - http.server's naming

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    monkeypatch.setenv(MEMORY_KEY_ENV, MEMORY_SECRET)
    monkeypatch.setenv(OPENAI_KEY_ENV, OPENAI_SECRET)
    server = Listener()
    yield server
    server.close()


def crafted(listener: Listener) -> dict:
    """A config as an attacker would write it: every credential-carrying URL points at the listener."""
    return dict(
        env="rps",
        env_options={"opponent": "constant", "rounds": 2},
        memory="memrl",
        memory_options={"url": listener.url, "namespace": "x", "embedder": "hash"},
        player="scripted:random",
        writer=f"openai:{listener.url}/v1#model",
    )


def files_text(directory: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in directory.rglob("*") if p.is_file())


def test_resume_of_a_crafted_run_sends_no_credential_to_its_urls(tmp_path: Path, listener: Listener) -> None:
    session = Run.create(tmp_path / "session", RunConfig(**crafted(listener), units=2, attempts=1, carry_memory=True))
    session = session.path
    units = Run.create(tmp_path / "units", RunConfig(**crafted(listener), units=1)).path
    old_trials = tmp_path / "trials"  # a trial run of the layout before one config existed
    old_trials.mkdir()
    (old_trials / "trials.json").write_text(json.dumps({**crafted(listener), "kind": "trials", "tasks": 1}))
    commands = [["resume", str(session)], ["resume", str(units)], ["resume", str(old_trials)], ["replay", str(session)]]
    for command in commands:
        refused = invoke(*command)
        assert refused.exit_code == 2 and f"--trust-url {listener.url}" in refused.output, refused.output
    assert listener.seen == []  # nothing reached the URLs from the files

    trusting = invoke("resume", str(session), "--trust-url", listener.url, "--trust-url", f"{listener.url}/v1/")
    assert trusting.exit_code == 2  # named again: the credentials go there (and the listener refuses them)
    assert set(listener.seen) <= {f"Bearer {MEMORY_SECRET}", f"Bearer {OPENAI_SECRET}"} and listener.seen


def test_without_credentials_set_nothing_needs_trusting(tmp_path: Path, listener: Listener) -> None:
    config = RunConfig(**crafted(listener))
    assert credential_urls(config) == {listener.url: MEMORY_KEY_ENV, f"{listener.url}/v1": OPENAI_KEY_ENV}
    check_trusted(config, [], tmp_path, env={})  # no key set: nothing would be sent
    check_trusted(config, [listener.url, listener.url + "/v1/"], tmp_path, env={MEMORY_KEY_ENV: "k"})
    with pytest.raises(ValueError, match=f"would send {OPENAI_KEY_ENV} to {listener.url}/v1"):
        check_trusted(config, [listener.url], tmp_path, env={OPENAI_KEY_ENV: "k"})


def test_a_memory_key_on_the_command_line_is_never_recorded(tmp_path: Path, listener: Listener) -> None:
    key = "mk.from-the-command-line-0123456789"
    options = ["--memory", "memrl", "-m", f"url={listener.url}", "-m", "embedder=hash", "-m", f"key={key}"]
    common = ["--llm", "scripted:random", "--writer", f"openai:{listener.url}/v1#model", "-e", "rounds=2"]
    for mode, out in ((["--games", "1"], tmp_path / "session"), (["--tasks", "1"], tmp_path / "trials")):
        result = invoke("run", "rps", "--opponent", "constant", *options, *common, *mode, "--out", str(out))
        assert result.exit_code == 2, result.output  # the listener refuses: the run stops at its first call
        assert out.exists() and key not in files_text(out)
    assert f"Bearer {key}" in listener.seen  # the key was used, only never written down

    with pytest.raises(ValueError, match=f"never recorded in a run: set {MEMORY_KEY_ENV}"):
        RunConfig(env="rps", memory="memrl", memory_options={"url": listener.url, "key": key})
    resumed = invoke("resume", str(tmp_path / "session"), "-m", "namespace=other")
    assert resumed.exit_code == 2 and "resume takes only -m key=KEY" in resumed.output


def test_a_back_end_that_declares_a_key_is_guarded_like_openai(tmp_path: Path, monkeypatch) -> None:
    """The guard reads the back end's class (`LLM.sends_key`, `credential_url`), not a list of spec prefixes: a new
    back end that sends a key is refused on resume until its URL is named again."""

    class Keyed(LLM):
        sends_key = "KEYED_API_KEY"

        @classmethod
        def credential_url(cls, argument: str) -> str:
            return argument.partition("#")[0]

        @classmethod
        def from_spec(cls, argument: str) -> Keyed:
            return cls()

        def complete(self, messages, **kwargs) -> Completion:
            return Completion("")

    monkeypatch.setattr(LLMS, "_entries", dict(LLMS._entries))
    LLMS.register("keyed")(Keyed.from_spec)
    config = RunConfig(env="rps", player="keyed:https://api.example#m", writer="gemma270m")
    assert credential_urls(config) == {"https://api.example": "KEYED_API_KEY"}
    with pytest.raises(ValueError, match="would send KEYED_API_KEY to https://api.example"):
        check_trusted(config, [], tmp_path, env={"KEYED_API_KEY": "k"})
    check_trusted(config, ["https://api.example"], tmp_path, env={"KEYED_API_KEY": "k"})
    assert credential_urls(config.model_copy(update={"player": "unregistered:x"})) == {}  # cannot play: nothing sent


def test_a_password_in_an_llm_url_is_never_recorded_shown_or_sent(tmp_path: Path, listener: Listener) -> None:
    """`--llm openai:http://user:PASSWORD@host/v1#m` was recorded in run.json, shown in the header line, and sent as
    Basic auth in place of the Bearer key. The config and the back end now refuse it, naming the key's variable."""
    from ttlearn.llm.openai import OpenAIChat

    secret = "pw-in-an-llm-url-0123456789"
    url = listener.url.replace("http://", f"http://agent:{secret}@") + "/v1"
    refusal = f"never recorded in a run: drop it from the URL and set {OPENAI_KEY_ENV}"
    with pytest.raises(ValueError, match=refusal) as no:
        RunConfig(env="rps", player="scripted:random", writer=f"openai:{url}#model")
    assert secret not in str(no.value)
    with pytest.raises(ValueError, match="user part") as no:
        OpenAIChat(url, "model")
    assert secret not in str(no.value)
    out = tmp_path / "run"
    result = invoke("run", "rps", "--opponent", "constant", "--llm", f"openai:{url}#model", "-e", "rounds=2",
                    "--games", "1", "--out", str(out))  # fmt: skip
    assert result.exit_code == 2 and "error:" in result.output and secret not in result.output, result.output
    assert not out.exists() or secret not in files_text(out)
    assert listener.seen == []
