"""`ttlearn memory …`: fork, diff, inspect and explain the memories a run left behind, and migrate a MemRL store."""

from __future__ import annotations

import difflib
import json
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
) -> None:
    """List the memories of a MemRL store, newest first, with Q-value, visits and last reward."""
    store, namespace, _ = _memrl_store(run_dir, trust_store)
    table = Table(title=f"MemRL store · namespace {namespace}")
    for column in ("id", "unit", "attempt", "Q", "visits", "last r", "intent", "experience"):
        table.add_column(column, overflow="fold")
    for item in store.inspect(namespace, limit=limit):
        last = "" if item.last_reward is None else f"{item.last_reward:+g}"
        table.add_row(
            str(item.id),
            "" if item.unit is None else str(item.unit),
            str(item.episode),
            f"{item.q_value:+.3f}",
            str(item.visits),
            last,
            item.intent[:60],
            item.experience[:120],
        )
    console.print(table)


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
