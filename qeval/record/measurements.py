"""The run record's measurements as typed models: the latency probe, the batch size x concurrency grid (and
its views: a cell's figures, the SLOs, the heat map's matrix, the table), the next-token distributions. Field
names and order are the producers' (probe/latency.py StepSummary and ProbeResult.to_json, probe/grid.py cell
and assemble, pipeline/judge.py distribution), so the record's JSON holds their data as they wrote it.

A float the record saved as NaN (a step with no timed request, a distribution of no tokens) reads back as
None: pydantic writes NaN and infinity as null.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict

Num = int | float  # kept as given: a concurrency is an int, a request rate a float
Figure = float | None  # None: a NaN read back from the record, or not measured (TGI's top-1)


class RecordModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


def step_figures(step: Any) -> dict[str, float]:
    """A probe step's figures by flat name (ttft_p95_ms, server_queue_mean_ms, ...), the names the SLOs, the
    grid's views and MLflow use: of a step as the probe measures it (probe/latency.py StepSummary, its
    percentiles as dicts) or as the record holds it (ProbeStep, GridCell)."""
    out = {"request_throughput": step.request_throughput, "output_throughput": step.output_throughput,
           "errors": float(step.errors), "client_cpu_share": step.client_cpu_share}
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        pct = getattr(step, name)
        for stat, v in (pct if isinstance(pct, Mapping) else pct.model_dump()).items():
            out[f"{name.removesuffix('_ms')}_{stat}_ms"] = v
    out.update({f"server_{k}": v for k, v in step.server.items()})
    if step.goodput is not None:
        out["goodput"] = step.goodput
    return out


def metric_segment(label: str) -> str:
    """A grid row's label as a metric name or a folder allows it (no '=' nor ','): "mns=8,mnbt=512" ->
    "mns_8.mnbt_512"."""
    return label.replace("=", "_").replace(",", ".")


class Percentiles(RecordModel):
    """A latency's mean and percentiles in ms (probe/analysis.py Dist.as_dict)."""

    mean: Figure
    p50: Figure
    p90: Figure
    p95: Figure
    p99: Figure


class ProbeStep(RecordModel):
    """One load step of the latency probe (probe/latency.py StepSummary)."""

    kind: Literal["concurrency", "rate"]
    load: Num
    requests: int
    errors: int
    wall_s: float
    request_throughput: float
    output_throughput: float
    client_cpu_share: float
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    server: dict[str, Figure] = {}  # the engine's /metrics over the step; records before it have none
    server_note: str = ""
    goodput: float | None = None


class ProbeWarmup(RecordModel):
    """What ran before the probe's figures (probe/latency.py Warmup)."""

    requests: int
    seconds: float
    concurrency: int | None = None
    rounds_tok_s: list[float] = []
    steady: bool | None = None


class Probe(RecordModel):
    """The latency sweep (probe/latency.py ProbeResult.to_json)."""

    steps: list[ProbeStep]
    saturation_concurrency: Num | None
    max_concurrency_within_slo: Num | None
    warmup: ProbeWarmup | None = None  # probes stored before it have none


class CellMemory(RecordModel):
    """The engine's memory right after a grid cell (engines/base.py EngineMemory)."""

    rss_bytes: int | None = None
    gpu_bytes: int | None = None
    kv_cache_bytes: int | None = None
    kv_cache_tokens: int | None = None
    model_bytes: int | None = None


class GridCell(RecordModel):
    """One grid cell (probe/grid.py cell): a probe step on one engine setting, and the engine's memory."""

    row: str
    setting: dict[str, Num]
    concurrency: int
    requests: int
    errors: int
    wall_s: float
    request_throughput: float
    output_throughput: float
    client_cpu_share: float
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    server: dict[str, Figure] = {}
    server_note: str = ""
    goodput: float | None = None
    memory: CellMemory

    def figures(self) -> dict[str, float]:
        """Its figures by flat name: the probe step's (step_figures) and the engine's memory (memory_rss_bytes,
        memory_kv_cache_bytes, ...)."""
        out = step_figures(self)
        out["requests"] = float(self.requests)
        out.update({f"memory_{k}": float(v) for k, v in self.memory.model_dump().items() if v is not None})
        return out

    def meets_slo(self, slo: dict[str, float]) -> bool:
        """Every SLO holds, and no request failed (a figure that is missing or NaN does not hold)."""
        if self.errors or not self.requests:
            return False
        f = self.figures()
        return all(f.get(k, math.inf) <= limit for k, limit in slo.items())


class RowServed(RecordModel):
    """How a grid row was served: on the evaluation's server, or on its own (started in so many seconds)."""

    on_server: bool | None
    startup_seconds: float | None


class BestCell(RecordModel):
    row: str
    concurrency: int
    output_throughput: float


class Grid(RecordModel):
    """Batch size x concurrency (probe/grid.py assemble)."""

    settings: list[str]
    rows: list[str]
    concurrency: list[int]
    slo: dict[str, float]
    served: dict[str, RowServed]
    errors: dict[str, str]  # row label -> why it has no cells
    cells: list[GridCell]
    best: BestCell | None  # the most output tokens/s under the SLOs

    def is_best(self, row: str, concurrency: int) -> bool:
        return self.best is not None and (row, concurrency) == (self.best.row, self.best.concurrency)

    def matrix(self, key: str = "output_throughput") -> list[list[float]]:
        """One figure over rows x concurrencies (NaN where a cell is missing), for the heat map."""
        at = {(c.row, c.concurrency): c.figures().get(key, math.nan) for c in self.cells}
        return [[at.get((r, k), math.nan) for k in self.concurrency] for r in self.rows]

    def table(self) -> list[dict[str, Any]]:
        """One flat row per cell (for a Parquet table): the setting, the concurrency, every figure, and
        whether the cell meets the SLOs and is the best one."""
        return [{"row": c.row, **c.setting, "concurrency": c.concurrency, **c.figures(),
                 "meets_slo": c.meets_slo(self.slo), "best": self.is_best(c.row, c.concurrency)}
                for c in self.cells]


class Distribution(RecordModel):
    """A variant's next-token distributions against the baseline's on one logprobs suite
    (stats/distribution.py DistSummary, and what pipeline/judge.py adds). A TGI side has no top-1 figures."""

    tokens: int
    kl_mean: Figure
    kl_median: Figure
    kl_p95: Figure
    kl_p99: Figure
    top1_agreement: Figure
    delta_p_mean: Figure
    delta_p_median: Figure
    delta_p_p01: Figure
    delta_p_p05: Figure
    delta_p_p95: Figure
    delta_p_p99: Figure
    perplexity: Figure
    mismatched_chunks: int
    chunks: int
    method: str


class BaselineDistribution(RecordModel):
    """The baseline's own figures on a logprobs suite: nothing to compare it with."""

    perplexity: Figure
    chunks: int


class Stratum(RecordModel):
    """One stratum of a suite's items. For a long-document logprobs suite (axis `depth`), a depth bucket: token
    positions [lo, hi) of every document that reaches them; `base` and `variant` the mean per-token NLL of each
    side there; `kl` and `top1` the variant's mean KL against the baseline and its top-1 agreement; `delta` the
    variant's NLL less the baseline's (positive: worse). For a needle suite (axis `length x depth`), a cell of
    the layout: prompts of `length` tokens with the needle at `depth` of the filler (`needle_at`: its mean first
    token), `items` of them; `base` and `variant` each side's accuracy, `delta` the variant's less the
    baseline's (negative: worse)."""

    lo: int = 0
    hi: int = 0
    documents: int = 0
    tokens: int = 0
    base: Figure
    variant: Figure
    delta: Figure
    kl: Figure = None
    top1: Figure | None = None  # None: a side lists no alternatives
    insufficient: str | None = None  # why its gate cannot judge it (too few documents or tokens)
    length: int | None = None
    depth: float | None = None
    items: int | None = None
    needle_at: int | None = None


class Strata(RecordModel):
    """A suite's figures per stratum: for a long-document logprobs suite, per depth bucket (axis `depth`); for a
    needle suite, per (length, depth) cell (axis `length x depth`)."""

    axis: str = "depth"
    cells: list[Stratum] = []

    def grid(self) -> tuple[list[int], list[float], dict[tuple[int, float], Stratum]]:
        """A needle suite's cells as a grid: its lengths (rows), its depths (columns), the cell at each."""
        at = {(c.length or 0, c.depth or 0.0): c for c in self.cells}
        return sorted({n for n, _ in at}), sorted({d for _, d in at}), at


class FlipRow(RecordModel):
    """One item whose result changed (or, for a logprobs suite, one of the chunks with the largest KL)."""

    item_id: str
    direction: Literal["lost", "gained", "kl"]  # lost: baseline right, variant wrong; gained: the reverse
    sample: int = 0
    base_score: float | None = None
    variant_score: float | None = None
    base_response: str | None = None  # cut to FLIP_TEXT characters in the record; whole in flips.parquet
    variant_response: str | None = None
    target: str | None = None
    kl: float | None = None
    top1: float | None = None


class SuiteFlips(RecordModel):
    """A (variant, suite)'s flipped items: counts both ways and the first few of each, for the report."""

    metric: str
    kind: Literal["items", "chunks"] = "items"
    n: int  # paired items (or chunks)
    lost: int = 0
    gained: int = 0
    rows: list[FlipRow] = []


class FloorFigure(RecordModel):
    """One (suite, metric) of the A/A: how much the baseline disagrees with itself, in the unit variants are read in."""

    suite: str
    metric: str
    figure: str  # "flip rate" (0/1 metrics), "mean KL", "top-1 disagreement"
    value: float
    n: int


class FloorNote(RecordModel):
    """A variant whose disagreement with the baseline is within the floor on one (suite, metric)."""

    variant: str
    suite: str
    metric: str
    figure: str
    value: float
    floor: float


class ImportedFile(RecordModel):
    path: str
    sha256: str
    lines: int


class ImportedTaskFacts(RecordModel):
    """One task of an imported variant: the hash of what makes it comparable (its identity), what differs from the
    baseline's without refusing the comparison (the evaluator's version, its limit, data paths), and the items of
    either side that did not pair, the first few named with the reason."""

    identity_hash: str
    advisory: dict[str, list[Any]] = {}  # key -> [the baseline's value, this variant's]
    unpaired: dict[str, list[str]] = {}  # "baseline" / "variant" -> the first item ids only that side has
    unpaired_reason: str | None = None
    # items the evaluator ran but gave no score (an errored sample): "baseline" / "variant" -> item id -> why
    dropped: dict[str, dict[str, str]] = {}


class ImportedSource(RecordModel):
    """Where an imported variant's records came from (`method: results`): not served by qeval, so no engine,
    checkpoint, memory or time figures."""

    format: str
    evaluator: str
    version: str | None = None
    model: str | None = None  # the model as the results name it
    files: list[ImportedFile] = []
    tasks: dict[str, ImportedTaskFacts] = {}  # by suite
    # the baseline's tasks these results lack: suite -> why (their gates are NOT_EVALUATED for this variant)
    missing: dict[str, str] = {}
