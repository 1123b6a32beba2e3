"""Batch size x concurrency: the grid's rows, its cells and the best cell under the SLOs. Pure: no I/O.

A row is one engine setting (e.g. max_num_seqs=8: one server start), a column one client
concurrency; a cell is one probe step on that row's server at that concurrency, with the engine's
memory right after it. Cells and the assembled grid are plain dicts as stored (a row's JSON, a variant's
outcome); the run record validates them into record_models.Grid, and the views here take either.
Running the grid is in grid_run.py.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence, TypeVar

from ..engines.spec import EngineSpec
from ..record_models import Grid, GridCell
from .spec import GridEngineSpec, GridSpec, ProbeSpec
from .latency import StepSummary

SHORT = {"max_num_seqs": "mns", "max_num_batched_tokens": "mnbt", "gpu_memory_utilization": "gmu"}
# the figures of a cell every view shows (report table, MLflow, the Parquet table), besides the server's
FIGURES = ("output_throughput", "request_throughput", "ttft_p95_ms", "ttft_p99_ms", "tpot_p95_ms", "tpot_p99_ms",
           "e2e_p95_ms", "errors", "requests")
# per cell in MLflow (grid/<row>/c_<concurrency>/<figure>): the client's view, the engine's memory, the server's
CELL_METRICS = FIGURES + ("memory_rss_bytes", "memory_gpu_bytes", "memory_kv_cache_bytes",
                          "server_queue_mean_ms", "server_ttft_mean_ms", "server_running_max", "server_waiting_max",
                          "server_kv_cache_usage_max")
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


def metric_segment(label: str) -> str:
    """A row label as MLflow allows in a metric name (no '=' nor ','): "mns=8,mnbt=512" -> "mns_8.mnbt_512"."""
    return label.replace("=", "_").replace(",", ".")


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


def figures(c: GridCell | Mapping[str, Any]) -> dict[str, float]:
    """A cell's figures by flat name: the probe step's (StepSummary.flat: ttft_p95_ms, server_queue_mean_ms,
    ...) and the engine's memory (memory_rss_bytes, memory_kv_cache_bytes, ...)."""
    d = _as_cell(c).model_dump()
    step = StepSummary(kind="concurrency", load=d["concurrency"], **{k: d[k] for k in _STEP_FIELDS})
    out = step.flat()
    out["requests"] = float(d["requests"])
    out.update({f"memory_{k}": float(v) for k, v in d["memory"].items() if v is not None})
    return out


def meets_slo(c: GridCell | Mapping[str, Any], slo: dict[str, float]) -> bool:
    """Every SLO holds, and no request failed (a figure that is missing or NaN does not hold)."""
    c = _as_cell(c)
    if c.errors or not c.requests:
        return False
    f = figures(c)
    return all(f.get(k, math.inf) <= limit for k, limit in slo.items())


def best_cell(cells: Sequence[Cell], slo: dict[str, float]) -> Cell | None:
    """The cell with the most output tokens per second among those meeting the SLOs (all error-free
    cells when there are none); on a tie, the lower concurrency. None if no cell qualifies. The cell is
    returned as given (a stored dict or a GridCell)."""
    ok = [c for c in cells if meets_slo(c, slo)]
    return max(ok, key=lambda c: (_as_cell(c).output_throughput, -_as_cell(c).concurrency), default=None)


def assemble(grid: GridSpec, slo: dict[str, float], rows: Sequence[dict[str, Any]],
             errors: dict[str, str]) -> dict[str, Any]:
    """The grid as the run record keeps it (record_models.Grid, as a dict). `rows`: the stored rows (cells
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


def _is_best(g: Grid, c: GridCell) -> bool:
    return g.best is not None and (c.row, c.concurrency) == (g.best.row, g.best.concurrency)


def matrix(grid: Grid | Mapping[str, Any], key: str = "output_throughput") -> list[list[float]]:
    """One figure over rows x concurrencies (NaN where a cell is missing), for the heat map."""
    g = Grid.model_validate(grid)
    at = {(c.row, c.concurrency): figures(c).get(key, math.nan) for c in g.cells}
    return [[at.get((r, k), math.nan) for k in g.concurrency] for r in g.rows]


def table(grid: Grid | Mapping[str, Any]) -> list[dict[str, Any]]:
    """One flat row per cell (for a Parquet table): the setting, the concurrency, every figure, and
    whether the cell meets the SLOs and is the best one."""
    g = Grid.model_validate(grid)
    return [{"row": c.row, **c.setting, "concurrency": c.concurrency, **figures(c),
             "meets_slo": meets_slo(c, g.slo), "best": _is_best(g, c)}
            for c in g.cells]
