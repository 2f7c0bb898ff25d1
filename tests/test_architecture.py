"""The house's import rules, read from the source: arrows run one way.

envs, llm and memory know nothing of who plays, trains, evaluates, serves or reports; eval works from records and
never imports the playing code; the pure maths imports without torch.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "ttlearn"
BASE = {"ttlearn", "types", "registry", "seeding", "cache", "sandbox", "wheels"}
"""The ground floor every room may stand on (`ttlearn` itself: the version string; `sandbox`: running model-written
code; `wheels`: files fetched from the package index; neither imports from ttlearn)."""
ALLOWED = {
    **{room: BASE for room in BASE},
    "envs": BASE | {"envs", "data"},
    "llm": BASE | {"llm"},
    "memory": BASE | {"memory", "llm"},
    "players": BASE | {"players", "envs", "llm"},
    "runs": BASE | {"runs", "llm"},
    "eval": BASE | {"eval", "runs"},
    "data": BASE | {"data"},
    "rollout": BASE | {"rollout", "envs", "llm", "memory", "players", "runs", "eval"},
    "train": BASE | {"train", "rollout", "envs", "llm", "memory", "players", "runs", "eval"},
    "serve": BASE | {"serve", "memory"},
}
"""Room → the rooms it may import. `cli` (and `__main__`) may import anything; nothing imports `cli`."""


def room_of(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return parts[0]


def imported_rooms(path: Path) -> set[tuple[str, int]]:
    """(room, line) of every `ttlearn.*` import in a file, module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "ttlearn":
                found.add((parts[1] if len(parts) > 1 else "ttlearn", node.lineno))
    return found


SOURCES = sorted(p for p in SRC.rglob("*.py") if room_of(p) not in {"cli", "__main__", "__init__"})


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_run_one_way(path: Path):
    room = room_of(path)
    assert room in ALLOWED, f"{room}: a new room needs its import rule in this test"
    wrong = sorted((r, line) for r, line in imported_rooms(path) if r not in ALLOWED[room])
    assert not wrong, f"{path.relative_to(SRC)} imports {wrong} — {room} may import only {sorted(ALLOWED[room])}"


def test_nothing_imports_the_cli():
    for path in SRC.rglob("*.py"):
        if room_of(path) in {"cli", "__main__"}:
            continue
        assert "cli" not in {r for r, _ in imported_rooms(path)}, path


def test_pure_maths_imports_without_torch():
    """The formulas (advantages, ratings, metrics, MemRL's retrieval and Q update) stay usable where torch is not
    installed: import them with torch made unimportable."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import ttlearn.train.advantages, ttlearn.eval.metrics, ttlearn.eval.rating, ttlearn.memory.memrl\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
