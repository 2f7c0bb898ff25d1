"""`ttlearn proxy`: an OpenAI-compatible endpoint that learns with MemRL (logic in `ttlearn.serve.proxy`)."""

from __future__ import annotations

import contextlib
import tempfile
from functools import partial
from pathlib import Path
from typing import Optional

import typer

from ttlearn.llm.base import DEFAULT_LLM
from ttlearn.serve import (
    DEFAULT_BURST,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_PENDING,
    DEFAULT_PENDING_AGE_S,
    DEFAULT_QUOTA,
    DEFAULT_RATE,
)


def proxy(
    upstream: Optional[str] = typer.Option(
        None,
        help="The OpenAI-compatible server to forward to, e.g. http://127.0.0.1:8000/v1 (its key: OPENAI_API_KEY); "
        "without it, the embedded --model behind llama.cpp's server on loopback.",
    ),
    model: str = typer.Option(
        DEFAULT_LLM,
        help="Without --upstream: the embedded model to serve (one thread; needs llama-cpp-python[server]).",
    ),
    store: str = typer.Option(
        ..., help="The MemRL store: a SQLite file (created if missing) or a postgresql:// database, as ttlearn serve."
    ),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on; keep loopback unless behind a TLS proxy."),
    port: int = typer.Option(8766, min=1, max=65535, help="Port to listen on."),
    admin_key_file: Optional[Path] = typer.Option(
        None, help="File whose first line is the admin key (default: the TTLEARN_ADMIN_KEY environment variable)."
    ),
    memory: str = typer.Option("memrl", help="The memory each namespace learns with: memrl, memp or rag."),
    memory_opt: list[str] = typer.Option(
        [], "--memory-opt", "-m", help="A memory option, KEY=VALUE, as ttlearn run takes it (e.g. preset=sql)."
    ),
    max_pending: int = typer.Option(DEFAULT_MAX_PENDING, min=1, help="Exchanges awaiting feedback at most (all keys)."),
    pending_age: float = typer.Option(DEFAULT_PENDING_AGE_S, min=0.001, help="Seconds an exchange awaits feedback."),
    max_body: int = typer.Option(DEFAULT_MAX_BODY, min=1, help="Largest request body in bytes; larger ones get 413."),
    rate: float = typer.Option(DEFAULT_RATE, min=0, help="Requests per second per key (token bucket; 0 = no limit)."),
    burst: float = typer.Option(DEFAULT_BURST, min=1, help="Requests a key may send at once before the rate applies."),
    quota: int = typer.Option(DEFAULT_QUOTA, min=0, help="Bytes a namespace may hold; fuller ones get 507. 0: none."),
) -> None:
    """Serve an OpenAI-compatible /v1/chat/completions that places each namespace's MemRL memories in the prompt and
    learns from POST /v1/feedback; the memory service's API (namespaces, keys) on the same port. Needs the `serve`
    extra; docs/proxy.md."""
    try:
        from ttlearn.serve.app import serve as run_server
        from ttlearn.serve.auth import read_admin_key
        from ttlearn.serve.proxy import create_proxy_app
    except ImportError as exc:
        raise ValueError(f"ttlearn proxy needs the `serve` extra ({exc}): pip install 'ttlearn[serve]'") from None
    from ttlearn.cli.common import keep_password_out, parse_options
    from ttlearn.llm.local_server import llama_server
    from ttlearn.llm.models import model_path

    store = keep_password_out(store)
    make_app = partial(
        create_proxy_app,
        memory=memory,
        memory_options=parse_options(memory_opt, "--memory-opt"),
        max_pending=max_pending,
        pending_age_s=pending_age,
    )
    limits = dict(max_body=max_body, rate=rate, burst=burst, quota=quota)
    admin_key = read_admin_key(admin_key_file)
    with contextlib.ExitStack() as stack:
        if upstream is None:
            log = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ttlearn-proxy-"))) / "llama-server.log"
            upstream = stack.enter_context(llama_server(model_path(model), model, log))
        run_server(
            store, host=host, port=port, admin_key=admin_key, make_app=partial(make_app, upstream=upstream), **limits
        )
