"""The lazy registry: each room's table is the one place a plug-in of the package is named, a lookup imports only
that module, and a plug-in that fails to import breaks only its own name."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from ttlearn import registry as registry_module
from ttlearn.envs.base import ENVS
from ttlearn.llm.base import LLMS, spec_options, split_spec
from ttlearn.memory.base import MEMORIES
from ttlearn.players.base import PLAYERS
from ttlearn.registry import (
    Family,
    PluginError,
    PluginShadowWarning,
    Registry,
    UnknownNameError,
    load_object,
    load_plugins,
)
from ttlearn.train.base import TRAINERS

ROOMS = {
    "ttlearn.envs": ENVS,
    "ttlearn.memory": MEMORIES,
    "ttlearn.llm": LLMS,
    "ttlearn.players": PLAYERS,
    "ttlearn.train": TRAINERS,
}


def room_modules(package: str) -> list[str]:
    return [f"{package}.{module.name}" for module in pkgutil.iter_modules(importlib.import_module(package).__path__)]


@pytest.mark.parametrize("package", ROOMS)
def test_every_table_entry_loads_a_plugin_of_that_name_and_no_module_of_the_package_registers_itself(package):
    registry = ROOMS[package]
    decorators = [
        module
        for module in room_modules(package)
        if ".register(" in Path(importlib.import_module(module).__file__).read_text()
    ]
    assert decorators == []
    for name, source in registry.table.items():
        obj, defined_by = registry.get(name), load_object(source)
        assert obj.__module__ == source.partition(":")[0], name
        if isinstance(defined_by, Family):  # hold'em styles, embedded models: one made per name
            defined_by = defined_by.make(name)
            assert type(obj) is type(defined_by) and obj is not defined_by, name
        else:
            assert obj == defined_by, name  # itself (a class's `from_spec` is a new bound method at every lookup)
        if isinstance(obj, type):
            assert obj.name == name and obj.__dict__["name"] == name, name  # its own name, not one it inherits


def own_name_lines(path: Path) -> list[str]:
    """`Class.name = …` lines a module's classes write themselves (the table is the one place for them)."""
    tree = ast.parse(path.read_text())
    return [
        f"{path.name}:{statement.lineno} {node.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for statement in node.body
        if (isinstance(statement, ast.Assign) and any(getattr(t, "id", None) == "name" for t in statement.targets))
        or (
            isinstance(statement, ast.AnnAssign)
            and getattr(statement.target, "id", None) == "name"
            and statement.value is not None
        )
    ]


@pytest.mark.parametrize("package", ROOMS)
def test_no_class_the_table_names_writes_its_own_name(package):
    registry = ROOMS[package]
    named = {source.partition(":")[2] for source in registry.table.values()}
    classes = {cls for cls in named if cls[:1].isupper()}
    writes = [
        line
        for module in room_modules(package)
        for line in own_name_lines(Path(importlib.import_module(module).__file__))
        if line.rpartition(" ")[2] in classes
    ]
    assert writes == []
    assert own_name_lines(Path(__file__).parent / "plugins" / "simlab.py") == []  # a plug-in writes it once too


def test_the_check_catches_a_class_that_writes_its_own_name(tmp_path):
    (tmp_path / "mod.py").write_text(
        'class Named:\n    name = "x"\n\nclass Typed:\n    name: str = "y"\n\nclass Declared:\n    name: str\n'
    )
    assert own_name_lines(tmp_path / "mod.py") == ["mod.py:2 Named", "mod.py:5 Typed"]


def test_a_class_of_the_package_built_directly_has_its_name():
    from ttlearn.envs.rps import RPSEnv
    from ttlearn.memory.memrl import MemPMemory, MemRLMemory

    assert RPSEnv(seed=0).name == "rps" and MemRLMemory.name == "memrl" and MemPMemory.name == "memp"


def test_the_decorator_an_entry_point_and_a_family_name_what_they_hand_out(tmp_path, monkeypatch):
    info = tmp_path / "gizmos-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gizmos\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[ttlearn.test-gizmos]\nspinner = gizmo_pkg:Spinner\n")
    (tmp_path / "gizmo_pkg.py").write_text("class Spinner:\n    pass\n")
    (tmp_path / "gizmo_family.py").write_text(
        "from ttlearn.registry import Family\n"
        "SIZES = Family(lambda name: type(name.title(), (), {'size': len(name), '__module__': __name__}))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry("gizmo", "ttlearn.test-gizmos", {"big": "gizmo_family:SIZES", "small": "gizmo_family:SIZES"})

    @registry.register("wheel")
    class Wheel:
        pass

    assert Wheel.name == "wheel" and Wheel().name == "wheel"
    assert registry.get("spinner").name == "spinner"
    big, small = registry.get("big"), registry.get("small")
    assert (big.name, big.size, small.name, small.size) == ("big", 3, "small", 5)
    assert registry.get("big") is big  # made once


def test_a_lookup_imports_only_the_module_it_names():
    code = (
        "import sys; from ttlearn.envs.base import make_env; make_env('rps', seed=0); "
        "print(sorted(m for m in sys.modules if m.startswith('ttlearn.envs.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"PYTHONPATH": str(Path(__file__).parents[1] / "src"), "PATH": ""},
    )
    # base and the ceilings table it checks every option against, then the one environment named
    named = "['ttlearn.envs.base', 'ttlearn.envs.ceilings', 'ttlearn.envs.rps', 'ttlearn.envs.rps_bots']"
    assert done.stdout.strip() == named


def test_a_broken_plugin_breaks_only_its_own_name(tmp_path, monkeypatch):
    (tmp_path / "fine_plugin.py").write_text("class Fine:\n    pass\n")
    (tmp_path / "broken_plugin.py").write_text("import not_installed_anywhere\nclass Broken:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    table = {"fine": "fine_plugin:Fine", "broken": "broken_plugin:Broken"}
    registry = Registry("widget", "ttlearn.test-widgets", table)
    assert registry.names() == ["broken", "fine"]  # listing imports nothing
    assert "fine_plugin" not in sys.modules
    assert registry.get("fine").__name__ == "Fine"
    with pytest.raises(PluginError, match="widget 'broken' .* No module named 'not_installed_anywhere'"):
        registry.get("broken")
    assert registry.broken() == {
        "broken": "widget 'broken' (broken_plugin:Broken) failed to load: ModuleNotFoundError: "
        "No module named 'not_installed_anywhere'"
    }
    assert registry.get("fine").__name__ == "Fine"
    with pytest.raises(UnknownNameError, match="unknown widget 'nothing'; choose one of: broken, fine"):
        registry.get("nothing")


class Gadget:
    pass


def test_a_name_taken_over_from_the_package_or_an_installed_entry_point_warns(tmp_path, monkeypatch):
    info = tmp_path / "gadgets-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gadgets\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[ttlearn.test-gadgets]\ncounter = gadget_pkg:Counter\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry("gadget", "ttlearn.test-gadgets", {"own": "json:JSONDecoder"})
    with pytest.warns(
        PluginShadowWarning,
        match=r"gadget 'counter' from test_registry shadows the installed entry "
        r"point 'counter' \(gadget_pkg:Counter\); this process uses test_registry's",
    ):
        registry.register("counter")(Gadget)
    assert registry.get("counter") is Gadget
    with pytest.warns(PluginShadowWarning, match="shadows ttlearn's own 'own' \\(json:JSONDecoder\\)"):
        registry.register("own")(Gadget)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        registry.register("fresh")(Gadget)  # a new name takes nothing over
        Registry("gadget", "ttlearn.test-gadgets", {"own": "json:JSONDecoder"}).register("own")(json.JSONDecoder)


def test_a_plugin_module_found_in_the_current_folder_is_recorded_with_that_folder(tmp_path, monkeypatch):
    (tmp_path / "here_plugin.py").write_text("LOADED = True\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.setattr(registry_module, "_loaded_plugins", [])
    assert load_plugins(["here_plugin"]) == [f"here_plugin@{tmp_path}"]
    assert load_plugins(["json"]) == ["json"]  # found where it is installed: the name is enough

    del sys.modules["here_plugin"]
    monkeypatch.chdir(tmp_path.parent)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
    monkeypatch.setattr(registry_module, "_loaded_plugins", [])
    assert load_plugins([f"here_plugin@{tmp_path}"]) == [f"here_plugin@{tmp_path}"]  # found again from elsewhere
    assert sys.modules.pop("here_plugin").LOADED


@pytest.mark.parametrize(
    ("spec", "parts"),
    [
        ("gemma270m", ("gemma270m", "")),
        ("gemma270m:forms", ("gemma270m", "forms")),
        ("gemma270m?n_ctx=8192", ("gemma270m", "?n_ctx=8192")),
        ("gemma270m:forms?n_ctx=8192", ("gemma270m", "forms?n_ctx=8192")),
        ("openai:http://h:8000/v1#q?timeout_s=3", ("openai", "http://h:8000/v1#q?timeout_s=3")),
    ],
)
def test_a_spec_splits_into_scheme_and_argument(spec, parts):
    assert split_spec(spec) == parts


def test_spec_options_convert_and_refuse_unknown_keys():
    assert spec_options("n_ctx=8192", {"n_ctx": int}, "gemma270m") == {"n_ctx": 8192}
    with pytest.raises(ValueError, match="unknown gemma270m option 'ctx'; known: n_ctx"):
        spec_options("ctx=1", {"n_ctx": int}, "gemma270m")
    with pytest.raises(ValueError, match="n_ctx needs a number"):
        spec_options("n_ctx=big", {"n_ctx": int}, "gemma270m")


def test_a_too_small_context_is_refused_before_the_model_loads():
    from ttlearn.llm.base import make_llm

    with pytest.raises(ValueError, match="n_ctx must be at least 64"):
        make_llm("gemma270m?n_ctx=8")
