"""The latency probe: a concurrency sweep (and optional Poisson-rate steps) against one endpoint.

Per request: TTFT, TPOT (excluding the first token), every ITL, E2E. Per step: request and output
token throughput, mean / p50 / p90 / p95 / p99, errors, and this client's own CPU share, so that
a probe that became its own bottleneck shows. Beside each step, the server's own view of it (queue
time, server-side TTFT, running and waiting requests, KV-cache usage) from its /metrics.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Coroutine

from .. import aio
from ..record.measurements import step_figures
from .spec import ProbeSpec
from ..engines import Endpoint
from .analysis import Step, dist, max_load_within_slo, saturation_point, steady
from .client import RequestResult, StepRun, random_prompt, run_concurrency, run_rate
from .server_metrics import Scraper, ServerView, metrics_url


@dataclass
class StepSummary:
    kind: str  # "concurrency" or "rate"
    load: float
    requests: int
    errors: int
    wall_s: float
    request_throughput: float  # completed requests per second
    output_throughput: float  # output tokens per second
    client_cpu_share: float  # the probe process's CPU seconds per wall second
    ttft_ms: dict[str, float]
    tpot_ms: dict[str, float]
    itl_ms: dict[str, float]
    e2e_ms: dict[str, float]
    # the engine's own /metrics over the step (server_metrics.summarize), and why figures are missing
    server: dict[str, float] = field(default_factory=dict)
    server_note: str = ""
    # requests per second that met every per-request SLO (ProbeSpec.goodput_slo), as `vllm bench serve
    # --goodput` counts them; None without such SLOs
    goodput: float | None = None

    def flat(self) -> dict[str, float]:
        return step_figures(self)


def good_requests(results: list[RequestResult], slo: dict[str, float]) -> int:
    """Requests that completed within every per-request SLO (ttft_ms, tpot_ms, e2e_ms)."""
    def meets(r: RequestResult) -> bool:
        got = {"ttft_ms": r.ttft, "tpot_ms": r.tpot, "e2e_ms": r.e2e}
        return all(got[k] is not None and got[k] * 1000.0 <= limit for k, limit in slo.items())

    return sum(1 for r in results if r.ok and meets(r))


def summarize(kind: str, load: float, run: StepRun, server: ServerView | None = None,
              goodput_slo: dict[str, float] | None = None) -> StepSummary:
    ok = [r for r in run.results if r.ok]
    ms = 1000.0
    out_tokens = sum(r.output_tokens for r in ok)
    return StepSummary(
        kind=kind, load=load, requests=len(run.results), errors=len(run.results) - len(ok), wall_s=run.wall,
        request_throughput=len(ok) / run.wall if run.wall else 0.0,
        output_throughput=out_tokens / run.wall if run.wall else 0.0,
        client_cpu_share=run.client_cpu / run.wall if run.wall else 0.0,
        ttft_ms=dist([r.ttft * ms for r in ok]).as_dict(),
        tpot_ms=dist([r.tpot * ms for r in ok if r.tpot is not None]).as_dict(),
        itl_ms=dist([x * ms for r in ok for x in r.itls]).as_dict(),
        e2e_ms=dist([r.e2e * ms for r in ok]).as_dict(),
        server=dict(server.figures) if server else {}, server_note=server.note if server else "",
        goodput=(good_requests(run.results, goodput_slo) / run.wall if run.wall else 0.0) if goodput_slo else None)


@dataclass
class Warmup:
    """What ran before the figures: the fixed requests, then (warmup_until_steady) rounds at one concurrency."""

    requests: int
    seconds: float
    concurrency: int | None = None  # the rounds' concurrency; None: no rounds
    rounds_tok_s: list[float] = field(default_factory=list)  # output tok/s of each round
    steady: bool | None = None  # whether the rounds settled before warmup_max_seconds; None: no rounds


@dataclass
class ProbeResult:
    steps: list[StepSummary]
    saturation_concurrency: float | None
    max_concurrency_within_slo: float | None
    requests: list[dict]  # the per-request table
    warmup: Warmup | None = None

    def to_json(self) -> dict:
        return {"steps": [s.__dict__ for s in self.steps], "saturation_concurrency": self.saturation_concurrency,
                "max_concurrency_within_slo": self.max_concurrency_within_slo,
                "warmup": self.warmup.__dict__ if self.warmup else None}


def _vocab_size(endpoint: Endpoint) -> int | None:
    if endpoint.tokenizer is None:
        return None
    try:
        return int(json.loads((Path(endpoint.tokenizer) / "config.json").read_text())["vocab_size"])
    except (OSError, ValueError, KeyError):
        return None


def _prompts(spec: ProbeSpec, endpoint: Endpoint, count: int, seed: int) -> list:
    vocab = _vocab_size(endpoint)
    rng = random.Random(seed)
    # no tokenizer, or an engine whose /v1/completions takes only text (TGI): text prompts, about one token a word
    if vocab is None or not endpoint.capabilities.token_prompts:
        return [" ".join(rng.choice(("the", "model", "serves", "tokens", "fast")) for _ in range(spec.prompt_tokens))
                for _ in range(count)]
    return [random_prompt(rng, spec.prompt_tokens, vocab) for _ in range(count)]


def _rows(kind: str, load: float, results: list[RequestResult]) -> list[dict]:
    return [{"kind": kind, "load": load, "ok": r.ok, "ttft_ms": None if r.ttft is None else r.ttft * 1000,
             "tpot_ms": None if r.tpot is None else r.tpot * 1000, "e2e_ms": None if r.e2e is None else r.e2e * 1000,
             "itl_ms_mean": (sum(r.itls) / len(r.itls) * 1000) if r.itls else None,
             "output_tokens": r.output_tokens, "prompt_tokens": r.prompt_tokens, "error": r.error} for r in results]


def warm_up(spec: ProbeSpec, endpoint: Endpoint, seed: int) -> Warmup:
    """Requests not counted, so compilation or cache effects stay out of the figures: `warmup_requests`, then,
    with `warmup_until_steady`, rounds at the sweep's largest concurrency (at most 16) until two rounds' output
    tok/s agree within that fraction or `warmup_max_seconds` is spent."""
    t0, sent = time.perf_counter(), 0

    def run(n: int, c: int, k: int) -> StepRun:
        return aio.run(run_concurrency(endpoint.base_url, endpoint.model, _prompts(spec, endpoint, n, seed + 999 + k),
                                       spec.output_tokens, c, spec.max_seconds_per_step, headers=endpoint.headers))

    if spec.warmup_requests:
        sent += len(run(spec.warmup_requests, min(spec.warmup_requests, 4), 0).results)
    out = Warmup(requests=sent, seconds=0.0)
    if spec.warmup_until_steady is not None:
        out.concurrency = c = min(max(spec.concurrency), 16)
        out.steady = False
        while time.perf_counter() - t0 < spec.warmup_max_seconds:
            r = run(max(2 * c, 8), c, 1 + len(out.rounds_tok_s))
            out.requests += len(r.results)
            out.rounds_tok_s.append(summarize("concurrency", c, r).output_throughput)
            if steady(out.rounds_tok_s, spec.warmup_until_steady):
                out.steady = True
                break
    out.seconds = time.perf_counter() - t0
    return out


def run_probe(spec: ProbeSpec, endpoint: Endpoint, seed: int = 0, on_step=None,
              scrape_interval_s: float = 0.5) -> ProbeResult:
    """The sweep; around each step the engine's /metrics is read (server_metrics.Scraper), every
    `scrape_interval_s` during it for the gauges (0: before and after only)."""
    steps: list[StepSummary] = []
    rows: list[dict] = []
    warmup = warm_up(spec, endpoint, seed)

    def record(kind: str, load: float, start: Callable[[], Coroutine[Any, Any, StepRun]]) -> None:
        with Scraper(metrics_url(endpoint.base_url), endpoint.headers, interval_s=scrape_interval_s,
                     tables=endpoint.capabilities.metrics) as scraper:
            run = aio.run(start())
        s = summarize(kind, load, run, scraper.view(expected_requests=len(run.results)), spec.goodput_slo)
        steps.append(s)
        rows.extend(_rows(kind, load, run.results))
        if on_step:
            on_step(s)

    def knee() -> float | None:
        conc = [x for x in steps if x.kind == "concurrency"]
        return saturation_point([Step(x.load, x.output_throughput, x.e2e_ms["p95"]) for x in conc])

    for k, c in enumerate(spec.concurrency):
        n = max(spec.requests_per_step, c * spec.min_rounds_per_step)
        prompts = _prompts(spec, endpoint, n, seed + k)  # made before the /metrics window opens
        record("concurrency", c, lambda: run_concurrency(
            endpoint.base_url, endpoint.model, prompts, spec.output_tokens, c,
            spec.max_seconds_per_step, headers=endpoint.headers))
        sat = knee()
        if spec.stop_after_saturation and sat is not None and c >= 2 * sat:
            break  # one step past the knee shows it; more only adds queueing time
    for k, rate in enumerate(spec.rates):
        prompts = _prompts(spec, endpoint, spec.requests_per_step, seed + 100 + k)
        record("rate", rate, lambda: run_rate(
            endpoint.base_url, endpoint.model, prompts,
            spec.output_tokens, rate, seed + k, spec.max_seconds_per_step, headers=endpoint.headers))
    conc = [x for x in steps if x.kind == "concurrency"]
    slo_load = max_load_within_slo([x.load for x in conc], [x.flat() for x in conc], spec.slo) if spec.slo else None
    sat = knee()
    return ProbeResult(steps=steps, saturation_concurrency=sat, max_concurrency_within_slo=slo_load, requests=rows,
                       warmup=warmup)
