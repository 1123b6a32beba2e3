"""Percentiles, the saturation point and the SLO search on known inputs."""

import math

import pytest

from qeval.probe.analysis import Step, dist, max_load_within_slo, saturation_point
from qeval.probe.client import RequestResult


def test_percentiles_match_numpy_on_known_values():
    d = dist(list(range(1, 101)))
    assert (d.p50, d.p90, d.p95, d.p99) == pytest.approx((50.5, 90.1, 95.05, 99.01))
    assert d.mean == 50.5 and d.n == 100
    assert dist([3.0]).p99 == 3.0
    assert math.isnan(dist([]).p50)
    assert dist([1.0, None, float("nan"), 3.0]).n == 2  # failed requests are not timed


def test_tpot_excludes_the_first_token():
    r = RequestResult(ok=True, start=0.0, ttft=0.5, e2e=1.5, output_tokens=11)
    assert r.tpot == pytest.approx(0.1)
    assert RequestResult(ok=True, start=0.0, ttft=0.5, e2e=0.5, output_tokens=1).tpot is None


def test_saturation_point():
    steps = [Step(1, 100, 1.0), Step(2, 190, 1.05), Step(4, 360, 1.1), Step(8, 380, 2.0), Step(16, 385, 4.1)]
    assert saturation_point(steps) == 4
    growing = [Step(c, 100 * c, 1.0) for c in (1, 2, 4, 8)]
    assert saturation_point(growing) is None
    # throughput flat but latency flat too (a client-side bottleneck, not the server's knee): not saturation
    assert saturation_point([Step(1, 100, 1.0), Step(2, 101, 1.0)]) is None


def test_max_load_within_slo():
    loads = [1, 2, 4, 8]
    m = [{"ttft_p95_ms": 100}, {"ttft_p95_ms": 200}, {"ttft_p95_ms": 600}, {"ttft_p95_ms": 300}]
    assert max_load_within_slo(loads, m, {"ttft_p95_ms": 500}) == 2  # stops at the first breach
    assert max_load_within_slo(loads, m, {"ttft_p95_ms": 50}) is None
    assert max_load_within_slo(loads, m, {"ttft_p95_ms": 1000}) == 8


def test_kv_cache_size_from_the_vllm_log():
    from qeval.engines.vllm import parse_kv_cache

    cpu = ("INFO [cpu_worker.py:260] Explicitly set (2.0/20.96) GiB for KV cache on node 0.\n"
           "INFO [kv_cache_utils.py:2327] CPU KV cache size: 93,184 tokens, Maximum concurrency for 2,048 tokens")
    assert parse_kv_cache(cpu) == (93184, 2.0)
    gpu = "Available KV cache memory: 103.1 GiB\nGPU KV cache size: 843,776 tokens"
    assert parse_kv_cache(gpu) == (843776, 103.1)
    assert parse_kv_cache("nothing here") == (None, None)


def test_goodput_counts_requests_within_every_per_request_slo():
    from qeval.probe.client import StepRun
    from qeval.probe.latency import good_requests, summarize

    rs = [RequestResult(ok=True, start=0.0, ttft=0.1, e2e=1.1, output_tokens=11),   # tpot 100 ms
          RequestResult(ok=True, start=0.0, ttft=0.6, e2e=1.1, output_tokens=11),   # ttft 600 ms
          RequestResult(ok=True, start=0.0, ttft=0.1, e2e=3.1, output_tokens=11),   # tpot 300 ms
          RequestResult(ok=False, start=0.0, ttft=0.1, e2e=0.2, output_tokens=0)]   # an error never counts
    assert good_requests(rs, {"ttft_ms": 500}) == 2
    assert good_requests(rs, {"ttft_ms": 500, "tpot_ms": 150}) == 1
    assert good_requests(rs, {}) == 3
    s = summarize("concurrency", 4, StepRun(results=rs, wall=2.0, client_cpu=0.1), None, {"ttft_ms": 500})
    assert s.goodput == 1.0 and s.flat()["goodput"] == 1.0  # 2 good requests in 2 s
    assert summarize("concurrency", 4, StepRun(results=rs, wall=2.0, client_cpu=0.1)).goodput is None
