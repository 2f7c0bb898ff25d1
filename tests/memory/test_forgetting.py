"""Forgetting, batches and provenance in the store, on SQLite and on PostgreSQL: the eviction formula against
hand-computed numbers, TTL and capacity applied in the write's transaction and by prune, batches that roll back
whole, and items that say which key, run, unit and exchange wrote them."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from ttlearn.memory.embed import HashEmbedder
from ttlearn.memory.forgetting import (
    EVICTION_HORIZON_S,
    Forgotten,
    Policy,
    eviction_order,
    keep_score,
    target_size,
)
from ttlearn.memory.items import NewItem
from ttlearn.memory.retrieval import q_update_rule
from ttlearn.memory.store import MemoryStore

DAY = 86_400.0


@pytest.fixture
def location(store_location: str) -> str:
    return store_location


def test_keep_score_is_q_plus_an_optimism_bonus_minus_staleness() -> None:
    # keep = Q + 1/√(1 + visits) − age / 30 d
    assert keep_score(0.5, 3, 0.0) == pytest.approx(0.5 + 1 / 2)
    assert keep_score(0.9, 8, 60 * DAY) == pytest.approx(0.9 + 1 / 3 - 2)
    assert keep_score(-0.9, 15, 15 * DAY) == pytest.approx(-0.9 + 1 / 4 - 0.5)
    assert keep_score(0.0, 0, -5.0) == 1.0  # a clock that stepped back ages nothing
    assert EVICTION_HORIZON_S == 30 * DAY


def test_eviction_order_goes_by_keep_then_touched_then_id() -> None:
    now = 100 * DAY
    items = [
        (1, 0.5, 3, now),  # keep 1.0
        (2, -0.5, 0, now),  # 0.5
        (3, 0.9, 8, now - 60 * DAY),  # 0.9 + 0.333 − 2 = −0.767
        (4, -0.9, 15, now - 15 * DAY),  # −0.9 + 0.25 − 0.5 = −1.15
        (6, -0.5, 0, now),  # 0.5, as item 2: the lower id goes first
        (7, 0.0, 0, now - 1.0),  # 1 − 1 s / 30 d, just below 1.0 and above 0.5
    ]
    assert eviction_order(items, now) == [4, 3, 2, 6, 7, 1]
    assert eviction_order([(8, 0.0, 0, 60.0), (9, 0.0, 0, 50.0)], 60.0) == [9, 8]  # 10 s older: a lower keep


def test_a_full_namespace_is_brought_down_to_one_percent_below_its_capacity() -> None:
    assert [target_size(c) for c in (1, 3, 99, 100, 250, 10_000)] == [1, 3, 99, 99, 248, 9_900]


def test_a_policy_refuses_nonsense() -> None:
    for bad in ({"ttl_s": 0.0}, {"ttl_s": math.inf}, {"capacity": 0}):
        with pytest.raises(ValueError, match="time to live|capacity"):
            Policy(**bad)


def added(ns, *intents: str) -> list[int]:
    return [ns.add(NewItem(intent, f"about {intent}", 0.0), join_threshold=2.0).item_id for intent in intents]


def counted(store: MemoryStore, name: str) -> int:
    """The item count the namespace keeps for its capacity, checked against its items."""
    (count,) = store.dialect.conn.execute("SELECT item_count FROM namespaces WHERE name = ?", (name,)).fetchone()
    assert count == len(store.inspect(name))
    return int(count)


def set_touched(store: MemoryStore, ages: dict[int, float]) -> None:
    now = time.time()
    for item_id, age in ages.items():
        store.dialect.conn.execute("UPDATE items SET touched = ? WHERE id = ?", (now - age, item_id))


def test_ttl_forgets_what_was_untouched_for_longer_at_the_next_write_and_at_prune(location: str) -> None:
    with MemoryStore(location) as store:
        ns = store.namespace("n", HashEmbedder(32))
        old, fed, fresh = added(ns, "rock", "paper", "scissors")
        set_touched(store, {old: 3 * DAY, fed: 3 * DAY})
        store.set_policy("n", Policy(ttl_s=2 * DAY))
        assert store.stats("n")["ttl_s"] == 2 * DAY
        ns.update_q([fed], 1.0, q_update_rule(1.0, 0.3))  # its feedback touches it: it stays
        written = ns.write(items=[NewItem("lizard", "about lizard", 0.0)], join_threshold=2.0)
        assert written.forgotten == Forgotten(expired=1)
        assert sorted(m.id for m in store.inspect("n")) == sorted([fed, fresh, written.added[0].item_id])
        assert counted(store, "n") == 3

        pruned = store.prune("n", now=time.time() + 3 * DAY)  # three days on, nothing was touched
        assert pruned == Forgotten(expired=3, intents=4)  # the old item's key had stayed after the write
        assert counted(store, "n") == 0 and store.stats("n")["intents"] == 0
        (again,) = added(ns, "rock")  # the vector index follows the deleted keys
        ids, _ = ns.nearest("rock", 5)
        assert list(ids) == [store.inspect("n")[0].intent_id] and store.inspect("n")[0].id == again


def test_capacity_evicts_by_q_visits_and_age_in_the_writing_transaction(location: str) -> None:
    with MemoryStore(location) as store:
        ns = store.namespace("n", HashEmbedder(32))
        good, bad, untried = added(ns, "rock", "paper", "scissors")
        ns.update_q([good], 1.0, q_update_rule(1.0, 0.3))  # Q 0.3, 1 visit: keep 0.3 + 1/√2 = 1.007
        ns.update_q([bad], -1.0, q_update_rule(-1.0, 0.3))  # Q −0.3, 1 visit: keep 0.407
        store.set_policy("n", Policy(capacity=3))  # untried: Q 0, no visit: keep 1.0
        written = ns.write(items=[NewItem("lizard", "about lizard", 0.0)], join_threshold=2.0)
        assert written.forgotten == Forgotten(evicted=1)
        assert sorted(m.id for m in store.inspect("n")) == sorted([good, untried, written.added[0].item_id])
        assert counted(store, "n") == 3
        assert store.prune("n") == Forgotten(intents=1)  # within capacity; the evicted item's key goes


def test_a_batch_write_rolls_back_whole_when_one_element_fails(location: str) -> None:
    with MemoryStore(location) as store:
        ns = store.namespace("n", HashEmbedder(32))
        batch = [NewItem("rock", "a", 0.0), NewItem("paper", "b", 0.0), NewItem("lizard", "c", 0.0, unit=2**70)]
        if location.startswith("postgresql"):
            from psycopg.errors import NumericValueOutOfRange as too_large
        else:
            too_large = OverflowError
        with pytest.raises(too_large):  # the third does not fit the column, after the first two were inserted
            ns.add_many(batch, join_threshold=2.0)
        assert counted(store, "n") == 0 and store.stats("n")["intents"] == 0
        (kept,) = added(ns, "scissors")
        ids, _ = ns.nearest("rock", 5)  # the index holds none of the rolled-back keys
        assert list(ids) == [store.inspect("n")[0].intent_id]


def test_batch_feedback_is_all_or_nothing_unless_missing_items_are_skipped(location: str) -> None:
    with MemoryStore(location) as store:
        ns = store.namespace("n", HashEmbedder(32))
        a, b = added(ns, "rock", "paper")
        rule = q_update_rule(1.0, 0.5)
        with pytest.raises(ValueError, match=r"items \[999\] are not in namespace"):
            ns.write(feedback=[([a], 1.0, rule), ([b, 999], 1.0, rule)])
        assert {m.id: (m.q_value, m.visits) for m in store.inspect("n")} == {a: (0.0, 0), b: (0.0, 0)}
        written = ns.write(feedback=[([a], 1.0, rule), ([a, b, 999], 1.0, rule)], skip_missing=True)
        assert written.q == [{a: 0.5}, {a: 0.75, b: 0.5}]
        assert {m.id: m.visits for m in store.inspect("n")} == {a: 2, b: 1}


def test_every_item_records_who_wrote_it_and_inspect_filters_on_it(location: str) -> None:
    with MemoryStore(location) as store:
        ns = store.namespace("n", HashEmbedder(32))
        before = time.time()
        first = ns.add(NewItem("rock", "a", 0.0, "run-1", 1, unit=1, key_id="k1", exchange="x1"), join_threshold=2)
        second = ns.add(NewItem("paper", "b", 0.0, "run-2", 2, unit=2, key_id="k2"), join_threshold=2)
        third = ns.add(NewItem("lizard", "c", 0.0, "run-1", 1, unit=2), join_threshold=2)
        newest = store.inspect("n")
        assert [m.id for m in newest] == [third.item_id, second.item_id, first.item_id]
        item = newest[-1]
        assert (item.run_id, item.unit, item.episode, item.key_id, item.exchange) == ("run-1", 1, 1, "k1", "x1")
        assert before <= item.created == item.touched <= time.time()

        def ids(**filters) -> list[int]:
            return [m.id for m in store.inspect("n", **filters)]

        assert ids(key_id="k2") == [second.item_id]
        assert ids(exchange="x1") == [first.item_id]
        assert ids(run_id="run-1") == [third.item_id, first.item_id]
        assert ids(run_id="run-1", unit=2) == [third.item_id]
        assert ids(since=item.created, until=newest[1].created) == [first.item_id]
        assert ids(until=before) == []
        exported = store.export_namespace("n")["items"][0]
        assert (exported["key_id"], exported["exchange"], exported["touched"]) == ("k1", "x1", item.touched)


def test_a_store_export_carries_provenance_and_policy_between_back_ends(location: str, tmp_path: Path) -> None:
    with MemoryStore(location) as source:
        ns = source.namespace("n", HashEmbedder(32))
        ns.add(NewItem("rock", "a", 0.0, "run-1", 1, unit=1, key_id="k1", exchange="x1"), join_threshold=2)
        source.set_policy("n", Policy(ttl_s=3600.0, capacity=10))
        dump = source.export_all()
    assert dump["namespaces"][0]["ttl_s"] == 3600.0 and dump["namespaces"][0]["capacity"] == 10
    with MemoryStore(tmp_path / "copy.sqlite") as target:
        target.import_all(dump)
        assert target.export_all() == dump
        assert target.policy("n") == Policy(3600.0, 10) and counted(target, "n") == 1
