"""One registry pattern for engines, quantizers, scorers: built-ins and plugins are found the same way."""

from __future__ import annotations

import difflib
import importlib
from importlib.metadata import entry_points
from typing import Any, Callable

from .errors import ConfigError


class Registry:
    def __init__(self, what: str, entry_point_group: str | None = None, modules: dict[str, str] | None = None,
                 base: str | None = None):
        """`modules`: built-ins whose module registers them when imported, imported only when named (an
        optional dependency's), so a source checkout run through PYTHONPATH, with no entry points, finds them.
        `base`: "module:Class" every plugin's entry must subclass (the class that gives the contract's
        optional members their defaults), named by string so the registry sits below the contract."""
        self.what, self.group, self.base = what, entry_point_group, base
        self._items: dict[str, Any] = {}
        self._modules = dict(modules or {})

    def register(self, name: str) -> Callable[[Any], Any]:
        def deco(obj: Any) -> Any:
            self._items[name] = obj
            return obj

        return deco

    def _load_plugins(self) -> None:
        # entry points (group "qeval.<kind>s") let a third party add one without touching qeval
        if self.group is None:
            return
        for ep in entry_points(group=self.group):
            if ep.name not in self._items:
                self._items[ep.name] = self._checked(ep.name, ep.value, ep.load())

    def _checked(self, name: str, where: str, obj: Any) -> Any:
        if self.base is None:
            return obj
        module, _, cls = self.base.partition(":")
        base = getattr(importlib.import_module(module), cls)
        if not (isinstance(obj, type) and issubclass(obj, base)):
            raise ConfigError(f"{self.what} {name!r} ({where}) must subclass {module}.{cls}")
        return obj

    def names(self) -> list[str]:
        self._load_plugins()
        return sorted(self._items)

    def every_name(self) -> list[str]:
        """The registered names and the built-ins not imported yet (for a choice among all of them)."""
        return sorted(set(self.names()) | set(self._modules))

    def get(self, name: str) -> Any:
        if name not in self._items and name in self._modules:
            importlib.import_module(self._modules[name])
        if name not in self._items:
            self._load_plugins()
        if name in self._items:
            return self._items[name]
        close = difflib.get_close_matches(name, self._items, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown {self.what} {name!r}.{hint} Known: {', '.join(sorted(self._items))}")
