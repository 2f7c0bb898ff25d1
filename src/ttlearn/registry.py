"""A name → factory registry that discovers its plug-ins by importing the modules of one package.

Adding an environment, LLM back end or memory method is one new module that decorates its class with
`@REGISTRY.register("name")`; nothing else in the house has to change.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """A user asked for a name no plug-in registered; the message lists the valid ones."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


class Registry(Generic[T]):
    def __init__(self, kind: str, package: str) -> None:
        self.kind = kind
        self.package = package
        self._entries: dict[str, T] = {}
        self._discovered = False

    def register(self, name: str) -> Callable[[T], T]:
        def decorate(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            return obj

        return decorate

    def _discover(self) -> None:
        if self._discovered:
            return
        self._discovered = True
        pkg = importlib.import_module(self.package)
        for mod in pkgutil.iter_modules(pkg.__path__):
            if not mod.name.startswith("_"):
                importlib.import_module(f"{self.package}.{mod.name}")

    def get(self, name: str) -> T:
        self._discover()
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}") from None

    def names(self) -> list[str]:
        self._discover()
        return sorted(self._entries)

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
