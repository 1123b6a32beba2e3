"""The engine kinds by name: the built-ins register into it as their modules load, a plugin's through the entry
point group `qeval.engines`. Its own module, below the engine contract and the settings, so both read it."""

from __future__ import annotations

from ..registry import Registry

ENGINES: Registry = Registry("engine", entry_point_group="qeval.engines", base="qeval.engines.base:EngineBase")
