"""Running the batch size x concurrency grid: one row's cells on a server, on its own server or on one
already up. The cells come from the latency probe (run_probe), one step per concurrency."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

from .spec import ProbeSpec
from ..engines import Endpoint
from ..engines.process import stop_grace
from ..errors import EngineError
from .grid import GridRow, cell
from .latency import run_probe


def run_row(row: GridRow, probe: ProbeSpec, endpoint: Endpoint, engine, seed: int = 0,
            on_cell: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """The row's cells on a running server; the engine's memory is read after each one. An engine that
    died on the way is an EngineError: its cells would be timeouts, not measurements."""
    cells: list[dict] = []

    def step(s) -> None:
        cells.append(cell(row.setting, s, engine.memory()))
        if on_cell:
            on_cell(cells[-1])

    run_probe(probe, endpoint, seed=seed, on_step=step)
    if not engine.health():
        raise EngineError(f"the engine died during the grid row {row.label}", variant=engine.name)
    return {"row": row.label, "setting": row.setting, "on_server": row.on_server, "startup_seconds": None,
            "cells": cells}


def serve_row(row: GridRow, probe: ProbeSpec, engine, seed: int = 0,
              on_cell: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """The row on a server of its own, started with the row's setting and stopped before returning."""
    endpoint = engine.start()
    try:
        data = run_row(row, probe, endpoint, engine, seed, on_cell)
    except BaseException as e:
        engine.stop(stop_grace(e))  # Ctrl-C: a short grace, someone is waiting
        raise
    engine.stop()
    data["startup_seconds"] = round(engine.startup_seconds, 1) if engine.startup_seconds else None
    return data


def save_row(path: Path, data: dict[str, Any]) -> None:
    """Atomic: a crash leaves no half row, so a resumed run redoes the row whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def load_rows(rows: Sequence[GridRow]) -> list[dict[str, Any]]:
    return [json.loads(r.path.read_text()) for r in rows if r.path.exists()]
