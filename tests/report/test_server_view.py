"""The server's view of each probe step reaches the Markdown and HTML reports and MLflow's per-step metrics."""

from __future__ import annotations

from pathlib import Path

from qeval.probe.analysis import dist
from qeval.probe.latency import StepSummary
from qeval.probe.server_metrics import server_view
from qeval.record.run import RunRecord, VariantResult
from qeval.report import html, markdown
from qeval.tracking.mlflow import probe_history

FIXTURES = Path(__file__).parents[1] / "probe" / "fixtures"


def _step(load: int, server) -> dict:
    d = dist([100.0, 200.0, 300.0]).as_dict()
    return StepSummary(kind="concurrency", load=load, requests=8, errors=0, wall_s=2.0, request_throughput=4.0,
                       output_throughput=128.0, client_cpu_share=0.05, ttft_ms=d, tpot_ms=d, itl_ms=d, e2e_ms=d,
                       server=dict(server.figures), server_note=server.note).__dict__


def _record(steps: list[dict], name: str = "bf16") -> RunRecord:
    v = VariantResult(name=name, method="bf16", role="baseline", engine="vllm",
                      probe={"steps": steps, "saturation_concurrency": None, "max_concurrency_within_slo": None})
    return RunRecord(run_id="r", campaign="c", config_hash="h", config={}, config_file="c.yaml", command=[],
                     started_at="now", variants=[v])


def test_report_shows_server_queue_and_ttft_next_to_the_clients():
    text = {w: (FIXTURES / f"vllm-0.32.0-cpu-metrics-{w}.txt").read_text() for w in ("before", "during", "after")}
    queued = server_view(text["before"], text["after"], [text["during"]])
    md = markdown.render(_record([_step(1, server_view(None, None, note="no /metrics at x: HTTP 404")),
                                  _step(8, queued)]))
    assert "### The server's view at each load" in md
    row = next(line for line in md.splitlines() if line.startswith("| concurrency 8 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "200 / 200 / 290"  # the client's TTFT mean / p50 / p95
    assert cells[2] == "837" and cells[3] == "898"  # the server's queue and TTFT means (ms)
    assert cells[5] == "2.0 / 2" and cells[6] == "4.0 / 4" and cells[8] == "8 / 8"
    one = next(line for line in md.splitlines() if line.startswith("| concurrency 1 |"))
    assert "| - | - |" in one  # that step had no /metrics
    assert "The server's view at each load" in html.render(_record([_step(8, queued)]))


def test_no_server_figures_gives_a_note_and_no_table():
    md = markdown.render(_record([_step(1, server_view(None, None, note="no /metrics at x: HTTP 404"))]))
    assert "The server's view" not in md
    assert "- bf16: no server-side figures (no /metrics at x: HTTP 404)" in md


def test_old_records_without_server_figures_still_render():
    step = _step(1, server_view(None, None))
    del step["server"], step["server_note"]
    assert "The server's view" not in markdown.render(_record([step]))


def test_mlflow_history_carries_server_figures_per_concurrency():
    text = {w: (FIXTURES / f"vllm-0.32.0-cpu-metrics-{w}.txt").read_text() for w in ("before", "after")}
    hist = probe_history(_record([_step(8, server_view(text["before"], text["after"]))]), "bf16")
    got = {k: (v, step) for k, v, step in hist}
    assert got["latency/server_queue_mean_ms"][1] == 8
    assert abs(got["latency/server_queue_mean_ms"][0] - 836.96) < 0.01


def test_the_warm_up_is_said_and_one_that_never_settled_is_flagged():
    steps = [_step(1, server_view(None, None))]

    def with_warmup(**w) -> RunRecord:
        v = VariantResult(name="bf16", method="bf16", role="baseline", engine="vllm",
                          probe={"steps": steps, "saturation_concurrency": None, "max_concurrency_within_slo": None,
                                 "warmup": w})
        return _record(steps).model_copy(update={"variants": [v]})

    rounds = dict(requests=44, seconds=12.4, concurrency=16, rounds_tok_s=[300.04, 410.0, 415.2])
    md = markdown.render(with_warmup(**rounds, steady=True))
    assert "- bf16: 44 requests in 12 s; rounds at concurrency 16: 300.0 -> 410.0 -> 415.2 tok/s, steady" in md
    assert "**not steady** when its time ran out" in markdown.render(with_warmup(**rounds, steady=False))
    # a fixed warm-up only, or a probe stored before warm-ups were recorded: no line
    assert "Warm-up before the figures" not in markdown.render(with_warmup(requests=4, seconds=0.5))
    assert "Warm-up before the figures" not in markdown.render(_record(steps))
