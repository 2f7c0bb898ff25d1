"""Forgetting: what a namespace's policy removes, a time to live (`ttl_s`) and a capacity (items at most).

Age is measured from an item's `touched` time: when it was written, moved to now each time its Q is updated (the
feedback after it was shown for a task). Not from creation alone, so an old item that agents keep being shown and
rewarded for stays; not from every retrieval, so the read path stays free of writes (a retrieval on any replica, or
in the proxy before its upstream call, costs no transaction) and an item that is shown but never fed back, whose
usefulness nobody measures, still ages.

- TTL: an item untouched for longer than `ttl_s` seconds is removed.
- Capacity: when a namespace holds more items than `capacity`, the ones MemRL's own signals value least go first,
  by `keep_score` (`eviction_order`):

      keep = Q + b / √(1 + visits) − age / H        (b = EVICTION_BONUS, H = EVICTION_HORIZON_S)

  Q is what the item's rewards taught; b / √(1 + visits) is an optimism bonus for an item few tasks have tried (its
  Q is still mostly its starting value: a new item is not evicted before it had its chances, and the bonus fades as
  visits make Q trustworthy, as in an upper confidence bound); age / H charges staleness, one reward unit per H
  seconds untouched. Lowest keep goes first; ties: the less recently touched, then the lower id.

Both are applied in the transaction of every write that adds items (so a namespace never holds more than its
capacity after a write) and by `MemoryStore.prune` (`ttlearn memory prune`), which also deletes the intent keys
left without items. Eviction reads every item of the namespace to rank them (the formula is this module's Python,
one place); so that it does so once per 1 % of the capacity written rather than on every write, a namespace over
its capacity is brought down to `target_size`, 1 % below it. A write leaves the emptied intent keys in place: a
near-duplicate written later joins its key again, and deleting a key makes every process rebuild its vector index
(`memory.index_cache`), too costly on every write.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

EVICTION_BONUS = 1.0
"""b: the optimism for an untried item, in reward units (MemRL's rewards are ±1)."""
EVICTION_HORIZON_S = 30 * 86_400.0
"""H: the seconds untouched that cost one reward unit of keep (30 days)."""


def keep_score(q: float, visits: int, age_s: float) -> float:
    """keep = Q + b / √(1 + visits) − age / H (see the module docstring): the lower, the sooner an item is evicted."""
    return q + EVICTION_BONUS / math.sqrt(1 + visits) - max(0.0, age_s) / EVICTION_HORIZON_S


def eviction_order(items: Sequence[tuple[int, float, int, float]], now: float) -> list[int]:
    """The ids of `items` — (id, Q, visits, touched) — in the order a full namespace evicts them: lowest
    `keep_score` first; ties: the less recently touched, then the lower id."""
    return [row[0] for row in sorted(items, key=lambda row: (keep_score(row[1], row[2], now - row[3]), row[3], row[0]))]


def target_size(capacity: int) -> int:
    """What a namespace over `capacity` is brought down to: 1 % below it (exactly it under 100 items), so the next
    evictions wait for 1 % of the capacity to be written."""
    return capacity - capacity // 100


@dataclass(frozen=True)
class Policy:
    """A namespace's forgetting policy; None: no limit."""

    ttl_s: float | None = None
    capacity: int | None = None

    def __post_init__(self) -> None:
        if self.ttl_s is not None and not (math.isfinite(self.ttl_s) and self.ttl_s > 0):
            raise ValueError(f"a time to live is a positive number of seconds, got {self.ttl_s}")
        if self.capacity is not None and self.capacity < 1:
            raise ValueError(f"a capacity is at least 1 item, got {self.capacity}")


@dataclass(frozen=True)
class Forgotten:
    """What one application of the policy removed."""

    expired: int = 0
    """Items older than the TTL."""
    evicted: int = 0
    """Items over the capacity."""
    intents: int = 0
    """Intent keys left without items (`prune` only)."""


def read_policy(conn: Any, ns_id: int) -> Policy:
    ttl_s, capacity = conn.execute("SELECT ttl_s, capacity FROM namespaces WHERE id = ?", (ns_id,)).fetchone()
    return Policy(ttl_s, None if capacity is None else int(capacity))


def write_policy(conn: Any, ns_id: int, policy: Policy) -> None:
    """Inside a write transaction: namespace `ns_id`'s policy becomes `policy`."""
    conn.execute("UPDATE namespaces SET ttl_s = ?, capacity = ? WHERE id = ?", (policy.ttl_s, policy.capacity, ns_id))


def count_added(conn: Any, ns_id: int, added: int) -> None:
    """Inside the write transaction that inserted `added` items into namespace `ns_id`: keep its `item_count`."""
    conn.execute("UPDATE namespaces SET item_count = item_count + ? WHERE id = ?", (added, ns_id))


def recount(conn: Any, ns_id: int) -> int:
    """Inside a write transaction: namespace `ns_id`'s `item_count` set to its items, counted; returns it."""
    (count,) = conn.execute("SELECT COUNT(*) FROM items WHERE namespace_id = ?", (ns_id,)).fetchone()
    conn.execute("UPDATE namespaces SET item_count = ? WHERE id = ?", (count, ns_id))
    return int(count)


def forget(conn: Any, ns_id: int, now: float, *, orphans: bool = False) -> Forgotten:
    """Inside a write transaction: apply namespace `ns_id`'s policy at time `now`, keeping its `item_count` (read,
    not counted: the check costs no scan until the namespace is over its capacity); with `orphans` (`prune`), also
    count its items afresh and delete its intent keys that hold no item (the caller then drops the namespace's
    vector indexes)."""
    policy = read_policy(conn, ns_id)
    expired = evicted = intents = 0
    if policy.ttl_s is not None:
        expired = max(0, conn.execute(
            "DELETE FROM items WHERE namespace_id = ? AND touched < ?", (ns_id, now - policy.ttl_s)
        ).rowcount)  # fmt: skip
        count_added(conn, ns_id, -expired)
    (count,) = conn.execute("SELECT item_count FROM namespaces WHERE id = ?", (ns_id,)).fetchone()
    if orphans:
        count = recount(conn, ns_id)
    if policy.capacity is not None and count > policy.capacity:
        rows = conn.execute(
            "SELECT id, q_value, visits, touched FROM items WHERE namespace_id = ?", (ns_id,)
        ).fetchall()
        doomed = eviction_order(rows, now)[: len(rows) - target_size(policy.capacity)]
        conn.executemany("DELETE FROM items WHERE id = ?", [(item_id,) for item_id in doomed])
        evicted = len(doomed)
        conn.execute("UPDATE namespaces SET item_count = ? WHERE id = ?", (len(rows) - evicted, ns_id))
    if orphans:
        intents = conn.execute(
            "DELETE FROM intents WHERE namespace_id = ? AND NOT EXISTS "
            "(SELECT 1 FROM items WHERE items.intent_id = intents.id)",
            (ns_id,),
        ).rowcount
    return Forgotten(expired, evicted, max(0, intents))
