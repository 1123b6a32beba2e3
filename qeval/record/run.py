"""The versioned run record: the source of truth; MLflow and the reports are views of it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from collections.abc import Collection
from typing import Annotated, Any, Literal

from pydantic import ConfigDict

from ..errors import ConfigError
from .measurements import (BaselineDistribution, Distribution, Strata, FloorFigure, FloorNote, Grid, ImportedSource, Probe,
                           SuiteFlips)
from .measurements import RecordModel as _Model

# 2: gate modes, power (MDE), interval method, correction; 3: reused (the shared store), and the probe, grid
# and distributions as typed models (record/measurements.py) whose JSON is what the dicts before them wrote
SCHEMA_VERSION = 3

# what a variant may change against the baseline (pipeline/changes.py reads which): the weights (method, recipe,
# checkpoint), the KV cache (its dtype, or a checkpoint's kv_cache_scheme), how it is served (an engine setting)
Change = Literal["weights", "kv_cache", "serving"]
CHANGES: tuple[Change, ...] = ("weights", "kv_cache", "serving")


def changes_text(changes: Collection[str], serving_diff: Collection[str]) -> str:
    """What a variant changes, in words: "differs in: weights; kv_cache_dtype auto -> fp8"."""
    said = (["weights"] if "weights" in changes else []) + list(serving_diff)
    if "kv_cache" in changes and not any(d.startswith("kv_cache_dtype ") for d in serving_diff):
        said.append("KV cache (its checkpoint's kv_cache_scheme)")
    return "differs in: " + "; ".join(said) if said else "differs in nothing qeval sees"

# partial: cut while being evaluated; the suites it finished are compared, its verdict is NOT_EVALUATED
Status = Literal["ok", "error", "skipped", "partial"]
# NOT_RUN: a gate whose suite was skipped because the variant had already failed (stop_variant_on_fail);
# NOT_EVALUATED, of a gate: it had nothing to judge (its reason says why), so its variant cannot pass
GateVerdict = Literal["PASS", "FAIL", "WARN", "INCONCLUSIVE", "NOT_EVALUATED", "NOT_RUN"]
# what a gate's data showed, beside its verdict (qeval/verdict/findings.py has the words): an interval's
# finding (qeval/stats/decisions.py, and a sequential gate's futile and undecided), then the gate's own:
# exact_test_not_confirmed (the interval passed, the exact test did not), undirected (no direction declared),
# missing (a required metric the campaign lacks), not_run (the suite was skipped), not_evaluated (nothing to judge:
# a task the variant's imported results lack, a performance rule over imported results), and a performance rule's
# ratio_met, ratio_missed, not_measured, simulated (the dense model's figures, not the scheme's)
GateFinding = Literal["shown_within", "shown_worse", "shown_better", "not_shown_within", "shown_not_better",
                      "not_shown_better", "underpowered", "underpowered_within", "futile", "undecided",
                      "exact_test_not_confirmed", "refused_heavy_tail", "undirected", "missing", "not_run", "not_evaluated",
                      "ratio_met", "ratio_missed", "not_measured", "simulated", "insufficient_data"]


# a KV-cache or serving variant's answer to "may it be turned on?" (qeval/verdict/decision.py has the order they
# are looked for in): every gate passes; a quality gate shows it worse than the margin; one does not show it within
# (or no quality gate judged it); every quality gate passes but a performance gate does not; not evaluated
DecisionOutcome = Literal["turn_on", "shown_worse", "not_shown_safe", "gain_not_shown", "not_evaluated"]


class SettingDecision(_Model):
    """The decision line of a variant that changes the KV cache or a serving setting, and its outcome."""

    outcome: DecisionOutcome
    text: str  # "kv-fp8 (changes: kv_cache_dtype auto -> fp8): may be turned on — every quality gate passes ..."


class SuiteSummary(_Model):
    suite: str  # "custom/<name>" or "lm_eval/<task>"
    key: str
    n: int
    primary: str
    means: dict[str, float]
    planned: int | None = None  # the suite's items, where sequential gates stopped it before them all


class Served:
    """Marks a measured fact taken while the variant was made or served: a rerun that serves it no more (the
    store holds every suite) keeps the earlier record's (Measured.served)."""


SERVED = Served()


class Measured(_Model):
    """What one variant's run measured: the checkpoint, what made it, how it was served and what that took.
    The run's outcome carries it (executors/outcome.py VariantOutcome) and VariantResult is built from it,
    so a fact is declared here once. Frozen: an outcome travels from a worker to the driver as it was found."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = ""
    checkpoint: str | None = None
    checkpoint_hash: str | None = None
    weights_bytes: int | None = None
    recipe: dict[str, Any] = {}
    # the checkpoint's own quantization_config, read (qeval/quantize/describe.py): format, scheme, bits, group size
    scheme: dict[str, str] = {}
    quantize_seconds: Annotated[float | None, SERVED] = None  # None: the checkpoint was there already
    dtype: str | None = None  # what it was quantized and served in (None: an external endpoint's own)
    dtype_reason: str | None = None  # why: set by the campaign, or what `auto` found on this machine
    kv_cache_dtype: str | None = None  # the KV cache's type where the engine was told one (None: the model's dtype)
    # why it was served on its dequantized weights (recipe.simulate): its memory and speed are not its scheme's
    simulated: str | None = None
    engine: Annotated[str, SERVED] = ""
    engine_version: Annotated[str, SERVED] = ""
    startup_seconds: Annotated[float | None, SERVED] = None
    restarts: Annotated[int, SERVED] = 0  # engine restarts after a fault mid-suite
    engine_rss_bytes: Annotated[int | None, SERVED] = None
    engine_gpu_bytes: Annotated[int | None, SERVED] = None  # the engine's processes on the GPU, through NVML
    # the GPUs it was served on (tensor_parallel_size): the memory figures are totals over them
    gpus: Annotated[int | None, SERVED] = None
    model_memory_bytes: Annotated[int | None, SERVED] = None  # the weights as loaded on the device (the engine's log)
    kv_cache_bytes: Annotated[int | None, SERVED] = None  # as the engine reports it
    kv_cache_tokens: Annotated[int | None, SERVED] = None
    eval_seconds: Annotated[float | None, SERVED] = None
    # its engine up with nothing running on it (waiting for a lease, or for the baseline's records its gates pair
    # with): what a packed campaign's schedule left unused
    idle_seconds: Annotated[float | None, SERVED] = None
    # its stages waiting for their leases: its start, its suites and its probe (another variant's probe, or the
    # quality work a probe waits for)
    lease_wait_seconds: Annotated[float | None, SERVED] = None
    # per suite, the requests in flight it was evaluated with (a suite set to `auto`: sized from the engine)
    concurrency: Annotated[dict[str, int], SERVED] = {}
    max_num_seqs: Annotated[int | None, SERVED] = None  # what the engine schedules at once (as set, or its default)
    reused: dict[str, int] = {}  # per suite, records another campaign stored under the same keys: not served again
    not_run: dict[str, str] = {}  # per suite skipped because a gate had already failed the variant: why

    @classmethod
    def served(cls) -> tuple[str, ...]:
        """The facts measured while making or serving it (marked SERVED)."""
        return tuple(n for n, f in cls.model_fields.items() if SERVED in f.metadata)


class Named(_Model):
    """The variant as the campaign names it."""

    name: str
    method: str
    role: Literal["baseline", "variant", "noise"]  # noise: the baseline evaluated again (qeval/verdict/noise.py)


# the fields in the record's order: Named's, Measured's, then its own (pydantic lays out a model's fields from
# its last base to itself)
class VariantResult(Measured, Named):
    """A variant in the run record: its name, what its run measured, and what the campaign read of it
    afterwards (its suites' summaries, the judge's distributions and flips, the probe and the grid)."""

    model_config = ConfigDict(extra="forbid", frozen=False)

    status: Status = "ok"
    error: str | None = None
    suites: list[SuiteSummary] = []
    distribution: dict[str, Distribution | BaselineDistribution] = {}  # per logprobs suite: perplexity, KL, top-1
    flips: dict[str, SuiteFlips] = {}  # per suite: the items whose 0/1 result changed (qeval/verdict/flips.py)
    probe: Probe | None = None  # latency sweep: steps, saturation, the largest load within SLOs
    probe_requests: str | None = None  # the per-request table (Parquet)
    grid: Grid | None = None  # batch size x concurrency: rows, concurrencies, cells, the best cell under the SLOs
    # what it changes against the baseline (pipeline/changes.py): weights, kv_cache, serving
    changes: list[Change] = []
    serving_diff: list[str] = []  # each engine setting it is served with otherwise: "kv_cache_dtype auto -> fp8"
    # the performance rules that do not gate it, by what it changes (PerfRule.applies_to): rule -> why
    perf_not_applicable: dict[str, str] = {}
    imported: ImportedSource | None = None  # method `results`: the files another evaluator wrote, read not served
    strata: dict[str, Strata] = {}  # per suite that has them: its figures per stratum (a long corpus: per depth)
    # a variant that changes the KV cache or a serving setting: may it be turned on (None: any other variant, or a
    # record written before decisions)
    decision: SettingDecision | None = None

    @classmethod
    def of(cls, measured: Measured, **rest: Any) -> "VariantResult":
        """The variant's entry from what its run measured, and the rest (its name, method, role, status...)."""
        return cls(**dict(measured), **rest)

    def shown_recipe(self) -> dict[str, Any]:
        """The recipe as a report or MLflow shows it: a recipe file by its name and content hash (its text is in
        the record)."""
        def shown(value: Any) -> Any:
            if isinstance(value, dict) and "text" in value:
                return f"{value.get('name', 'recipe')} (sha256 {hashlib.sha256(value['text'].encode()).hexdigest()[:16]})"
            return value

        return {k: shown(v) for k, v in self.recipe.items()}

    def perf(self) -> dict[str, float]:
        """Performance figures a gate or a chart can compare across variants."""
        out: dict[str, float] = {}
        if self.weights_bytes:
            out["weights_bytes"] = float(self.weights_bytes)
        if self.engine_rss_bytes:
            out["engine_rss_bytes"] = float(self.engine_rss_bytes)
        if self.engine_gpu_bytes:
            out["engine_gpu_bytes"] = float(self.engine_gpu_bytes)
        if self.model_memory_bytes:
            out["model_memory_bytes"] = float(self.model_memory_bytes)
        if self.kv_cache_tokens:
            out["kv_cache_tokens"] = float(self.kv_cache_tokens)
        steps = [s for s in (self.probe.steps if self.probe else []) if s.kind == "concurrency"]
        if steps:
            out["max_output_throughput"] = max(s.output_throughput for s in steps)
            one = min(steps, key=lambda s: s.load)
            # a step whose every request failed timed nothing (NaN, null once saved): no figure, not a zero
            out |= {k: x for k, x in (("ttft_p50_ms_c1", one.ttft_ms.p50), ("tpot_p50_ms_c1", one.tpot_ms.p50))
                    if x is not None and x == x}
            slo = self.probe.max_concurrency_within_slo
            if slo is not None:
                at = next(s for s in steps if s.load == slo)
                out["output_throughput_at_slo"] = at.output_throughput
        return out


class Comparison(_Model):
    """Everything the paired statistics say about one (variant, suite, metric)."""

    variant: str
    suite: str
    metric: str
    primary: bool
    n_paired: int
    unpaired_base: int
    unpaired_variant: int
    base_mean: float
    variant_mean: float
    delta: float  # variant - baseline, in the metric's units
    ci_low: float  # the interval the gate reads: two-sided (1 - 2 alpha), so each end is a one-sided bound
    ci_high: float
    interval_method: str
    confidence: float
    t_ci_low: float
    t_ci_high: float
    n_groups: int | None = None  # items carried a `group`: the interval is cluster-robust
    binary: bool  # declared by the metric's definition (qeval/record/metrics.py), not read off the scores
    higher_is_better: bool | None = None  # likewise; None where nothing declared it (a rule's direction must)
    flips_base_only: int | None = None
    flips_variant_only: int | None = None
    flip_rate: float | None = None
    flip_rate_ci: tuple[float, float] | None = None
    p_value: float | None = None  # McNemar exact (binary) or Wilcoxon signed-rank (continuous), two-sided
    p_method: str | None = None
    p_permutation: float | None = None  # paired sign-flip permutation (continuous)
    p_adjusted: float | None = None  # corrected across every comparison of the campaign
    mde: float | None = None  # smallest drop this suite detects at the rule's alpha and beta (design)
    power_method: str | None = None
    mde_observed: float | None = None  # the same from this run's paired variance (after the run)
    # Cohen's d_z: the mean of the per-item differences (variant - baseline) over their sd; None where they do
    # not vary or fewer than two items pair (MLflow's `effect_size`)
    effect_size: float | None = None
    skew: float | None = None  # continuous, interval auto: the sample skew of the differences, positive better
    # interval auto: why no interval keeps alpha on these differences (a heavy tail); the gate cannot PASS
    interval_refused: str | None = None
    # why its data are too few to judge (a depth bucket few documents reach): its gate is INCONCLUSIVE
    insufficient: str | None = None


class NoiseFloor(_Model):
    """The A/A evaluation of the baseline (qeval/verdict/noise.py): its name, batch shape and figures."""

    variant: str  # the A/A evaluation's name in the record's variants
    concurrency: int  # its requests in flight
    baseline_concurrency: dict[str, int] = {}  # each suite's, for the first evaluation
    figures: list[FloorFigure] = []
    within: list[FloorNote] = []
    comparisons: list[Comparison] = []  # the A/A against the baseline: reported, never gated


class GateResult(_Model):
    variant: str
    suite: str
    metric: str
    rule: str
    mode: str
    margin: float  # absolute, in the metric's units
    margin_spec: str  # as written: "0.05" or "5% of baseline"
    alpha: float
    beta: float
    base_mean: float | None = None
    variant_mean: float | None = None
    delta: float | None = None  # oriented so that positive is better
    lower_bound: float | None = None
    upper_bound: float | None = None
    mde: float | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    p_exact: float | None = None  # 0/1 metrics: the exact unconditional test a PASS must also clear
    method: str | None = None  # fixed n: the interval whose bounds the gate read (its comparison's interval_method)
    sequential: str | None = None  # the method of a gate that looked while its suite ran (None: fixed n)
    items_used: int | None = None  # sequential: the items its decision read (the rest were not evaluated)
    items_planned: int | None = None
    action: Literal["fail", "warn"]
    verdict: GateVerdict
    reason: str = ""
    # what the data showed, beside the verdict: a FAIL is shown_worse (worse than the margin) or not_shown_within
    # (not shown within it), and so on (the statistics guide's table); None in a record written before findings
    finding: GateFinding | None = None


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
    inconclusive: str = "fail"
    noise_floor: NoiseFloor | None = None  # the baseline against itself (noise_floor: true)
    tracking: dict[str, str] = {}

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.model_dump_json(indent=1))
        tmp.replace(path)  # atomic: a crash never leaves half a record

    @classmethod
    def load(cls, path: Path) -> "RunRecord":
        try:
            return cls.model_validate_json(path.read_text())
        except (OSError, ValueError) as e:  # pydantic's ValidationError is a ValueError
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ConfigError(f"not a qeval run record of schema {SCHEMA_VERSION}: {first}", file=str(path)) from None


def prior_facts(data: dict[str, Any]) -> dict[str, Measured]:
    """Per variant key, the facts an earlier record (as read from JSON) measured while serving the variants it
    finished (Measured.served), those it has set only. Keyed by variant key, which names the checkpoint and
    the engine settings."""
    return {v["key"]: Measured.model_validate({f: v[f] for f in Measured.served() if v.get(f) not in (None, "", {})})
            for v in data.get("variants", []) if v.get("status") == "ok" and v.get("key")}


def prior_run(path: Path) -> dict[str, Any] | None:
    """What a resume needs of an earlier record (id, start, finish, config hash, and the engine facts per
    variant key: `facts`), read leniently: a record of an older schema, or a torn one, means no resume."""
    try:
        data = json.loads(path.read_text())
        return {**{k: data[k] for k in ("run_id", "started_at", "finished_at", "config_hash")},
                "facts": prior_facts(data)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
