"""The one adapter for run directories written before one config existed, so they still read, replay to the same
scores and resume. Three layouts:

- a session: config.json + events.jsonl (every LLM call and step of a game as lines of their own, then its "game"
  record), the state after each game by hash in snapshots.jsonl, or, older, in snapshots/game_NNNN.json;
- a trial run: trials.json + tasks.jsonl (one record per task; older records embed their memory state);
- a fork of an old session: fork.json + snapshots/game_NNNN.json.

Each old record becomes a unit record (`Run.finish`'s schema) marked "legacy" with its layout, and each old config a
`RunConfig` whose `seeding` names the old rule. A resumed old run appends its new units to units.jsonl; the old
files are never written again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ttlearn.runs.config import LAMER_ATTEMPTS, RunConfig, parse_recorded
from ttlearn.runs.durable import read_durable
from ttlearn.runs.layout import OldLayout, RunDir
from ttlearn.untrusted import UntrustedFileError, read_json, write_atomic


def layout(run_dir: RunDir) -> str | None:
    """ "session", "trials", or None where the directory holds no old run. A session is told from an old trainer's
    directory (which also has a config.json, `OldLayout.SESSION_CONFIG`) by its events file."""
    if (run_dir / OldLayout.TRIAL_CONFIG).is_file():
        return "trials"
    if (run_dir / OldLayout.SESSION_CONFIG).is_file() and (run_dir / OldLayout.EVENTS).is_file():
        return "session"
    return None


def files(run_dir: RunDir) -> tuple[str, str] | None:
    """The names of an old run's config and records files, or None where the directory holds no old run."""
    found = layout(run_dir)
    if found is None:
        return None
    if found == "trials":
        return OldLayout.TRIAL_CONFIG, OldLayout.TASKS
    return OldLayout.SESSION_CONFIG, OldLayout.EVENTS


def read_config(run_dir: RunDir) -> RunConfig | None:
    """The config of an old run as a `RunConfig`, or None where there is none."""
    found = layout(run_dir)
    if found is None:
        return None
    path = run_dir / (OldLayout.TRIAL_CONFIG if found == "trials" else OldLayout.SESSION_CONFIG)
    data = read_json(path)
    if not isinstance(data, dict):
        raise UntrustedFileError(f"{path} must hold a JSON object")
    data = {k: v for k, v in data.items() if k != "kind"}
    if found == "trials":
        data["units"] = data.pop("tasks", 10)
        data.setdefault("attempts", LAMER_ATTEMPTS)
        carried = bool(data.get("carry_memory")) or data.get("epochs", 1) > 1 or data.get("validation_tasks", 0) > 0
        data.update(carry_memory=carried, seeding="trials-v1")
        data.setdefault("version", "unrecorded")  # trial runs did not record it
    else:
        data["units"] = data.pop("games", 6)
        data.update(attempts=1, carry_memory=True, seeding="session-v1")
    if data.get("early_stop") is None:
        data["early_stop"] = data.get("memory", "none") != "none"
    return parse_recorded(data)


def read_records(run_dir: RunDir, repair: bool) -> list[dict[str, Any]]:
    """The finished units of an old run, as unit records (none for a directory of today's layout); `repair`: the
    writer's reading, which cuts a torn tail."""
    found = layout(run_dir)
    if found == "trials":
        found = run_dir.records_file(OldLayout.TASKS)
        tasks = read_durable(found, repair=repair) if found else []
        return [_from_task(index, record) for index, record in enumerate(tasks, start=1)]
    if found == "session":
        lines = read_durable(run_dir / OldLayout.EVENTS, repair=repair, ends_block=_is_game)
        calls: dict[int, list[dict[str, Any]]] = {}
        for line in lines:
            if line.get("type") == "call":
                calls.setdefault(line.get("game", 0), []).append(line)
        return [_from_game(line, calls.get(line["game"], [])) for line in lines if _is_game(line)]
    return []


def rewrite(run_dir: RunDir, records: list[dict[str, Any]]) -> None:
    """Write an old trial run's task records back to their own file (`ttlearn rejudge` adds verdicts beside the
    recorded ones), as they were read but for what the records now hold."""
    if any(r["legacy"] != "trials" for r in records):
        raise ValueError(f"{run_dir.path} is an old session of games; its records are read, never rewritten")
    added = ("index", "score", "legacy")
    lines = [{k: v for k, v in r.items() if k not in added} for r in records]
    write_atomic(run_dir / OldLayout.TASKS, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines))


def _is_game(record: dict[str, Any]) -> bool:
    """An old session's game record, the line that made its game durable."""
    return record.get("type") == "game"


def _from_task(index: int, record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "index": index, "score": record["attempts"][-1]["score"], "legacy": "trials"}


def _from_game(record: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    episode, game = record["episode"], record["game"]
    return {
        "index": game,
        "type": "task",
        "epoch": 1,
        "task": game,
        "seed": episode["seed"],
        "first_success": 1 if episode["success"] else None,
        "score": episode["score"],
        "instance": {},
        "attempts": [episode],
        "calls": calls,
        "wall_s": episode["info"].get("wall_s", 0.0),
        "memory_hash": record.get("memory_hash"),
        "legacy": "session",
    }


def state_after(run_dir: RunDir, record: dict[str, Any]) -> dict[str, Any]:
    """The state an old unit left: a trial task's memory (embedded, or by hash) as {"memory": …}; a session game's
    {"memory", "player"} from the content store, or from its own file in the oldest layout."""
    if record["legacy"] == "trials":
        return {"memory": record["memory"] if "memory" in record else run_dir.store.get(record["memory_hash"])}
    key = record.get("memory_hash")
    if key is not None and key in run_dir.store:
        return run_dir.store.get(key)
    path = OldLayout.game_snapshot(run_dir.path, record["index"])
    if not path.exists():
        raise FileNotFoundError(f"no memory snapshot for game {record['index']} in {run_dir.path}")
    return read_json(path)["state"]


def fork_state(run_dir: RunDir) -> dict[str, Any] | None:
    """The state of a fork of the old layout (its one snapshot file), or None."""
    found = OldLayout.game_snapshots(run_dir.path)
    return read_json(found[-1])["state"] if run_dir.fork.is_file() and found else None


def snapshot_file_state(path: Path) -> dict[str, Any]:
    """The state in one old snapshot file (`--memory-from FILE`)."""
    return read_json(path)["state"]
