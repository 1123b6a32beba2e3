"""A 2 x 2 batch size x concurrency grid on the real model: max_num_seqs {1, 4} x concurrency {1, 4}.

The max_num_seqs=4 row runs on the evaluation's own server (the engine is configured with 4), the
max_num_seqs=1 row on a server of its own. Then the same campaign again after losing one row: only
that row is redone."""

from __future__ import annotations

import pytest

from qeval.pipeline.campaign import run
from qeval.config import load_config
from qeval.record.run import RunRecord

from ..conftest import campaign_file

pytestmark = pytest.mark.slow


def _config(tmp_path, base_model, endpoint):
    cfg = campaign_file(
        tmp_path, name="grid", file="grid.yaml", model={"path": base_model}, output_dir=tmp_path / "runs",
        baseline={"name": "bf16", "method": "bf16"},
        # the server the tests share: external, so not in the grid (the grid restarts engines)
        variants=[{"name": "same", "method": "external", "endpoint": endpoint.base_url,
                   "served_model": endpoint.model}],
        engine={"enforce_eager": True, "kv_cache_gib": 1, "max_num_seqs": 4},
        probe={"prompt_tokens": 32, "output_tokens": 16, "warmup_requests": 2, "slo": {"ttft_p95_ms": 60000}},
        extra={"grid": {"engine": {"max_num_seqs": [1, 4]}, "concurrency": [1, 4], "requests_per_cell": 8,
                        # a bound on a cell, not its expected length (a slower CPU must not cut it)
                        "max_seconds_per_cell": 600, "max_cells": 4}})
    return load_config(cfg)


def test_grid_on_two_servers_then_resumed(server, settings, base_model, tmp_path):
    _, endpoint = server
    cfg = _config(tmp_path, base_model, endpoint)
    res = run(cfg, settings)
    run_dir = tmp_path / "runs" / "grid"
    bf16 = res.record.variants[0]
    g = bf16.grid
    assert g.rows == ["mns=1", "mns=4"] and g.concurrency == [1, 4] and not g.errors
    assert g.served["mns=4"].on_server and not g.served["mns=1"].on_server
    assert g.served["mns=1"].startup_seconds > 0
    assert res.record.variants[1].grid is None  # external: not in the grid
    cells = {(c.row, c.concurrency): c for c in g.cells}
    assert len(cells) == 4
    for c in cells.values():
        assert c.errors == 0 and c.requests == 8 and c.output_throughput > 0
        assert c.ttft_ms.p95 > 0 and c.tpot_ms.p99 > 0
        assert c.memory.rss_bytes > 2**27 and c.memory.kv_cache_bytes == 2**30
        assert c.server["requests"] == 8, c.server_note  # the server's own count of the cell's requests
    one, four = cells[("mns=1", 4)], cells[("mns=4", 4)]
    # the setting took effect: one sequence at a time makes the other three wait in the server's queue
    assert one.server["queue_mean_ms"] > 2 * four.server["queue_mean_ms"]
    assert four.output_throughput > one.output_throughput
    if "running_max" in one.server:  # read during the cell (every 0.5 s)
        assert one.server["running_max"] <= 1
    best = max(cells.values(), key=lambda c: c.output_throughput)  # the SLO is loose: the fastest cell
    assert g.best.model_dump() == {"row": best.row, "concurrency": best.concurrency,
                                  "output_throughput": best.output_throughput}
    # the views: the heat map file, the report, MLflow (the run's SQLite store)
    assert (run_dir / "grid-bf16.png").read_bytes()[:4] == b"\x89PNG"
    assert "## Batch size x concurrency" in (run_dir / "report.md").read_text()
    assert RunRecord.load(run_dir / "run.json").variants[0].grid == g
    from mlflow.tracking import MlflowClient

    client = MlflowClient(res.record.tracking["tracking_uri"])
    child = next(r for r in client.search_runs([res.record.tracking["experiment_id"]])
                 if r.info.run_name == "bf16")
    assert child.data.metrics["grid/mns_4/c_4/output_throughput"] == pytest.approx(four.output_throughput)
    assert child.data.metrics["grid/best/max_num_seqs"] in (1, 4)
    assert {a.path for a in client.list_artifacts(child.info.run_id, "grid")} == {
        "grid/grid-bf16.json", "grid/grid-bf16.parquet", "grid/grid-bf16.png"}

    # a crash after the first row: the second is redone, on a server of its own; the first is not touched
    rows = {p: p.stat().st_mtime_ns for p in (run_dir / "grid").glob("*.json")}
    assert len(rows) == 2
    lost = next(p for p in rows if '"row": "mns=1"' in p.read_text())
    lost.unlink()
    again = run(cfg.model_copy(update={"mlflow": cfg.mlflow.model_copy(update={"enabled": False})}), settings)
    g2 = again.record.variants[0].grid
    assert len(g2.cells) == 4 and g2.served["mns=1"].startup_seconds > 0
    assert {p: p.stat().st_mtime_ns for p in rows if p != lost} == {p: t for p, t in rows.items() if p != lost}
    assert [c for c in g2.cells if c.row == "mns=4"] == [c for c in g.cells if c.row == "mns=4"]
    # the evaluation's server was not started again: its start-up figure is the first run's, kept
    assert again.record.variants[0].startup_seconds == res.record.variants[0].startup_seconds > 0
