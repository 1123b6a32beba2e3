"""The tasks of results another evaluator wrote (`method: results`, qeval/imports): parts with the evaluator's own
metric declarations, paired and gated like any item suite, never run (their records are imported, not asked)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from .base import ItemSuite, Part, SuiteRun


@dataclass(frozen=True)
class ResultsSuite(ItemSuite):
    """Every imported task, each a part under the key its format and identity give."""

    parts: tuple[Part, ...]

    @property
    def concurrency(self) -> int:
        return 0  # nothing is asked of an engine

    def tally(self) -> dict[str, int]:
        return {"imported tasks": len(self.parts)}

    def sizes(self, data_dir: Path) -> list[tuple[str, str, int, tuple[str, ...]]]:
        return []  # their items are what the evaluator ran, not planned here

    def run(self, run: SuiteRun) -> None:
        raise ConfigError(f"imported results are read, not run: {', '.join(p.suite for p in self.parts)}")
