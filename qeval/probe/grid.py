"""Batch size x concurrency: the grid's rows, its cells and the best cell under the SLOs. Pure: no I/O.

A row is one engine setting (e.g. max_num_seqs=8: one server start), a column one client
concurrency; a cell is one probe step on that row's server at that concurrency, with the engine's
memory right after it. Cells and the assembled grid are plain dicts as stored (a row's JSON, a variant's
outcome); the run record validates them into record.measurements.Grid, whose views (a cell's figures, the SLOs,
the heat map's matrix, the table) the report and MLflow read. Running the grid is in grid_run.py.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence, TypeVar

from ..engines.spec import EngineSpec
from ..record.measurements import GridCell
from .spec import GridEngineSpec, GridSpec, ProbeSpec
from .latency import StepSummary

SHORT = {"max_num_seqs": "mns", "max_num_batched_tokens": "mnbt", "gpu_memory_utilization": "gmu"}
Cell = TypeVar("Cell", GridCell, Mapping[str, Any])  # a record's cell, or a stored one
_STEP_FIELDS = tuple(f.name for f in dataclasses.fields(StepSummary) if f.name not in ("kind", "load"))


def settings(spec: GridEngineSpec) -> list[dict[str, float]]:
    """The rows: every combination of the given settings, in the order the config lists them."""
    given = spec.settings()
    return [dict(zip(given, combo)) for combo in itertools.product(*given.values())]


def _num(x: float) -> str:
    return f"{x:g}"


def row_label(setting: dict[str, float]) -> str:
    """e.g. "mns=8" or "mns=8,mnbt=512"."""
    return ",".join(f"{SHORT.get(k, k)}={_num(v)}" for k, v in setting.items())


def cell_probe(grid: GridSpec, probe: ProbeSpec) -> ProbeSpec:
    """What the probe runs for one row: the grid's concurrencies and bounds, the probe's request shape."""
    return probe.model_copy(update={"enabled": True, "concurrency": list(grid.concurrency), "rates": [],
                                    "requests_per_step": grid.requests_per_cell,
                                    "max_seconds_per_step": grid.max_seconds_per_cell,
                                    "stop_after_saturation": False})


@dataclass(frozen=True)
class GridRow:
    """One engine setting of one variant: the server it needs and where its cells are kept."""

    setting: dict[str, float]
    spec: EngineSpec  # the variant's engine with the setting applied
    on_server: bool  # the variant's evaluation server already has this setting: its cells run there
    path: Path  # the row's cells (JSON), written atomically once the row is complete

    @property
    def label(self) -> str:
        return row_label(self.setting)


def cell(setting: dict[str, float], step: StepSummary, memory: Any) -> dict[str, Any]:
    """One cell: the probe step (throughput, percentiles, errors, the server's view) and the engine's
    memory (an EngineMemory) read right after it."""
    return {"row": row_label(setting), "setting": dict(setting), "concurrency": int(step.load),
            **{k: getattr(step, k) for k in _STEP_FIELDS}, "memory": dataclasses.asdict(memory)}


def _as_cell(c: GridCell | Mapping[str, Any]) -> GridCell:
    return GridCell.model_validate(c)  # a model as it is, a stored dict checked


def best_cell(cells: Sequence[Cell], slo: dict[str, float]) -> Cell | None:
    """The cell with the most output tokens per second among those meeting the SLOs (all error-free
    cells when there are none); on a tie, the lower concurrency. None if no cell qualifies. The cell is
    returned as given (a stored dict or a GridCell)."""
    ok = [c for c in cells if _as_cell(c).meets_slo(slo)]
    return max(ok, key=lambda c: (_as_cell(c).output_throughput, -_as_cell(c).concurrency), default=None)


def assemble(grid: GridSpec, slo: dict[str, float], rows: Sequence[dict[str, Any]],
             errors: dict[str, str]) -> dict[str, Any]:
    """The grid as the run record keeps it (record.measurements.Grid, as a dict). `rows`: the stored rows (cells
    and how they were served); `errors`: row label -> why that row has no cells (its engine did not start,
    or died)."""
    cells = [c for r in rows for c in r["cells"]]
    best = best_cell(cells, slo)
    return {"settings": list(grid.engine.settings()), "rows": [row_label(s) for s in settings(grid.engine)],
            "concurrency": list(grid.concurrency), "slo": dict(slo),
            "served": {r["row"]: {k: r.get(k) for k in ("on_server", "startup_seconds")} for r in rows},
            "errors": dict(errors), "cells": cells,
            "best": None if best is None else {"row": best["row"], "concurrency": best["concurrency"],
                                               "output_throughput": best["output_throughput"]}}
