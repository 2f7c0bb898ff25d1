"""Write `src/ttlearn/data/db_bench.json.gz` from MemRL's released LifelongAgentBench files, with each task's ground
truth on both engines, and print the counts `docs/db_bench.md` cites.

    python benchmarks/db_bench_truth.py SOURCE_DIR

SOURCE_DIR holds `db_bench_runtime_learning_data.json`, `db_train.json` and `db_val.json` from `data/llb/` of
MemTensor/MemRL at 7c3beba (e.g. `git show 7c3beba:data/llb/db_train.json > SOURCE_DIR/db_train.json`). Every gold
query runs on SQLite (sandboxed, as the agent's SQL runs) and on a MariaDB this script starts
(`envs._db_bench_truth.gold_truth`; `repeats` says how often). The file is written byte-for-byte reproducibly
(sorted keys, gzip without a time stamp); its SHA-256 is printed for `data/db_bench.py`.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import time
from collections import Counter
from pathlib import Path

from ttlearn.data.db_bench import DATA_FILE, ENGINES, task_from_json
from ttlearn.envs._db_bench_mariadb import MariaDBEngine
from ttlearn.envs._db_bench_sqlite import SQLiteEngine
from ttlearn.envs._db_bench_truth import GOLD_LIMITS, gold_truth
from ttlearn.sandbox.mariadb import temporary_server

SOURCE_COMMIT = "7c3beba1244d707b74207b494be254f391819e09"
MARIADB_RUNS = 3


def released_tasks(source: Path) -> list[dict]:
    """The 500 tasks under their keys, each with the split whose file holds it (train and val hold the same tasks
    as the runtime-learning file under the same keys, without `sample_index` and the row-list hash)."""
    everything = json.loads((source / "db_bench_runtime_learning_data.json").read_text())
    splits = {name: json.loads((source / f"db_{name}.json").read_text()) for name in ("train", "val")}
    tasks = []
    for key, entry in sorted(everything.items(), key=lambda item: int(item[0])):
        (split,) = [name for name, held in splits.items() if key in held]
        held = splits[split][key]
        if any(held[field] != entry[field] for field in held):
            raise ValueError(f"task {key} differs between the runtime-learning file and db_{split}.json")
        table = entry["table_info"]
        tasks.append(
            {
                "id": int(key),
                "split": split,
                "instruction": entry["instruction"],
                "table": {
                    "name": table["name"],
                    "columns": [[c["name"], c["type"]] for c in table["column_info_list"]],
                    "rows": table["row_list"],
                },
                "skills": entry["skill_list"],
                "answer": entry["answer_info"],
            }
        )
    return tasks


def repeats(task, engine: str) -> int:
    """How often each gold runs: once, except a SELECT with an ORDER BY on MariaDB, `MARIADB_RUNS` times, a guard that
    the order of tied rows stays fixed there (it did not before the server kept its temporary tables on disk:
    `sandbox/mariadb.py`); a task whose runs disagree, none reproducing the recorded answer, is left out."""
    ordered = task.answer_md5 is None and "ORDER BY" in task.gold.upper()
    return MARIADB_RUNS if engine == "mariadb" and ordered else 1


def truth_json(truth) -> dict:
    data = {"source": truth.source}
    if truth.rows is not None:
        data["rows"] = [list(row) for row in truth.rows]
    if truth.md5 is not None:
        data["md5"] = truth.md5
    if truth.why:
        data["why"] = truth.why
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path)
    parser.add_argument("--out", type=Path, default=DATA_FILE)
    args = parser.parse_args()
    tasks = released_tasks(args.source)
    started = time.perf_counter()
    with temporary_server() as server:
        engines = {"sqlite": SQLiteEngine(GOLD_LIMITS), "mariadb": MariaDBEngine(GOLD_LIMITS, server)}
        for number, data in enumerate(tasks, 1):
            task = task_from_json(data)
            data["truth"] = {
                engine: truth_json(gold_truth(task, engines[engine], runs=repeats(task, engine))) for engine in ENGINES
            }
            print(f"\r{number}/{len(tasks)}", end="", file=sys.stderr)
    print(f"\n{time.perf_counter() - started:.0f} s", file=sys.stderr)
    document = {
        "source": f"github.com/MemTensor/MemRL at {SOURCE_COMMIT}, data/llb/ (MIT); db_bench.LICENSE.md",
        "tasks": tasks,
    }
    raw = json.dumps(document, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    packed = gzip.compress(raw, compresslevel=9, mtime=0)
    args.out.write_bytes(packed)
    for engine in ENGINES:
        counts = Counter(t["truth"][engine]["source"] for t in tasks)
        splits = {s: Counter(t["truth"][engine]["source"] for t in tasks if t["split"] == s) for s in ("train", "val")}
        print(engine, dict(counts), {s: dict(c) for s, c in splits.items()})
    print(f"{args.out}: {len(packed):,} bytes, sha256 {hashlib.sha256(packed).hexdigest()}")


if __name__ == "__main__":
    main()
