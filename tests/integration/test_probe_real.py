"""A short latency sweep against the real vLLM server."""

import pytest

from qeval.config import ProbeSpec
from qeval.probe.latency import run_probe

pytestmark = pytest.mark.slow


def test_short_sweep(server):
    _, endpoint = server
    spec = ProbeSpec(enabled=True, concurrency=[1, 4], rates=[2.0], prompt_tokens=32, output_tokens=16,
                     requests_per_step=8, warmup_requests=2, slo={"ttft_p95_ms": 60000})
    res = run_probe(spec, endpoint)
    assert [s.load for s in res.steps] == [1, 4, 2.0]
    for s in res.steps:
        assert s.errors == 0 and s.requests >= 8
        assert s.ttft_ms["p50"] > 0 and s.tpot_ms["p50"] > 0 and s.e2e_ms["p95"] >= s.e2e_ms["p50"]
    c1, c4 = res.steps[0], res.steps[1]
    assert c4.output_throughput > c1.output_throughput  # batching: more in flight, more tokens per second
    assert all(r["output_tokens"] == 16 and r["prompt_tokens"] == 32 for r in res.requests)  # ignore_eos held
    assert res.max_concurrency_within_slo == 4
    assert c4.client_cpu_share < 0.5  # the probe is not its own bottleneck
