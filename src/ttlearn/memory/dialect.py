"""What a memory store's database does its own way, behind one small object: `MemoryStore` runs the same SQL on a
SQLite file (`memory.sqlite.SqliteDialect`) and on PostgreSQL (`memory.postgres.PostgresDialect`), and asks its
dialect only for what differs: how a write transaction runs and retries, how intent writers are serialised, how a
restore's explicit ids move the id sequence, how a row is locked for reading, how a JSON export's text bytes are
counted, whether another connection wrote since, and where vector indexes are saved."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, BinaryIO, Protocol, TypeVar

from ttlearn.memory.vector_index import VectorIndex

T = TypeVar("T")


class Dialect(Protocol):
    location: str
    """Where the store is, fit to print (a database URL without its password)."""
    conn: Any
    """Runs the store's SQL as sqlite3 does: `?` placeholders, `lastrowid` after an INSERT, and `BEGIN` … `COMMIT`
    around several reads that must see one snapshot."""
    row_lock: str
    """What a SELECT adds to lock the rows it reads until the transaction ends."""

    def column(self, name: str) -> str:
        """SQL for a column of items or retrievals that a schema version added (`unit`, `key_id`, `exchange`,
        `touched`; `i.unit` with a table's alias): the column, or what stands in for it where an old file is read as
        it is (`NULL`, `created`)."""
        ...

    def write(self, body: Callable[[Any], T]) -> T:
        """Run `body(conn)` in one write transaction, retried while it loses a race; commit, or roll back and raise."""
        ...

    def lock_intents(self, conn: Any, ns_id: int) -> None:
        """Serialise the writers of namespace `ns_id`'s intent keys until the transaction ends."""
        ...

    def ids_kept(self, conn: Any, table: str) -> None:
        """Rows of `table` were inserted with explicit ids: make sure the next id the table issues is above them."""
        ...

    def json_bytes(self, column: str) -> str:
        """SQL: the bytes of a text column as a JSON export writes it (escapes counted)."""
        ...

    def data_version(self) -> int | None:
        """A number that changes when another connection commits; None when there is no such number (then a vector
        index catches up before every use)."""
        ...

    def read_index(self, ns_id: int, generation: int, rewrites: int) -> BinaryIO | None:
        """Namespace `ns_id`'s saved vector index (`VectorIndex.write`'s bytes) if one is saved, as a binary file;
        a dialect may skip one it knows was saved under other counters than `generation` and `rewrites`."""
        ...

    def save_index(self, ns_id: int, index: VectorIndex) -> None:
        """Save namespace `ns_id`'s vector index so that a reader sees the whole new one or the old one; a failure
        is a warning, never an error (the store works without it)."""
        ...

    def integrity_check(self) -> str:
        """Says "ok", or what is wrong."""
        ...

    def close(self) -> None: ...
