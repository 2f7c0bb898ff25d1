"""`ttlearn memory policy` and `prune` on a store file: the policy is kept in the store, and prune applies it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ttlearn.cli import app
from ttlearn.cli.memory import parse_duration
from ttlearn.memory.embed import HashEmbedder
from ttlearn.memory.items import NewItem
from ttlearn.memory.store import MemoryStore

runner = CliRunner()


def test_parse_duration_reads_units_and_refuses_nonsense() -> None:
    assert [parse_duration(t) for t in ("90", "90s", "15m", "12h", "30d", "0.5d")] == [
        90,
        90,
        900,
        43_200,
        2_592_000,
        43_200,
    ]
    for bad in ("", "d", "-1d", "0", "inf", "3w"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)


def test_policy_is_stored_and_prune_applies_it(tmp_path: Path) -> None:
    path = tmp_path / "mem.sqlite"
    with MemoryStore(path) as store:
        ns = store.namespace("team", HashEmbedder(32))
        for intent in ("rock", "paper", "scissors"):
            ns.add(NewItem(intent, intent, 0.0), join_threshold=2.0)
        store.dialect.conn.execute("UPDATE items SET touched = ? WHERE intent_id = 1", (time.time() - 2 * 86_400,))
    shown = runner.invoke(app, ["memory", "policy", str(path), "--namespace", "team", "--ttl", "1d", "--capacity", "1"])
    assert shown.exit_code == 0 and "time to live 86400 s, capacity 1 items" in shown.output
    pruned = runner.invoke(app, ["memory", "prune", str(path)])
    assert pruned.exit_code == 0 and "team: 1 expired, 1 evicted, 2 intent keys left empty removed" in pruned.output
    cleared = runner.invoke(app, ["memory", "policy", str(path), "--namespace", "team", "--ttl", "none"])
    assert "time to live none, capacity 1 items" in cleared.output
    refused = runner.invoke(app, ["memory", "policy", str(path), "--namespace", "team", "--capacity", "0"])
    assert refused.exit_code == 2 and "capacity is a whole number" in refused.output
    with MemoryStore(path) as store:
        assert [m.intent for m in store.inspect("team")] == ["scissors"]  # paper's keep was older by a moment
