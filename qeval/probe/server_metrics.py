"""The server's own view of a probe step, read from the engine's Prometheus `/metrics`.

Scraped before and after each step (histogram and counter deltas cover exactly the step's requests)
and every `interval_s` during it (gauges: running and waiting requests, KV-cache usage). Parsing
(engines/prometheus.py, which the engines' watchdog reads too) and deltas are pure functions over exposition
text; `Scraper` is the only part that does I/O. Each engine declares the name tables its metrics follow
(`Capabilities.metrics`), which map them onto the same summary fields; any other metric is ignored, and a
server without `/metrics` gives an empty view and a note, never an error.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import httpx

from ..engines.base import tls_verify
from ..engines.capabilities import MetricNames
from ..engines.prometheus import Scrape, parse


# across label sets (one per engine core or data-parallel rank) counts add up; a usage share does not
_ACROSS_LABELS: dict[str, Callable[[Sequence[float]], float]] = {"kv_cache_usage": max}


def _known(tables: Sequence[MetricNames] | None) -> Sequence[MetricNames]:
    """The tables to look for: the endpoint's engine's, or (None: a server of unknown kind) every engine's."""
    if tables is not None:
        return tables
    from ..engines.base import known_metric_names

    return known_metric_names()


def detect(scrape: Scrape, tables: Sequence[MetricNames] | None = None) -> MetricNames | None:
    """The table whose names the server exposes most of; None if it exposes none of any table's."""
    present = scrape.names()
    tables = _known(tables)
    if not tables:
        return None
    best = max(tables, key=lambda t: len(t.all_names() & present))
    return best if best.all_names() & present else None


def _first(names: Sequence[str], where: Mapping[str, object]) -> str | None:
    return next((n for n in names if n in where), None)


def summarize(before: Scrape, after: Scrape, during: Sequence[Scrape], names: MetricNames) -> dict[str, float]:
    """The step's server-side figures: `<field>_mean_ms` from histogram deltas, `requests` (finished in the
    step), `<gauge>_mean` / `<gauge>_max` over the readings taken during it, counter increases, and the
    prefix-cache hit rate. A figure the server does not expose, or whose counter went backwards (a
    restart in the step), is left out."""
    out: dict[str, float] = {}
    for fld, candidates in names.means.items():
        name = _first(candidates, after.hists)
        if name is None or name not in before.hists:
            continue
        d_sum = after.hists[name][0] - before.hists[name][0]
        d_count = after.hists[name][1] - before.hists[name][1]
        if d_count > 0 and d_sum >= 0:
            out[f"{fld}_mean_ms"] = 1000.0 * d_sum / d_count
        if fld == "e2e" and d_count >= 0:
            out["requests"] = d_count
    for fld, candidates in names.counters.items():
        name = _first(candidates, after.counters)
        if name is not None and name in before.counters and after.counters[name] >= before.counters[name]:
            out[fld] = after.counters[name] - before.counters[name]
    if out.get("prefix_cache_queries"):
        out["prefix_cache_hit_rate"] = out.get("prefix_cache_hits", 0.0) / out["prefix_cache_queries"]
    for fld, candidates in names.gauges.items():
        across = _ACROSS_LABELS.get(fld, sum)
        values = [across(s.gauges[n]) for s in during
                  if (n := _first(candidates, s.gauges)) is not None and s.gauges[n]]
        if values:
            out[f"{fld}_mean"] = sum(values) / len(values)
            out[f"{fld}_max"] = max(values)
    return out


@dataclass(frozen=True)
class ServerView:
    figures: dict[str, float] = field(default_factory=dict)
    engine: str | None = None  # whose metric names were found
    note: str = ""  # why figures are missing, when they are


def server_view(before: str | None, after: str | None, during: Sequence[str] = (), note: str = "",
                tables: Sequence[MetricNames] | None = None) -> ServerView:
    """Exposition texts around (and during) a step -> the step's server view, read with the engine's name
    `tables` (None: every engine's qeval knows). Never raises."""
    if before is None or after is None:
        return ServerView(note=note or "no /metrics reading")
    try:
        b, a = parse(before), parse(after)
        d = [parse(t) for t in during]
    except ValueError as e:
        return ServerView(note=f"/metrics is not Prometheus text: {e}"[:200])
    tables = _known(tables)
    names = detect(a, tables)
    if names is None:
        return ServerView(note=_none_known(tables))
    return ServerView(figures=summarize(b, a, d, names), engine=names.engine, note=note)


def _none_known(tables: Sequence[MetricNames]) -> str:
    if not tables:
        return "the engine declares no Prometheus metrics"
    labels = [t.label for t in tables]
    which = labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " or " + labels[-1]
    hints = "; ".join(t.hint for t in tables if t.hint)
    return f"/metrics has none of the {which} metrics qeval knows" + (f" ({hints})" if hints else "")


def metrics_url(base_url: str) -> str:
    """Engines serve /metrics at the server root, beside (not under) the OpenAI /v1 routes."""
    return base_url.rstrip("/").removesuffix("/v1") + "/metrics"


class Scraper:
    """Reads /metrics when entered, every `interval_s` while the step runs (in a thread, raw text only:
    parsing waits until the step is over, so the probe's own CPU share stays clean), and in `view()`."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, interval_s: float = 0.5,
                 timeout_s: float = 2.0, tables: Sequence[MetricNames] | None = None):
        self.url, self.headers, self.interval_s, self.timeout_s = url, headers or {}, interval_s, timeout_s
        self.tables = tables  # the engine's name tables (None: any engine's qeval knows)
        self._before: str | None = None
        self._during: list[str] = []
        self._note = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _fetch(self, client: httpx.Client) -> str | None:
        try:
            r = client.get(self.url)
        except httpx.HTTPError as e:
            self._note = f"no /metrics at {self.url}: {type(e).__name__}"
            return None
        if r.status_code != 200:
            self._note = f"no /metrics at {self.url}: HTTP {r.status_code}"
            return None
        return r.text

    def _client(self) -> httpx.Client:
        return httpx.Client(timeout=self.timeout_s, headers=self.headers, verify=tls_verify(self.url))

    def _poll(self) -> None:
        # jittered around interval_s: a fixed period can lock onto the batches' rhythm (requests of equal
        # length end together) and read the same phase, e.g. the gap between batches, every time
        rng = random.Random(0)
        with self._client() as client:
            while not self._stop.wait(self.interval_s * rng.uniform(0.5, 1.5)):
                text = self._fetch(client)
                if text is not None:
                    self._during.append(text)

    def __enter__(self) -> "Scraper":
        with self._client() as client:
            self._before = self._fetch(client)
        if self._before is not None and self.interval_s > 0:
            self._thread = threading.Thread(target=self._poll, name="qeval-metrics", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def view(self, expected_requests: int = 0, settle_s: float = 1.0) -> ServerView:
        """The step's view. Waits (up to `settle_s`) until the server has counted `expected_requests`
        finished requests, in case it records a request's metrics just after its last byte is sent."""
        if self._before is None:
            return server_view(None, None, note=self._note)
        deadline = time.monotonic() + settle_s
        with self._client() as client:
            while True:
                after = self._fetch(client)
                v = server_view(self._before, after, self._during, note=self._note, tables=self.tables)
                if v.figures.get("requests", expected_requests) >= expected_requests or time.monotonic() > deadline:
                    return v
                time.sleep(0.1)
