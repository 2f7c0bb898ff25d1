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

A name is written once: in the table for the package's own plug-ins, in the entry point or the decorator for the
others. The registry gives a class the name it is registered under (`cls.name`), and a class of the package reads
its name from the table when it is defined (`Registry.name_class`, called by each room's base class), so one built
directly (`RPSEnv(seed=0)`) is named too. Several names that share one definition (a hold'em bot per style, an
embedded model per name) point at a `Family`, which makes each name's plug-in.

Run configs record the `--plugin` / `$TTLEARN_PLUGINS` modules (`loaded_plugins`) but never import them when read:
a run directory is untrusted input, so `resume` and `replay` of a run that needs one name it and the flag that loads
it (`runs.plugin_hint`); the arena hands its own loaded ones to its worker processes. The test suite checks that
every table entry loads a plug-in of that name, that no module of the package uses the decorator, and that no class
of the package writes its own name.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, Mapping, TypeVar

from pydantic import BaseModel, ValidationError

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


@dataclass(frozen=True)
class Family(Generic[T]):
    """One definition that several names of a table share (a hold'em bot per style, an embedded model per name):
    the registry asks `make(name)` for each name's plug-in, then names it."""

    make: Callable[[str], T]


def give_name(obj: Any, name: str) -> None:
    """A class registered under `name` answers `cls.name` (and its instances `.name`) with it; a factory function
    has no name to give."""
    if isinstance(obj, type):
        obj.name = name  # type: ignore[attr-defined]


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
        self._own_names = {source: name for name, source in self.table.items()}
        """Source → name for the classes of the package (a family's shared source maps to one of its names, unused)."""
        self._entries: dict[str, T] = {}
        self._broken: dict[str, str] = {}
        self._external: dict[str, str] | None = None

    def register(self, name: str) -> Callable[[T], T]:
        def decorate(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._warn_if_shadowing(name, obj)
            give_name(obj, name)
            self._entries[name] = obj
            return obj

        return decorate

    def name_class(self, cls: type) -> None:
        """Name a class the table lists (called when it is defined, by the room's base class); any other class keeps
        the name it inherits, or gets one when it is registered or loaded."""
        name = self._own_names.get(f"{cls.__module__}:{cls.__qualname__}")
        if name is not None:
            give_name(cls, name)

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
            if isinstance(obj, Family):
                obj = obj.make(name)
        except Exception as exc:
            self._broken[name] = f"{self.kind} {name!r} ({source}) failed to load: {type(exc).__name__}: {exc}"
            raise PluginError(self._broken[name]) from exc
        if name in self._entries:  # the module registered it with the decorator after all
            return self._entries[name]
        give_name(obj, name)
        self._entries[name] = obj
        return obj

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
        """Refuse options the factory does not take, naming the accepted ones; `reserved` ones are not offered. A
        factory that declares an `options_model` (a pydantic model: MemRL's options) also has their values checked."""
        self._typed_options(name, options, reserved)

    def build(self, name: str, *, reserved: tuple[str, ...] = (), **options: Any) -> Any:
        """Call the registered factory with `options` after `check`ing them; one that declares an `options_model`
        gets the reserved ones as keywords and the rest as one `options=` object."""
        typed = self._typed_options(name, options, reserved)
        if typed is None:
            return self.get(name)(**options)
        return self.get(name)(**{key: options[key] for key in reserved if key in options}, options=typed)

    def _typed_options(self, name: str, options: dict[str, Any], reserved: tuple[str, ...]) -> BaseModel | None:
        factory = self.get(name)
        model: type[BaseModel] | None = getattr(factory, "options_model", None)
        if model is not None:
            accepted = list(model.model_fields)
        else:
            target = factory.__init__ if inspect.isclass(factory) else factory
            accepted = [p for p in inspect.signature(target).parameters if p != "self" and p not in reserved]
        unknown = sorted(set(options) - set(accepted) - set(reserved))
        if unknown:
            raise ValueError(
                f"{self.kind} {name!r} has no option {', '.join(unknown)}; it accepts: {', '.join(accepted) or 'none'}"
            )
        if model is None:
            return None
        try:
            return model(**{key: value for key, value in options.items() if key not in reserved})
        except ValidationError as exc:
            reasons = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e['input']!r})" for e in exc.errors()
            )
            raise ValueError(f"{self.kind} {name!r} option {reasons}") from None
