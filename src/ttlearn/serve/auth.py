"""Who may call the memory service: one admin key, and one key per namespace, stored only as a hash.

A namespace key reads `<key id>.<secret>`: the id (12 hex characters, not secret) finds its row, and the secret
(32 random bytes, URL-safe base64) is checked against the stored SHA-256 with `hmac.compare_digest`, so the time a
comparison takes says nothing about the secret. 256 random bits need no slow password hash: they cannot be guessed,
and the stored hash does not give them back. A key is shown once, when it is issued, and never logged.

Rotation issues a new key and revokes the namespace's older ones in the same transaction; revocation leaves the
namespace without a key until the next rotation. A namespace's first key is stored in the transaction that creates
the namespace (`NewKey.store`), so two processes creating one name at once cannot both hand out a key. Keys live in
the store (table `service_keys`), so they survive restarts and every server process on that file or database agrees
on them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ttlearn.memory.store import is_database_url

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
"""Namespace names: lower-case letters, digits, '_' and '-', at most 63 characters; nothing a path or SQL could use."""
MIN_ADMIN_KEY_CHARS = 32
"""An admin key shorter than this could be guessed (token_urlsafe(32) makes 43 characters)."""
ADMIN_KEY_ENV = "TTLEARN_ADMIN_KEY"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS service_keys (
    id TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    secret_sha256 TEXT NOT NULL,
    created REAL NOT NULL,
    revoked REAL
)
"""


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def read_admin_key(path: Path | None) -> str:
    """The admin key: the first line of `path` when given, else the TTLEARN_ADMIN_KEY environment variable."""
    if path is not None:
        if not path.is_file():
            raise FileNotFoundError(f"--admin-key-file {path} does not exist")
        lines = path.read_text().strip().splitlines()
        key = lines[0].strip() if lines else ""
        source = str(path)
    else:
        key = os.environ.get(ADMIN_KEY_ENV, "").strip()
        source = ADMIN_KEY_ENV
    if len(key) < MIN_ADMIN_KEY_CHARS:
        raise ValueError(
            f"the memory service needs an admin key of at least {MIN_ADMIN_KEY_CHARS} characters (from {source}); "
            f"make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return key


class AdminKey:
    """The admin key, kept as its digest; `matches` compares digests in constant time."""

    def __init__(self, key: str) -> None:
        if len(key) < MIN_ADMIN_KEY_CHARS:
            raise ValueError(f"the admin key needs at least {MIN_ADMIN_KEY_CHARS} characters")
        self._digest = _sha256(key)

    def matches(self, given: str) -> bool:
        return hmac.compare_digest(_sha256(given), self._digest)


@dataclass(frozen=True)
class NewKey:
    """A key not stored yet: `text` is what its caller is shown once, `store` writes its hash."""

    key_id: str
    secret: str

    @classmethod
    def make(cls) -> NewKey:
        return cls(secrets.token_hex(6), secrets.token_urlsafe(32))

    @property
    def text(self) -> str:
        return f"{self.key_id}.{self.secret}"

    def store(self, conn: Any, namespace: str) -> None:
        """Store the key for `namespace` inside the caller's transaction on `conn`, revoking its older keys there."""
        now = time.time()
        conn.execute("UPDATE service_keys SET revoked = ? WHERE namespace = ? AND revoked IS NULL", (now, namespace))
        conn.execute(
            "INSERT INTO service_keys (id, namespace, secret_sha256, created) VALUES (?, ?, ?, ?)",
            (self.key_id, namespace, _sha256(self.secret), now),
        )


@dataclass(frozen=True)
class KeyOwner:
    namespace: str
    key_id: str


class KeyRing:
    """The namespace keys in the store (a SQLite file or a postgresql:// database), behind one connection that a
    lock shares between threads."""

    def __init__(self, path: str | Path, *, timeout_s: float = 60.0) -> None:
        if is_database_url(path):  # its schema migration made the table, typed for PostgreSQL
            from ttlearn.memory.postgres import connect

            self._conn: Any = connect(str(path), timeout_s)
        else:
            self._conn = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=None, check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock:
            self._conn.execute(_SCHEMA)

    def issue(self, namespace: str) -> str:
        """A new key for `namespace`; every older key of it stops working in the same transaction."""
        key = NewKey.make()
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                key.store(self._conn, namespace)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return key.text

    def revoke(self, namespace: str) -> None:
        """Revoke every key of `namespace`."""
        with self._lock:
            self._conn.execute(
                "UPDATE service_keys SET revoked = ? WHERE namespace = ? AND revoked IS NULL", (time.time(), namespace)
            )

    def has_key(self, namespace: str) -> bool:
        with self._lock:
            row = self._conn.execute(
                "SELECT 1 FROM service_keys WHERE namespace = ? AND revoked IS NULL", (namespace,)
            ).fetchone()
        return row is not None

    def owner(self, key: str) -> KeyOwner | None:
        """Whose live key `key` is, or None for a malformed, unknown or revoked key."""
        key_id, dot, secret = key.partition(".")
        if not dot or not secret:
            return None
        with self._lock:
            row = self._conn.execute(
                "SELECT namespace, secret_sha256 FROM service_keys WHERE id = ? AND revoked IS NULL", (key_id,)
            ).fetchone()
        if row is None or not hmac.compare_digest(_sha256(secret), row[1]):
            return None
        return KeyOwner(row[0], key_id)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
