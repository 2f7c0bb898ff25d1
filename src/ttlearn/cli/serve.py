"""`ttlearn serve`: the MemRL store as an HTTP service for deployed agents (logic in `ttlearn.serve`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ttlearn.serve import (
    DEFAULT_AUTH_BURST,
    DEFAULT_AUTH_RATE,
    DEFAULT_BURST,
    DEFAULT_CONNECTIONS_PER_CLIENT,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_PIPELINED,
    DEFAULT_MAX_UNSENT,
    DEFAULT_MAX_WAITING,
    DEFAULT_QUOTA,
    DEFAULT_RATE,
    DEFAULT_READ_TIMEOUT_S,
    DEFAULT_WRITE_TIMEOUT_S,
)


def serve(
    store: str = typer.Option(
        ...,
        help="The MemRL store to serve: a SQLite file (created if missing), or a PostgreSQL database "
        "(postgresql://USER@HOST/DB; password in PGPASSWORD or ~/.pgpass) that several replicas serve together.",
    ),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on; keep loopback unless behind a TLS proxy."),
    port: int = typer.Option(8765, min=1, max=65535, help="Port to listen on."),
    admin_key_file: Optional[Path] = typer.Option(
        None, help="File whose first line is the admin key (default: the TTLEARN_ADMIN_KEY environment variable)."
    ),
    max_body: int = typer.Option(DEFAULT_MAX_BODY, min=1, help="Largest request body in bytes; larger ones get 413."),
    rate: float = typer.Option(DEFAULT_RATE, min=0, help="Requests per second per key (token bucket; 0 = no limit)."),
    burst: float = typer.Option(DEFAULT_BURST, min=1, help="Requests a key may send at once before the rate applies."),
    auth_rate: float = typer.Option(
        DEFAULT_AUTH_RATE, min=0, help="Failed authentications per second per client address; then 429 (0 = no limit)."
    ),
    auth_burst: float = typer.Option(
        DEFAULT_AUTH_BURST, min=1, help="Failed authentications an address may make at once."
    ),
    read_timeout: float = typer.Option(
        DEFAULT_READ_TIMEOUT_S, min=0.1, help="Seconds a request may take to arrive (head and body); then closed."
    ),
    write_timeout: float = typer.Option(
        DEFAULT_WRITE_TIMEOUT_S,
        min=0.1,
        help="Seconds a client may leave an answer unread (it cannot be sent); then the connection is dropped.",
    ),
    max_pipelined: int = typer.Option(
        DEFAULT_MAX_PIPELINED,
        min=0,
        help="Requests a connection may send ahead, before reading the answers to "
        "earlier ones; then it is closed (0 = no cap).",
    ),
    connections_per_client: int = typer.Option(
        DEFAULT_CONNECTIONS_PER_CLIENT, min=0, help="Connections one client address may hold at once (0 = no cap)."
    ),
    max_waiting: int = typer.Option(
        DEFAULT_MAX_WAITING,
        min=0,
        help="Connections waiting for a request or for their client to read an answer, "
        "all clients together; past it the longest-waiting one is dropped (0 = no cap).",
    ),
    max_unsent: int = typer.Option(
        DEFAULT_MAX_UNSENT,
        min=0,
        help="Bytes of answers left unsent because their clients do not read, all clients "
        "together; an answer past it drops its connection. Keep it above the quota (0 = no cap).",
    ),
    trusted_proxy: Optional[str] = typer.Option(
        None, help="Address(es) of your reverse proxy, comma-separated: only then is X-Forwarded-For believed."
    ),
    quota: int = typer.Option(
        DEFAULT_QUOTA, min=0, help="Bytes a namespace may hold (about its export's size); fuller ones get 507. 0: none."
    ),
) -> None:
    """Serve a MemRL store over HTTP to deployed agents: a key per namespace, API docs at /docs (needs the `serve`
    extra). Stops cleanly on Ctrl-C or SIGTERM."""
    try:
        from ttlearn.serve.app import serve as run_server
        from ttlearn.serve.auth import read_admin_key
    except ImportError as exc:
        raise ValueError(f"ttlearn serve needs the `serve` extra ({exc}): pip install 'ttlearn[serve]'") from None
    from ttlearn.cli.common import keep_password_out

    store = keep_password_out(store)  # a database's password goes to PGPASSWORD, never into a message
    admin_key = read_admin_key(admin_key_file)
    limits = dict(max_body=max_body, rate=rate, burst=burst, quota=quota, auth_rate=auth_rate, auth_burst=auth_burst)
    guards = dict(
        read_timeout_s=read_timeout,
        write_timeout_s=write_timeout,
        max_pipelined=max_pipelined,
        per_client=connections_per_client,
        max_waiting=max_waiting,
        max_unsent=max_unsent,
    )
    run_server(store, host=host, port=port, admin_key=admin_key, trusted_proxy=trusted_proxy, **guards, **limits)
