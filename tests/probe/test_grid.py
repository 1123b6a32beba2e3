"""Batch size x concurrency: rows, the best cell under the SLOs, the config's bounds, and the grid's views
(record, Markdown, heat map, MLflow names) on synthetic cells."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from qeval.pipeline.campaign import Campaign
from qeval.config import CampaignConfig, GridEngineSpec, GridSpec, ProbeSpec, load_config
from qeval.engines.base import EngineMemory
from qeval.probe.analysis import dist
from qeval.probe.grid import assemble, best_cell, cell, cell_probe, row_label, settings
from qeval.probe.latency import StepSummary
from qeval.record.run import RunRecord, VariantResult
from qeval.record.measurements import Grid, GridCell, metric_segment
from qeval.report import html, markdown, plots
from qeval.settings import Settings
from qeval.tracking.mlflow import grid_metrics, metric_name

MEM = EngineMemory(rss_bytes=900 * 2**20, kv_cache_bytes=2**30, kv_cache_tokens=43690)


def _cell(mns: int, c: int, tput: float, ttft_p95: float = 100.0, errors: int = 0) -> dict:
    d = dist([ttft_p95 * 0.5, ttft_p95]).as_dict() | {"p95": ttft_p95, "p99": ttft_p95 * 1.1}
    step = StepSummary(kind="concurrency", load=c, requests=16, errors=errors, wall_s=4.0, request_throughput=4.0,
                       output_throughput=tput, client_cpu_share=0.05, ttft_ms=d, tpot_ms=dist([20.0, 30.0]).as_dict(),
                       itl_ms=dist([20.0]).as_dict(), e2e_ms=dist([400.0]).as_dict(),
                       server={"queue_mean_ms": 12.0, "running_max": float(min(c, mns))})
    return cell({"max_num_seqs": mns}, step, MEM)


def _grid(slo: dict | None = None, errors: dict | None = None) -> dict:
    spec = GridSpec(engine=GridEngineSpec(max_num_seqs=[2, 8]), concurrency=[1, 4, 8])
    rows = [{"row": "mns=2", "on_server": False, "startup_seconds": 30.0,
             "cells": [_cell(2, 1, 30.0, 80), _cell(2, 4, 55.0, 900), _cell(2, 8, 56.0, 2500)]},
            {"row": "mns=8", "on_server": True, "startup_seconds": None,
             "cells": [_cell(8, 1, 31.0, 80), _cell(8, 4, 90.0, 300), _cell(8, 8, 120.0, 1500)]}]
    return assemble(spec, {"ttft_p95_ms": 1000} if slo is None else slo, rows, errors or {})


def test_rows_are_the_product_of_the_settings_in_config_order():
    spec = GridEngineSpec(max_num_seqs=[2, 8], max_num_batched_tokens=[256, 512])
    rows = settings(spec)
    assert [(r["max_num_seqs"], r["max_num_batched_tokens"]) for r in rows] == [(2, 256), (2, 512), (8, 256), (8, 512)]
    assert list(rows[0]) == ["max_num_seqs", "max_num_batched_tokens"]
    assert row_label(rows[1]) == "mns=2,mnbt=512"
    assert row_label({"gpu_memory_utilization": 0.9}) == "gmu=0.9"
    assert metric_segment("mns=2,mnbt=512") == "mns_2.mnbt_512"


def test_best_cell_is_the_fastest_within_the_slos():
    g = _grid()
    assert g["best"] == {"row": "mns=8", "concurrency": 4, "output_throughput": 90.0}  # 120 tok/s misses TTFT
    assert g["rows"] == ["mns=2", "mns=8"] and len(g["cells"]) == 6
    assert best_cell(g["cells"], {})["output_throughput"] == 120.0  # no SLO: any error-free cell
    assert best_cell(g["cells"], {"ttft_p95_ms": 10}) is None  # nothing meets it
    assert best_cell(g["cells"], {"ttft_p99_ms": 1000, "tpot_p95_ms": 100})["concurrency"] == 4


def test_a_cell_with_errors_or_a_missing_figure_never_wins():
    cells = [_cell(8, 1, 30.0), _cell(8, 4, 500.0, errors=1)]
    assert best_cell(cells, {})["concurrency"] == 1
    assert not GridCell.model_validate(cells[1]).meets_slo({})
    nan = _cell(8, 8, 900.0)
    nan["ttft_ms"] = dist([]).as_dict()  # no request timed
    assert not GridCell.model_validate(nan).meets_slo({"ttft_p95_ms": 1e9})
    # not served: not met
    assert not GridCell.model_validate(_cell(8, 1, 30.0)).meets_slo({"server_kv_cache_usage_max": 1.0})


def test_ties_go_to_the_lower_concurrency():
    assert best_cell([_cell(8, 8, 50.0), _cell(8, 4, 50.0)], {})["concurrency"] == 4


def test_matrix_table_and_figures():
    g = _grid(errors={"mns=16": "boom"})
    g["rows"].append("mns=16")  # a row whose engine failed: no cells
    m = Grid.model_validate(g).matrix()
    assert m[1] == [31.0, 90.0, 120.0] and all(math.isnan(x) for x in m[2])
    t = Grid.model_validate(g).table()
    assert [r["best"] for r in t].count(True) == 1
    assert t[0]["max_num_seqs"] == 2 and t[0]["memory_rss_bytes"] == 900 * 2**20
    f = GridCell.model_validate(g["cells"][4]).figures()
    assert f["ttft_p95_ms"] == 300 and f["server_queue_mean_ms"] == 12.0 and f["requests"] == 16


def test_cell_probe_takes_the_grid_bounds_and_the_probe_request_shape():
    p = cell_probe(GridSpec(engine=GridEngineSpec(max_num_seqs=[2]), concurrency=[1, 4], requests_per_cell=6,
                            max_seconds_per_cell=9), ProbeSpec(prompt_tokens=32, output_tokens=8, rates=[1.0]))
    assert (p.concurrency, p.rates, p.requests_per_step, p.max_seconds_per_step) == ([1, 4], [], 6, 9)
    assert (p.prompt_tokens, p.output_tokens, p.stop_after_saturation, p.enabled) == (32, 8, False, True)


def _cfg(**grid) -> dict:
    return {"name": "t", "model": {"builtin": "smollm2-135m-instruct"}, "baseline": {"name": "bf16", "method": "bf16"},
            "variants": [{"name": "int8", "method": "int8"},
                         {"name": "ext", "method": "external", "endpoint": "http://127.0.0.1:1/v1"}],
            "probe": {"enabled": True}, "grid": {"engine": {"max_num_seqs": [2, 8]}, "concurrency": [1, 4, 8], **grid}}


@pytest.mark.parametrize("grid, says", [
    ({"variants": ["int9"]}, "grid.variants lists 'int9', which is not a variant of this campaign "
                             "(did you mean 'int8'?)"),
    ({"variants": ["ext"]}, "grid.variants lists 'ext', an external endpoint"),
    ({"max_cells": 8}, "2 variant(s) x 2 engine setting(s) x 3 concurrencies = 12 cells, more than max_cells (8)"),
    ({"engine": {}}, "give at least one engine setting"),
    ({"engine": {"max_num_seqs": [2, 2]}}, "max_num_seqs: a value is repeated"),
    ({"engine": {"max_num_seqs": [0]}}, "greater than 0"),
    ({"engine": {"gpu_memory_utilization": [0.8]}}, "grid.engine.gpu_memory_utilization is for device: gpu"),
    ({"concurrency": [1, 1]}, "a concurrency is repeated"),
    ({"concurrency": []}, "at least 1 item"),
    ({"max_cells": 10_000}, "less than or equal to 400"),
    ({"cells": 4}, "Extra inputs are not permitted"),
])
def test_bad_grids_are_refused(grid, says):
    with pytest.raises(ValidationError) as e:
        CampaignConfig.model_validate(_cfg(**grid))
    assert says in str(e.value)


def test_the_grid_runs_on_variants_whose_engine_has_its_settings_only():
    d = _cfg()
    d["variants"][0]["engine"] = {"kind": "trtllm", "device": "gpu"}  # TensorRT-LLM has no max_num_seqs
    with pytest.raises(ValidationError, match=r"settings \(max_num_seqs\) are not settings of \['int8'\]'s engine"):
        CampaignConfig.model_validate(d)
    assert CampaignConfig.model_validate(d | {"grid": d["grid"] | {"variants": ["bf16"]}}).grid.variants == ["bf16"]


def test_a_grid_alone_is_enough_to_measure_and_its_absence_leaves_the_hash_alone():
    cfg = CampaignConfig.model_validate(_cfg(variants=["int8"]) | {"suites": [], "probe": {}})
    assert cfg.grid.rows() == 2
    plain = CampaignConfig.model_validate({k: v for k, v in _cfg().items() if k != "grid"})
    assert plain.config_hash() == CampaignConfig.model_validate(_cfg() | {"grid": None}).config_hash()
    assert CampaignConfig.model_validate(_cfg()).config_hash() != plain.config_hash()


def test_rows_know_which_setting_the_evaluation_server_has(tmp_path):
    cfg = CampaignConfig.model_validate(_cfg(variants=["int8"]) | {"engine": {"max_num_seqs": 8},
                                                                   "output_dir": str(tmp_path)})
    camp = Campaign(cfg, Settings(cache=tmp_path / "cache"))
    int8 = cfg.variants[0]
    rows = camp.grid_rows(int8, "h")
    assert [(r.label, r.on_server, r.spec.max_num_seqs) for r in rows] == [("mns=2", False, 2), ("mns=8", True, 8)]
    assert len({r.path for r in rows}) == 2 and all(r.path.parent == tmp_path / "t" / "grid" for r in rows)
    assert camp.grid_rows(cfg.baseline, "h") == [] and camp.grid_rows(cfg.variants[1], None) == []  # not chosen
    # the key has max_num_seqs only where it is set: a variant that sets none keys as it would without the grid
    unset = CampaignConfig.model_validate({k: v for k, v in _cfg().items() if k != "grid"})
    plain_key = Campaign(unset, Settings(cache=tmp_path / "cache")).variant_key(unset.variants[0], "h")
    assert camp.variant_key(int8, "h") != plain_key
    assert camp.variant_key(int8.model_copy(update={"engine": {"max_num_seqs": 8}}), "h") == camp.variant_key(int8, "h")


def _record(grid: dict) -> RunRecord:
    v = VariantResult(name="bf16", method="bf16", role="baseline", engine="vllm", grid=grid)
    return RunRecord(run_id="r", campaign="c", config_hash="h", config={}, config_file="c.yaml", command=[],
                     started_at="now", variants=[v])


def test_views_of_the_grid():
    g = _grid(errors={"mns=16": "vLLM exited during start-up"})
    r = RunRecord.model_validate_json(_record(g).model_dump_json())  # the record round-trips it
    md = markdown.render(r)
    assert "## Batch size x concurrency" in md
    assert "best under the SLOs (ttft_p95_ms <= 1000): mns=8 at concurrency 4, 90.0 output tok/s" in md
    row = next(line for line in md.splitlines() if line.startswith("| mns=8 (evaluation server) |"))
    assert "**90.0 (best)**" in row and "120.0 (misses SLO)" in row
    assert "- mns=16: no cells (vLLM exited during start-up)" in md
    png = plots.grid_heatmap(r.variants[0])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert html.render(r).count("data:image/png") == 1
    m = grid_metrics(g)
    assert m["grid/mns_8/c_4/output_throughput"] == 90.0 and m["grid/mns_2/c_1/memory_rss_bytes"] == 900 * 2**20
    assert m["grid/best/output_throughput"] == 90.0 and m["grid/best/max_num_seqs"] == 8
    assert all(metric_name(*k.split("/")) == k for k in m)  # every name is one MLflow accepts
    assert plots.grid_heatmap(VariantResult(name="x", method="bf16", role="baseline")) is None


def test_the_shipped_grid_config_loads():
    cfg = load_config(Path(__file__).parents[2] / "examples" / "grid.yaml")
    assert (cfg.grid.rows(), cfg.grid.concurrency, cfg.engine.max_num_seqs) == (2, [1, 4, 8], 8)
    camp = Campaign(cfg, Settings(cache=Path("/nonexistent")))
    assert [r.on_server for r in camp.grid_rows(cfg.variants[0], "h")] == [False, True]
