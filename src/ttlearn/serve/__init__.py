"""The memory service: MemRL's store over HTTP for deployed agents (`ttlearn serve`; needs the `serve` extra).

The defaults live here, free of the extra's imports, so the CLI can show them without loading FastAPI.
"""

DEFAULT_MAX_BODY = 1_000_000
"""Bytes a request body may hold."""
MAX_BATCH = 1000
"""Elements a batch write or batch feedback may hold (its bytes are bounded by the body limit, as every body's)."""
DEFAULT_RATE = 50.0
"""Requests per second per key."""
DEFAULT_BURST = 100.0
"""Requests a key may send at once before the rate applies."""
DEFAULT_QUOTA = 100_000_000
"""Bytes a namespace may hold, counted as about the size of its export (its texts, vectors and records)."""
DEFAULT_AUTH_RATE = 1.0
"""Failed authentications per second per client address (a wrong key answers 401; past the burst, 429)."""
DEFAULT_AUTH_BURST = 10.0
"""Failed authentications an address may make at once before the rate applies."""
DEFAULT_READ_TIMEOUT_S = 10.0
"""Seconds a request may take to arrive whole (head and body); a slower connection is closed."""
DEFAULT_WRITE_TIMEOUT_S = 30.0
"""Seconds a client may leave part of an answer unread (the service cannot send it); then the connection is dropped."""
DEFAULT_MAX_PIPELINED = 16
"""Requests in a row a connection may send before reading the answers to the earlier ones; then it is closed."""
DEFAULT_CONNECTIONS_PER_CLIENT = 32
"""Connections one client address may hold at once; more are closed as soon as they are accepted."""
DEFAULT_MAX_WAITING = 256
"""Connections the whole server keeps waiting for a request or for their client to read an answer (over every
address); past it the oldest is dropped."""
DEFAULT_MAX_UNSENT = 256_000_000
"""Bytes of answers the whole server may hold unsent because their clients do not read them (over every connection);
an answer that would go past it drops its connection. Keep it above the largest answer: an export, up to the quota."""
DEFAULT_MAX_PENDING = 10_000
"""Exchanges the learning proxy keeps awaiting feedback, over every namespace; past it the oldest is forgotten."""
DEFAULT_PENDING_AGE_S = 3600.0
"""Seconds an exchange of the learning proxy awaits its feedback; then it is forgotten."""
DEFAULT_PENDING_CHARS = 200_000_000
"""Characters of task and question those exchanges may hold together (each may hold a whole request's text)."""
