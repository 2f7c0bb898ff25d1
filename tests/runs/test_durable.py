"""Durable files: snapshots stored once by content, a torn write dropped, wall-clock fields told apart."""

from __future__ import annotations

import json

import pytest

from ttlearn.runs import SnapshotStore, without_times


def memrl_like_state(tasks: int) -> dict:
    """A carried memory after `tasks` tasks: one new item per task (a 1.5 kB text), and every task updates the Q of
    the three items it retrieved, as MemRL's does."""
    items = [{"id": i, "text": f"{i} " + "x" * 1500, "q": 0.0} for i in range(tasks)]
    for t in range(tasks):
        for i in (t * 7 % tasks, t * 13 % tasks, t * 29 % tasks):
            items[i]["q"] += 0.1
    return {"memories": {"items": items}, "retrieved": [1, 2], "rng": {"state": tasks}}


def test_snapshots_are_stored_once_by_content_and_grow_linearly(tmp_path):
    store = SnapshotStore(tmp_path / "snapshots.jsonl")
    sizes, keys = [0], []
    for tasks in range(1, 201):
        keys.append(store.put(memrl_like_state(tasks)))
        sizes.append(store.path.stat().st_size)
    first, second = sizes[100] - sizes[0], sizes[200] - sizes[100]
    assert second < 1.3 * first  # quadratic growth would make the second hundred tasks cost 3x the first
    whole = sum(len(json.dumps(memrl_like_state(t))) for t in range(1, 201))
    assert sizes[-1] < whole / 10  # what embedding every state in every record cost
    assert store.put(memrl_like_state(200)) == keys[-1] and store.path.stat().st_size == sizes[-1]  # stored once
    reread = SnapshotStore(store.path)
    assert [reread.get(keys[t - 1]) for t in (1, 77, 200)] == [memrl_like_state(t) for t in (1, 77, 200)]


def test_a_torn_snapshot_write_is_dropped_before_the_next_one(tmp_path):
    store = SnapshotStore(tmp_path / "snapshots.jsonl")
    kept = store.put(memrl_like_state(3))
    with open(store.path, "a") as fh:
        fh.write('{"hash": "abc", "val')  # a write cut by a kill
    store = SnapshotStore(store.path)
    later = store.put(memrl_like_state(4))
    reread = SnapshotStore(store.path)
    assert reread.get(kept) == memrl_like_state(3) and reread.get(later) == memrl_like_state(4)
    with pytest.raises(ValueError, match="reserve"):
        store.put({"notes": {"$chunks": []}})


def test_without_times_drops_every_wall_clock_field_and_nothing_else() -> None:
    record = {
        "task": 1,
        "wall_s": 3.2,
        "calls": [{"wall_s": 1.0, "completion": {"text": "x", "latency_s": 0.9}}],
        "attempts": [{"info": {"llm_s": 0.5, "tokens": 7}}],
        "memories": {"items": [{"created": 1796237000.68, "text": "SELECT 1"}]},
    }
    kept = {
        "task": 1,
        "calls": [{"completion": {"text": "x"}}],
        "attempts": [{"info": {"tokens": 7}}],
        "memories": {"items": [{"text": "SELECT 1"}]},
    }
    assert without_times(record) == kept
