"""What one variant's run found: the unit of work's answer (pipeline/variant.py run_variant builds it), which
an executor yields and the driver writes into the record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..record.run import Measured


@dataclass(frozen=True)
class VariantOutcome:
    """What one variant's run found: what it measured (the record's VariantResult is built from it), and what
    only the run knows. Paths are relative to its workspace, except the checkpoint (the machine's)."""

    name: str
    status: str  # "ok" | "error" | "skipped" | "partial" (begun, not finished: the notice to the sink)
    error: str | None = None
    measured: Measured = Measured()
    evaluated: bool = False  # False: the store held everything, nothing was served
    probe_path: str | None = None  # the stored latency probe, where there is one
    grid: dict[str, Any] | None = None  # the assembled grid (probe/grid.py assemble), where there is one

    @property
    def key(self) -> str:
        return self.measured.key
