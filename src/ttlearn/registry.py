"""Name → factory registries, loaded lazily: looking a name up imports only the module that defines it.

Each room (environments, memories, LLM back ends, scripted players, trainers) declares a table of its own plug-ins,
name → "module:Attr" (as Gymnasium registers entry points), so `make_env("rps")` imports `ttlearn.envs.rps` and
nothing else, and a plug-in whose optional dependency is missing breaks only its own name. Three more sources add
names from outside the package:

- an installed distribution's entry points in the room's group (`ttlearn.envs`, `ttlearn.memories`, `ttlearn.llms`,
  `ttlearn.players`, `ttlearn.trainers`), loaded when the name is first asked for;
- modules named by `ttlearn --plugin MODULE` or `$TTLEARN_PLUGINS` (comma-separated module names or .py files),
  imported at once; they register with the `@REGISTRY.register("name")` decorator (one that takes over a name
  the package or an installed entry point defines warns: `PluginShadowWarning`);
- any module that uses the decorator and is imported by the caller.

Run configs record the `--plugin` / `$TTLEARN_PLUGINS` modules (`loaded_plugins`), so `resume`, `replay` and the
arena's worker processes import them again. In-tree modules keep their decorators too; the test suite checks that
every table entry names the class its module registers.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, Mapping, TypeVar

T = TypeVar("T")
PLUGINS_VAR = "TTLEARN_PLUGINS"
_loaded_plugins: list[str] = []
_env_plugins_read = False


class UnknownNameError(KeyError):
    """A user asked for a name no plug-in registered; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


class PluginShadowWarning(UserWarning):
    """A plug-in registered a name already defined by the package or an installed entry point, and takes it over."""


class PluginError(ImportError):
    """A plug-in could not be imported; the message names it and says why. Only that plug-in's name is affected."""


def load_object(source: str) -> Any:
    """The object an entry-point string `module:attr[.attr…]` names (the module alone when there is no attr)."""
    module_name, _, attrs = source.partition(":")
    obj: Any = importlib.import_module(module_name)
    for attr in filter(None, attrs.split(".")):
        obj = getattr(obj, attr)
    return obj


def _import_plugin(spec: str) -> str:
    """Import one plug-in module: a `.py` file (recorded by absolute path), or a module name, looked up on sys.path
    and the current directory (`name@folder`: in that folder too). Returns the spec to record."""
    path = Path(spec).expanduser()
    if spec.endswith(".py"):
        if not path.is_file():
            raise FileNotFoundError(f"no such file {spec}")
        path = path.resolve()
        name = f"ttlearn_plugin_{path.stem}"
        if name not in sys.modules:
            module_spec = importlib.util.spec_from_file_location(name, path)
            assert module_spec is not None and module_spec.loader is not None
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            try:
                module_spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
        return str(path)
    name, _, folder = spec.partition("@")
    if folder and folder not in sys.path:
        sys.path.append(folder)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())  # `ttlearn` is a console script: unlike `python -m`, cwd is not on the path
    module = importlib.import_module(name)
    root = _root_folder(module, name)
    return f"{name}@{root}" if root is not None and root == Path.cwd().resolve() else spec


def _root_folder(module: Any, name: str) -> Path | None:
    """The folder a module was imported from (the sys.path entry: for `pkg.mod`, the one holding `pkg`), or None for
    a module without a file (namespace packages, built-ins). A module found in the current folder is recorded as
    `name@folder`, so a run resumed from elsewhere finds it again."""
    top = sys.modules.get(name.split(".")[0], module)
    file = getattr(top, "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    return path.parent.parent if path.name == "__init__.py" else path.parent


def load_plugins(specs: Iterable[str], origin: str = "--plugin") -> list[str]:
    """Import plug-in modules (names, `name@folder`, or .py files) once each; returns their recorded specs (a .py file
    by absolute path, a module found in the current folder as `name@folder`). A module that fails to import is an
    error naming it: the names it would register are unknown, so nothing can be run without it."""
    recorded = []
    for spec in specs:
        spec = spec.strip()
        if not spec:
            continue
        if spec in _loaded_plugins:
            recorded.append(spec)
            continue
        try:
            spec = _import_plugin(spec)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            raise PluginError(f"plug-in {spec!r} (from {origin}) failed to import: {reason}") from exc
        if spec not in _loaded_plugins:
            _loaded_plugins.append(spec)
        recorded.append(spec)
    return recorded


def loaded_plugins() -> list[str]:
    """The plug-in modules imported in this process (`--plugin`, `$TTLEARN_PLUGINS`, a run config's), in order."""
    _read_env_plugins()
    return list(_loaded_plugins)


def _read_env_plugins() -> None:
    global _env_plugins_read
    if not _env_plugins_read:
        _env_plugins_read = True
        load_plugins(os.environ.get(PLUGINS_VAR, "").split(","), origin=f"${PLUGINS_VAR}")


class Registry(Generic[T]):
    """One room's plug-ins: `table` (name → "module:Attr") for the package's own, `group` for entry points, and
    whatever `register` adds. Nothing is imported until a name is asked for."""

    def __init__(self, kind: str, group: str, table: Mapping[str, str]) -> None:
        self.kind, self.group, self.table = kind, group, dict(table)
        self._entries: dict[str, T] = {}
        self._broken: dict[str, str] = {}
        self._external: dict[str, str] | None = None

    def register(self, name: str) -> Callable[[T], T]:
        def decorate(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._warn_if_shadowing(name, obj)
            self._entries[name] = obj
            return obj

        return decorate

    def _warn_if_shadowing(self, name: str, obj: Any) -> None:
        """A module registering a name that the package or an installed distribution defines in another top-level
        package takes it over in this process: say so (`PluginShadowWarning`), since the run then plays something
        other than the name's usual meaning."""
        source = self.table.get(name) or self.external().get(name)
        module = getattr(obj, "__module__", None) or "?"
        if source is None or module.split(".")[0] == source.split(".")[0].partition(":")[0]:
            return  # the package that defines the name, registering it (perhaps from a submodule)
        whose = "ttlearn's own" if name in self.table else "the installed entry point"
        warnings.warn(
            f"{self.kind} {name!r} from {module} shadows {whose} {name!r} ({source}); this process uses {module}'s",
            PluginShadowWarning,
            stacklevel=3,
        )

    def external(self) -> dict[str, str]:
        """Entry points of installed distributions in this room's group, name → "module:attr" (none loaded)."""
        if self._external is None:
            points = importlib.metadata.entry_points(group=self.group)
            self._external = {p.name: p.value for p in points if p.name not in self.table}
        return self._external

    def source(self, name: str) -> str | None:
        """Where `name` is defined, as "module:Attr"; None for names only the decorator registered."""
        return self.table.get(name) or self.external().get(name)

    def get(self, name: str) -> T:
        if name in self._entries:
            return self._entries[name]
        _read_env_plugins()
        if name in self._entries:
            return self._entries[name]
        if name in self._broken:
            raise PluginError(self._broken[name])
        source = self.source(name)
        if source is None:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}")
        try:
            obj = load_object(source)
        except Exception as exc:
            self._broken[name] = f"{self.kind} {name!r} ({source}) failed to load: {type(exc).__name__}: {exc}"
            raise PluginError(self._broken[name]) from exc
        return self._entries.setdefault(name, obj)  # the module's decorator may have registered it already

    def names(self) -> list[str]:
        """Every name that can be asked for, without importing any plug-in."""
        _read_env_plugins()
        return sorted({*self.table, *self.external(), *self._entries})

    def broken(self) -> dict[str, str]:
        """Load every plug-in and return the ones that failed, name → reason (for `ttlearn list`)."""
        for name in self.names():
            try:
                self.get(name)
            except PluginError:
                pass
        return dict(self._broken)

    def check(self, name: str, options: dict[str, Any], *, reserved: tuple[str, ...] = ()) -> None:
        """Refuse options the factory does not take, naming the accepted ones; `reserved` ones are not offered."""
        factory = self.get(name)
        target = factory.__init__ if inspect.isclass(factory) else factory
        accepted = [p for p in inspect.signature(target).parameters if p != "self" and p not in reserved]
        unknown = sorted(set(options) - set(accepted) - set(reserved))
        if unknown:
            raise ValueError(
                f"{self.kind} {name!r} has no option {', '.join(unknown)}; it accepts: {', '.join(accepted) or 'none'}"
            )

    def build(self, name: str, *, reserved: tuple[str, ...] = (), **options: Any) -> Any:
        """Call the registered factory with `options` after `check`ing them."""
        self.check(name, options, reserved=reserved)
        return self.get(name)(**options)
