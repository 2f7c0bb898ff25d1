"""`ttlearn arena --ray` with its runs' MemRL memory in one PostgreSQL database: 4 Ray workers on local processes,
against the same arena played by one worker."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")
pytest.importorskip("psycopg")

from ttlearn.memory.store import MemoryStore  # noqa: E402
from ttlearn.rollout import arena as arena_mod  # noqa: E402
from ttlearn.rollout.arena import ArenaConfig, execute, prepare  # noqa: E402
from ttlearn.runs import Run  # noqa: E402

NAMESPACES = {"own0": "own0", "own1": "own1", "shared0": "shared", "shared1": "shared"}
"""Contestant → namespace: two runs that learn alone, whose records cannot depend on the order the workers run in,
and two that learn into one namespace at the same time."""


def arena(url: str) -> ArenaConfig:
    options = {"store": url, "embedder": "hash", "write": "trajectory", "delta": 0.5}
    return ArenaConfig.model_validate(
        {
            "env": "rps",
            "env_options": {"rounds": 5},
            "memories": [
                {"name": "memrl", "label": label, "options": {**options, "namespace": namespace, "run_id": label}}
                for label, namespace in NAMESPACES.items()
            ],
            "player": "scripted:learner",
            "opponents": ["cycle3"],
            "seeds": 1,
            "games": 4,
        }
    )


def without_timing(value: Any) -> Any:
    """A record without what differs between two plays of it: wall times, and the memory's hash (its state points
    at the database, whose URL and retrieval-log ids differ)."""
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if k not in ("wall_s", "memory_hash")}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


def another_database(url: str, name: str) -> str:
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    return url.rsplit("/", 1)[0] + "/" + name


def test_four_ray_workers_on_one_postgresql_memory(postgres_url: str, tmp_path: Path) -> None:
    ray_items, _ = prepare(arena(postgres_url), tmp_path / "ray")
    finished = [item.label for item, outcome in execute(ray_items, workers=4, ray=True, ray_address="local")]
    assert sorted(finished) == sorted(NAMESPACES)

    reference_url = another_database(postgres_url, "arena_one_worker")
    one_items, _ = prepare(arena(reference_url), tmp_path / "one")
    for item in one_items:  # one worker, in plan order
        arena_mod.play_item(str(item.path), item.config.model_dump_json())

    for ray_item, one_item in zip(ray_items, one_items):
        played, reference = Run.open(ray_item.path).records, Run.open(one_item.path).records
        assert len(played) == len(reference) == 4
        if NAMESPACES[ray_item.label] != "shared":
            assert without_timing(played) == without_timing(reference)
    contexts = [u["attempts"][0]["info"]["context"] for u in Run.open(ray_items[0].path).records]
    assert contexts[0] == "" and all(contexts[1:])  # the memory was read: later games saw earlier ones

    with MemoryStore(postgres_url) as store:  # no lost Q update where two workers learnt into one namespace at once
        chosen_per_episode = {}
        for log in store.retrievals("shared"):
            chosen_per_episode.setdefault((log.run_id, log.unit, log.episode), set()).update(log.chosen)
        expected = Counter(i for chosen in chosen_per_episode.values() for i in chosen)
        visits = {item.id: item.visits for item in store.inspect("shared")}
        assert len({run for run, _, _ in chosen_per_episode}) == 2 and sum(expected.values()) > 4
        assert visits == {item_id: expected.get(item_id, 0) for item_id in visits}
