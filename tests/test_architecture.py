"""The house's import rules, read from the source: arrows run one way.

envs, llm and memory know nothing of who plays, trains, evaluates, serves or reports; eval works from records and
never imports the playing code; the pure maths imports without torch; a plug-in is reached only through its room's
registry, never imported by another module of its room; no module imports itself through a circle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from ttlearn.envs.base import ENVS
from ttlearn.llm.base import LLMS
from ttlearn.memory.base import MEMORIES
from ttlearn.players.base import PLAYERS
from ttlearn.train.base import TRAINERS

SRC = Path(__file__).resolve().parents[1] / "src" / "ttlearn"
BASE = {"version", "types", "registry", "seeding", "cache", "sandbox", "wheels", "untrusted", "errors"}
"""The ground floor every room may stand on (`version`: the version string; `sandbox`: running model-written code;
`wheels`: files fetched from the package index; `untrusted`: reading files anyone may have written; `errors`: the
failures a user can fix; none imports from ttlearn). The package's top (`ttlearn.run`, the Python entry point) stands
above every room, like `cli`: no module imports it."""
ALLOWED = {
    **{room: BASE for room in BASE},
    "envs": BASE | {"envs", "data"},
    "llm": BASE | {"llm"},
    "memory": BASE | {"memory", "llm"},
    "players": BASE | {"players", "envs", "llm"},
    "runs": BASE | {"runs", "llm", "memory", "envs", "data"},
    "eval": BASE | {"eval", "runs"},
    "data": BASE | {"data"},
    "rollout": BASE | {"rollout", "envs", "llm", "memory", "players", "runs", "eval"},
    "train": BASE | {"train", "rollout", "envs", "llm", "memory", "players", "runs", "eval"},
    "serve": BASE | {"serve", "memory", "llm", "players"},
}
"""Room → the rooms it may import. `cli`, `__main__` and the package's top may import anything; nothing imports
`cli` or the top. serve's `llm` and `players`: the learning proxy (serve/proxy.py) writes MemRL's notes with the
upstream's model (llm.openai) and places memories as the LLM player does (players.llm.NOTES_HEADING)."""


def room_of(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return parts[0]


def module_name(path: Path) -> str:
    parts = ("ttlearn", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in SRC.rglob("*.py")}


def imported_modules(path: Path) -> set[tuple[str, int]]:
    """(module, line) of every `ttlearn` module a file imports, module level or inside functions (under
    TYPE_CHECKING too: a circle of annotations is still a circle). `from ttlearn.a import b` is the module
    `ttlearn.a.b` when there is one, else `ttlearn.a`. The package writes absolute imports only."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:  # a name defined in a module: that module
                name = name.rpartition(".")[0]
            if name:
                found.add((name, node.lineno))
    return found


def imported_rooms(path: Path) -> set[tuple[str, int]]:
    """(room, line) of every `ttlearn.*` import in a file, module level or inside functions."""
    return {(name.split(".")[1] if "." in name else "ttlearn", line) for name, line in imported_modules(path)}


SOURCES = sorted(p for p in SRC.rglob("*.py") if room_of(p) not in {"cli", "__main__", "__init__"})


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_run_one_way(path: Path):
    room = room_of(path)
    assert room in ALLOWED, f"{room}: a new room needs its import rule in this test"
    wrong = sorted((r, line) for r, line in imported_rooms(path) if r not in ALLOWED[room])
    assert not wrong, f"{path.relative_to(SRC)} imports {wrong} — {room} may import only {sorted(ALLOWED[room])}"


def test_nothing_imports_the_cli_or_the_top():
    for path in SRC.rglob("*.py"):
        if room_of(path) in {"cli", "__main__", "__init__"}:
            continue
        assert not {"cli", "ttlearn"} & {r for r, _ in imported_rooms(path)}, path


def test_pure_maths_imports_without_torch():
    """The formulas (advantages, ratings, metrics, MemRL's retrieval and Q update) stay usable where torch is not
    installed: import them with torch made unimportable."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import ttlearn.train.advantages, ttlearn.eval.metrics, ttlearn.eval.rating\n"
        "import ttlearn.memory.retrieval, ttlearn.memory.memrl\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


PLUGINS: dict[str, set[str]] = {
    room: {source.partition(":")[0] for source in registry.table.values()}
    for room, registry in [
        ("envs", ENVS),
        ("llm", LLMS),
        ("memory", MEMORIES),
        ("players", PLAYERS),
        ("train", TRAINERS),
    ]
}
"""Room → the modules its registry table loads plug-ins from."""
PLUGIN_FREE = BASE | {"runs", "eval", "serve"}
"""Rooms that work with no plug-in loaded: the records, their evaluation, and the memory service, which stands on the
memory room's store and retrieval maths."""


@pytest.mark.parametrize("room", sorted(PLUGINS))
def test_plugins_are_reached_only_through_their_registry(room: str):
    """No module of a room imports one of the room's plug-ins: plug-ins stand on the room's shared modules (its base,
    stores, maths, text helpers) and never on each other, so each can be changed, removed or fail to import alone."""
    wrong = sorted(
        (name, imported, line)
        for name, path in MODULES.items()
        if room_of(path) == room
        for imported, line in imported_modules(path)
        if imported in PLUGINS[room] and imported != name
    )
    assert not wrong, f"(importer, plug-in, line): {wrong} — move what they share to a module that is no plug-in"


def test_plugin_free_rooms_import_no_plugin():
    plugins = set().union(*PLUGINS.values())
    wrong = sorted(
        (name, imported, line)
        for name, path in MODULES.items()
        if room_of(path) in PLUGIN_FREE
        for imported, line in imported_modules(path)
        if imported in plugins
    )
    assert not wrong, f"(importer, plug-in, line): {wrong} — {sorted(PLUGIN_FREE)} import no plug-in module"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of `graph` (node → the nodes it points to) as a path whose last node is its first, or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in done and (cycle := visit(nxt)):
                return cycle
        done.add(path.pop())
        return None

    for node in sorted(graph):
        if node not in done and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": {"d"}}) == ["d", "d"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circles():
    """Module level and function level: a lazy import that closes a circle still ties the two modules together."""
    graph = {name: {imported for imported, _ in imported_modules(path)} - {name} for name, path in MODULES.items()}
    cycle = find_cycle(graph)
    assert cycle is None, f"import circle: {' → '.join(cycle)}"


def config_walk(tmp_path: Path, *unit_flags: str) -> list[str]:
    """The functions a run's config passes through (as an argument or as self), in call order, during one `ttlearn
    run` of a tiny scripted run."""
    from typer.testing import CliRunner

    from ttlearn.cli import app
    from ttlearn.runs import RunConfig

    walk: list[str] = []

    def holds_config(frame) -> bool:
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        return any(isinstance(frame.f_locals.get(name), RunConfig) for name in names)

    def profile(frame, event, arg) -> None:
        module = frame.f_globals.get("__name__", "")
        if event == "call" and module.startswith("ttlearn") and holds_config(frame):
            walk.append(f"{module}:{frame.f_code.co_qualname}")

    args = ["run", "minesweeper", "--memory", "history", "--llm", "scripted:random", *unit_flags]
    sys.setprofile(profile)
    try:
        result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "-".join(unit_flags))])
    finally:
        sys.setprofile(None)
    assert result.exit_code == 0, result.output
    return walk


def test_a_run_config_walks_one_short_path_whatever_the_unit(tmp_path):
    """A session of games and a run of tasks with attempts take the same path through the code, and it stays short:
    besides the summary's sections (`eval.summary.SECTIONS`, one pure function each, which read the config), 22
    functions see the config — where, before one config existed, 15 played a session and 24 a trial run."""
    from ttlearn.eval.summary import SECTIONS

    games = config_walk(tmp_path, "--games", "2")
    tasks = config_walk(tmp_path, "--units", "2", "--attempts", "2")
    assert set(games) == set(tasks)
    sections = {f"{section.__module__}:{section.__qualname__}" for section in SECTIONS.values()}
    assert sections <= set(tasks)
    assert len(set(tasks) - sections) <= 22, sorted(set(tasks) - sections)
