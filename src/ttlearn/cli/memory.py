"""`ttlearn memory …`: fork, diff, inspect and explain the memories a run left behind, and migrate, export, import
and prune a MemRL store."""

from __future__ import annotations

import difflib
import json
import math
import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from ttlearn.cli.common import console, friendly, keep_password_out, print_plain, reads_runs
from ttlearn.eval.retrievals import q_effect
from ttlearn.runs import Run, RunDir, read_config
from ttlearn.untrusted import read_json, write_atomic

MAX_EXPORT_BYTES = 256 << 20
"""The largest export `memory import` reads (a namespace at the memory service's default quota exports ~100 MB)."""


TRUST_STORE_HELP = (
    "The run's memory database (postgresql://…) when you trust it, its password here or in PGPASSWORD; a SQLite file "
    "needs no flag."
)

memory_app = typer.Typer(help="Inspect, fork and compare the memory snapshots of a run.", no_args_is_help=True)


@memory_app.command("fork")
@friendly
@reads_runs
def memory_fork(
    run_dir: Path = typer.Argument(..., help="The run whose memory to fork."),
    unit: int = typer.Option(..., "--unit", "--game", help="Fork the memory as it was after this unit (a game)."),
    out: Path = typer.Option(..., help="Folder for the fork; pass it to `ttlearn run --memory-from`."),
) -> None:
    """Copy the memory after unit N into a new folder, to continue from it with `run --memory-from`."""
    if out.exists():
        raise FileExistsError(f"{out} already exists; fork into a new folder")
    snapshot = Run.open(run_dir).snapshot(unit)
    RunDir(out).write_fork(run_dir, unit, snapshot)
    console.print(f"forked memory of {run_dir} after unit {unit} (hash {snapshot['hash'][:12]}) → {out}")


@memory_app.command("diff")
@friendly
@reads_runs
def memory_diff(
    run_dir: Path = typer.Argument(..., help="A run directory."),
    a: int = typer.Option(..., "--from", help="Earlier unit."),
    b: int = typer.Option(..., "--to", help="Later unit."),
) -> None:
    """Show what changed in the memory between two units (a unified diff of the snapshots)."""
    run = Run.open(run_dir)
    before, after = (json.dumps(run.snapshot(u)["state"], indent=1, sort_keys=True).splitlines() for u in (a, b))
    lines = list(difflib.unified_diff(before, after, f"after unit {a}", f"after unit {b}", lineterm=""))
    print_plain("\n".join(lines) if lines else "no change")


def _memrl_store(run_dir: Path, trust_store: list[str]) -> tuple[Any, str, str]:
    """The MemRL store of a run, its namespace and the run id the session gave it. A run directory may name any
    file as its store: a SQLite file is opened read-only; a database only when named again with --trust-store (a
    config must not choose where ttlearn connects, with whatever credentials this process holds)."""
    from ttlearn.memory.store import MemoryStore, is_database_url

    run = RunDir(run_dir)
    options = read_config(run_dir).memory_options
    location = str(options.get("store") or run.memrl_store)
    if is_database_url(location):
        if location not in [keep_password_out(store) for store in trust_store]:
            raise ValueError(
                f"{run_dir} keeps its memories in a database, and a run directory does not choose where ttlearn "
                "connects; if that database is yours, name it again: --trust-store URL"
            )
        store = MemoryStore(location)
    elif not Path(location).exists():
        raise FileNotFoundError(f"{run_dir} has no MemRL store ({location}); was it run with --memory memrl/memp/rag?")
    else:
        store = MemoryStore(location, read_only=True)
    return store, str(options.get("namespace", "default")), run.path.name


@memory_app.command("inspect")
@friendly
@reads_runs
def memory_inspect(
    run_dir: Path = typer.Argument(..., help="A run made with a MemRL-family memory."),
    limit: int = typer.Option(20, help="How many memories to show."),
    trust_store: list[str] = typer.Option([], help=TRUST_STORE_HELP),
    run_id: Optional[str] = typer.Option(None, help="Only the items this run wrote (a shared store holds many)."),
    unit: Optional[int] = typer.Option(None, "--unit", "--game", help="Only the items of this unit (a game)."),
    key: Optional[str] = typer.Option(None, help="Only the items a memory-service key wrote (its id, before the dot)."),
    exchange: Optional[str] = typer.Option(None, help="Only the items the learning proxy's exchange wrote."),
) -> None:
    """List the memories of a MemRL store, newest first, with Q-value, visits, last reward and provenance (the run,
    unit and attempt, the service key and proxy exchange, and when each was written)."""
    store, namespace, _ = _memrl_store(run_dir, trust_store)
    table = Table(title=f"MemRL store · namespace {namespace}")
    columns = ("id", "run", "unit", "attempt", "key", "exchange", "written", "Q", "visits", "last r", "intent")
    for column in (*columns, "experience"):
        table.add_column(column, overflow="fold")
    items = store.inspect(namespace, limit=limit, run_id=run_id, unit=unit, key_id=key, exchange=exchange)
    for item in items:
        last = "" if item.last_reward is None else f"{item.last_reward:+g}"
        table.add_row(
            str(item.id),
            item.run_id or "",
            "" if item.unit is None else str(item.unit),
            str(item.episode),
            item.key_id or "",
            item.exchange or "",
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(item.created)),
            f"{item.q_value:+.3f}",
            str(item.visits),
            last,
            item.intent[:60],
            item.experience[:120],
        )
    console.print(table)


DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}


def parse_duration(text: str) -> float:
    """Seconds of a duration written as a number and a unit (`90s`, `15m`, `12h`, `30d`) or bare seconds."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in DURATION_UNITS else (text, "s")
    try:
        seconds = float(number) * DURATION_UNITS[unit]
    except ValueError:
        raise ValueError(f"a duration is a number and s, m, h or d (e.g. 30d), got {text!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"a duration is positive and finite, got {text!r}")
    return seconds


@memory_app.command("policy")
@friendly
def memory_policy(
    store: str = typer.Argument(..., help="A MemRL store: a SQLite file or postgresql://USER@HOST/DB."),
    namespace: str = typer.Option("default", help="The namespace."),
    ttl: Optional[str] = typer.Option(None, help="Forget items untouched this long: 30d, 12h, 15m, 90s; 'none'."),
    capacity: Optional[str] = typer.Option(None, help="Keep at most this many items (MemRL's signals evict); 'none'."),
) -> None:
    """Show a namespace's forgetting policy, or change it with --ttl / --capacity (docs/serve.md, Forgetting). Every
    write that adds items, and `ttlearn memory prune`, applies it."""
    from ttlearn.memory.forgetting import Policy
    from ttlearn.memory.store import MemoryStore

    with MemoryStore(_existing_store(store)) as target:
        policy = target.policy(namespace)
        if ttl is not None or capacity is not None:
            policy = Policy(
                policy.ttl_s if ttl is None else None if ttl == "none" else parse_duration(ttl),
                policy.capacity if capacity is None else None if capacity == "none" else _count(capacity),
            )
            target.set_policy(namespace, policy)
    ttl_text = "none" if policy.ttl_s is None else f"{policy.ttl_s:g} s"
    capacity_text = "none" if policy.capacity is None else f"{policy.capacity} items"
    console.print(f"namespace {namespace!r}: time to live {ttl_text}, capacity {capacity_text}")


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"a capacity is a whole number of items ≥ 1, or 'none'; got {text!r}")
    return int(text)


@memory_app.command("prune")
@friendly
def memory_prune(
    store: str = typer.Argument(..., help="A MemRL store: a SQLite file or postgresql://USER@HOST/DB."),
    namespace: list[str] = typer.Option([], help="The namespaces to prune (repeat it); default: every one."),
) -> None:
    """Apply each namespace's forgetting policy now (`ttlearn memory policy`): items past the time to live, then
    items over the capacity (lowest Q + 1/√(1 + visits) − age/30 d first), then intent keys left without items."""
    from ttlearn.memory.store import MemoryStore

    with MemoryStore(_existing_store(store)) as target:
        for name in namespace or [info["name"] for info in target.namespaces()]:
            done = target.prune(name)
            console.print(
                f"{name}: {done.expired} expired, {done.evicted} evicted, {done.intents} intent keys left empty removed"
            )


def _existing_store(store: str) -> str:
    from ttlearn.memory.store import is_database_url

    store = keep_password_out(store)
    if not is_database_url(store) and not Path(store).exists():
        raise FileNotFoundError(f"no store at {store}")
    return store


@memory_app.command("explain")
@friendly
@reads_runs
def memory_explain(
    run_dir: Path = typer.Argument(..., help="A run made with a MemRL-family memory."),
    unit: Optional[int] = typer.Option(None, "--unit", "--game", help="The unit (a game) whose retrievals to show."),
    trust_store: list[str] = typer.Option([], help=TRUST_STORE_HELP),
) -> None:
    """Show which memories were retrieved for a unit, with similarity, Q and the combined score; without --unit,
    what Q did over the whole run (how often its ranking or its q_min filter changed what was shown)."""
    store, namespace, run_id = _memrl_store(run_dir, trust_store)
    if unit is None:
        records = store.retrievals(namespace, run_id=run_id)
        counts = q_effect((r.candidates, r.chosen, r.explored) for r in records)
        console.print(
            f"{counts['retrievals']} retrievals, {counts['with_candidates']} with a candidate above δ: Q made the "
            f"memory show a less similar item in {counts['less_similar']} and chose among equally similar ones in "
            f"{counts['tie_broken']}; its q_min filter hid a candidate in {counts['filtered']}; "
            f"{counts['explored']} were ε-random picks"
        )
        return
    records = store.retrievals(namespace, run_id=run_id, unit=unit)
    if not records and not any(r.unit is not None for r in store.retrievals(namespace, run_id=run_id)):
        records = store.retrievals(namespace, run_id=run_id, episode=unit)  # a run before units were recorded
    if not records:
        console.print(f"no retrieval was recorded for unit {unit}")
    for number, record in enumerate(records, start=1):
        console.rule(f"retrieval {number} of unit {unit}{' · ε-exploration' if record.explored else ''}")
        console.print(f"query: {record.query}", markup=False, highlight=False)
        for cand in record.candidates:
            mark = "→" if cand["id"] in record.chosen else " "
            score = "dropped (Q < q_min)" if cand["score"] is None else f"score {cand['score']:+.3f}"
            console.print(
                f"{mark} #{cand['id']}  sim {cand['sim']:.3f}  Q {cand['q']:+.3f}  {score}",
                markup=False,
                highlight=False,
            )


@memory_app.command("reembed")
@friendly
def memory_reembed(
    store: Path = typer.Argument(..., help="A MemRL SQLite store."),
    namespace: str = typer.Option("default", help="Namespace to migrate."),
    embedder: str = typer.Option(..., help="The new embedder, e.g. minilm or hash."),
) -> None:
    """Re-embed every intent key of a namespace with another embedder (the explicit migration)."""
    from ttlearn.memory.embed import make_embedder
    from ttlearn.memory.store import MemoryStore

    if not store.exists():
        raise FileNotFoundError(f"no store at {store}")
    count = MemoryStore(store).reembed(namespace, make_embedder(embedder))
    console.print(f"re-embedded {count} intent keys of {namespace!r} with {embedder}")


@memory_app.command("export")
@friendly
def memory_export(
    store: str = typer.Argument(..., help="A MemRL store: a SQLite file or postgresql://USER@HOST/DB."),
    out: Path = typer.Option(..., help="The JSON file to write (refused if it exists)."),
) -> None:
    """Write every namespace of a store (items, Q, visits, provenance, vectors, retrieval logs) to one JSON file,
    to move it between SQLite and PostgreSQL with `ttlearn memory import`."""
    from ttlearn.memory.store import MemoryStore, is_database_url

    store = keep_password_out(store)
    if not is_database_url(store) and not Path(store).exists():
        raise FileNotFoundError(f"no store at {store}")
    if out.exists():
        raise FileExistsError(f"{out} already exists; export into a new file")
    with MemoryStore(store) as source:
        dump = source.export_all()
    write_atomic(out, json.dumps(dump))  # a link or FIFO planted at the temporary name is replaced, not written through
    console.print(f"exported {len(dump['namespaces'])} namespaces of {store} → {out}")


@memory_app.command("import")
@friendly
def memory_import(
    store: str = typer.Argument(..., help="The store to fill: a SQLite file (created) or postgresql://USER@HOST/DB."),
    dump: Path = typer.Argument(..., help="A file written by `ttlearn memory export`."),
) -> None:
    """Add the namespaces of an export to a store that does not hold them yet (ids are kept where free)."""
    from ttlearn.memory.snapshot import prepared_export
    from ttlearn.memory.store import MemoryStore

    store = keep_password_out(store)
    data = read_json(dump, limit=MAX_EXPORT_BYTES)  # a regular file, bounded in size and nesting
    prepared_export(data)  # checked whole before the store is even opened (or created)
    with MemoryStore(store) as target:
        count = target.import_all(data)
    console.print(f"imported {count} namespaces from {dump} → {store}")
