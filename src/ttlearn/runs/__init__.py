"""Run records: the config, the durable directory a run writes, and reading it back, so that runs resume exactly
and every number can be recomputed offline. The layer both the playing code and `eval` stand on.

    config    `RunConfig`: one config for every run (a unit is a task instance with attempts, an epoch one pass
              over the units; a game is a unit with one attempt and the memory carried: `games`), checked by
              itself, its defaults decided once (`resolved`)
    durable   append-only JSON lines and the content-addressed snapshot store
    layout    `RunDir`: every file name of run directories, arena folders and trainers' directories, and the lock
              of the one process that writes a run
    run       `Run`: a run's config and unit records, appended and read
    legacy    the one adapter for directories written before one config existed
    trust     what a run directory read from anyone may not do (credentials, outside stores)
"""

from ttlearn.runs.config import (
    PartsConfig,
    Plugins,
    RunConfig,
    default_player,
    games,
    missing_plugins,
    parse_config,
    plugin_hint,
)
from ttlearn.runs.durable import (
    TIMES,
    SnapshotStore,
    append_durable,
    canonical_hash,
    read_durable,
    without_times,
)
from ttlearn.runs.layout import (
    ARENA_FILE,
    NO_OPPONENT,
    REPORT_HTML,
    REPORT_JSON,
    RUNS_DIR,
    RunBusyError,
    RunDir,
    arena_run,
    arena_runs,
    default_arena_dir,
    default_run_dir,
    replay_dir,
)
from ttlearn.runs.run import Run, holds_run, latest_state, read_config, run_files
from ttlearn.runs.trust import check_trusted, credential_urls

__all__ = [
    "ARENA_FILE",
    "NO_OPPONENT",
    "REPORT_HTML",
    "REPORT_JSON",
    "RUNS_DIR",
    "TIMES",
    "PartsConfig",
    "Plugins",
    "Run",
    "RunBusyError",
    "RunConfig",
    "RunDir",
    "SnapshotStore",
    "append_durable",
    "arena_run",
    "arena_runs",
    "canonical_hash",
    "check_trusted",
    "credential_urls",
    "default_arena_dir",
    "default_player",
    "games",
    "default_run_dir",
    "holds_run",
    "latest_state",
    "missing_plugins",
    "parse_config",
    "plugin_hint",
    "read_config",
    "read_durable",
    "replay_dir",
    "run_files",
    "without_times",
]
