"""The versioned run record: the source of truth; MLflow and the reports are views of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 1

Status = Literal["ok", "error", "skipped"]
GateVerdict = Literal["PASS", "FAIL", "WARN", "INCONCLUSIVE", "NOT_EVALUATED"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SuiteSummary(_Model):
    suite: str  # "custom/<name>" or "lm_eval/<task>"
    key: str
    n: int
    primary: str
    means: dict[str, float]


class VariantResult(_Model):
    name: str
    method: str
    role: Literal["baseline", "variant"]
    key: str = ""
    checkpoint: str | None = None
    checkpoint_hash: str | None = None
    weights_bytes: int | None = None
    recipe: dict[str, Any] = {}
    quantize_seconds: float | None = None
    engine: str = ""
    engine_version: str = ""
    startup_seconds: float | None = None
    engine_rss_bytes: int | None = None
    eval_seconds: float | None = None
    status: Status = "ok"
    error: str | None = None
    suites: list[SuiteSummary] = []


class Comparison(_Model):
    variant: str
    suite: str
    metric: str
    primary: bool
    n_paired: int
    unpaired_base: int
    unpaired_variant: int
    base_mean: float
    variant_mean: float
    delta: float
    ci_low: float  # paired bootstrap, two-sided (1 - 2 alpha): its lower end is the one-sided bound
    ci_high: float
    t_ci_low: float
    t_ci_high: float
    confidence: float
    binary: bool
    flips_base_only: int | None = None
    flips_variant_only: int | None = None
    flip_rate: float | None = None
    p_value: float | None = None  # McNemar exact (binary) or Wilcoxon signed-rank (continuous)
    p_method: str | None = None
    p_adjusted: float | None = None  # Holm across every comparison of the campaign


class GateResult(_Model):
    variant: str
    suite: str
    metric: str
    rule: str
    margin: float  # absolute, in the metric's units
    margin_spec: str  # as written: "0.05" or "5% of baseline"
    alpha: float
    lower_bound: float
    delta: float
    action: Literal["fail", "warn"]
    verdict: GateVerdict


class RunRecord(_Model):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    campaign: str
    config_hash: str
    config: dict[str, Any]
    config_file: str
    command: list[str]
    started_at: str
    finished_at: str | None = None
    environment: dict[str, str] = {}
    variants: list[VariantResult] = []
    comparisons: list[Comparison] = []
    gates: list[GateResult] = []
    verdicts: dict[str, GateVerdict] = {}  # per variant
    verdict: GateVerdict = "NOT_EVALUATED"
    multiplicity: str = "holm"
    tracking: dict[str, str] = {}

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.model_dump_json(indent=1))
        tmp.replace(path)  # atomic: a crash never leaves half a record

    @classmethod
    def load(cls, path: Path) -> "RunRecord":
        return cls.model_validate_json(path.read_text())
