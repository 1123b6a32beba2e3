"""A gate policy: which metrics gate a variant, what "no worse" means for each, how sure to be, and the
performance ratios it must meet. Inline in a campaign file or a file of its own (load_policy)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ..record.run import CHANGES, Change
from ..validation import Strict


class SequentialSpec(Strict):
    """Look at a gate while its suite runs and stop once the verdict is settled (qeval/stats/sequential.py;
    the looks: qeval/verdict/sequential.py)."""

    method: Literal["gsd", "betting"] = "gsd"  # group-sequential (O'Brien-Fleming spending), or a betting CS
    look_every: int = Field(50, ge=1)  # items between looks
    min_items: int = Field(100, ge=20)  # the first look: the normal approximation of gsd needs items
    futility: float | None = Field(None, ge=0, lt=0.5)  # gsd: the power an early FAIL may spend (default 0.05)

    @model_validator(mode="after")
    def _futility_is_gsds(self) -> "SequentialSpec":
        if self.futility is not None and self.method != "gsd":
            raise ValueError(f"futility is a setting of method gsd, not {self.method}")
        return self

    @property
    def futility_spend(self) -> float:
        """The power gsd's early FAIL may spend: 0.05 unless given (benchmarks/sequential_gates.py)."""
        return 0.0 if self.method != "gsd" else (0.05 if self.futility is None else self.futility)


class GateRule(Strict):
    """One line of a gate policy: which metrics, what "no worse" means for them, and how sure to be."""

    match: str = "*"  # glob over "suite/metric", e.g. "lm_eval/*/acc" or "custom/capitals/contains"
    mode: Literal["noninferiority", "equivalence", "superiority"] = "noninferiority"
    direction: Literal["higher", "lower"] | None = None  # is a higher score better? default: as the metric declares
    margin: float = Field(0.05, ge=0)
    relative: bool = False  # margin as a fraction of the baseline's score
    alpha: float = Field(0.05, gt=0, lt=0.5)
    beta: float = Field(0.2, gt=0, lt=1)  # 1 - the power the suite must have to detect the margin
    # The design's assumed spread of per-item differences, fixed before the run, so that power (and
    # INCONCLUSIVE) does not wobble with this run's noise: 0/1 metrics use the flip rate (var <= rate),
    # others planning_sd, or the observed sd when none is given.
    planning_flip_rate: float = Field(0.1, gt=0, le=1)
    planning_sd: float | None = Field(None, gt=0)
    # for items that carry a `group`: the assumed intra-group correlation of their differences, which
    # makes the planned power count groups, not items (without it the plan treats items as independent)
    planning_icc: float | None = Field(None, ge=0, le=1)
    action: Literal["fail", "warn"] = "fail"
    required: bool = False  # a named metric the campaign lacks fails the gate instead of being skipped
    sequential: SequentialSpec | None = None  # this rule's own; None: the policy's

    @field_validator("sequential")
    @classmethod
    def _noninferiority(cls, v: SequentialSpec | None, info: ValidationInfo) -> SequentialSpec | None:
        if v is not None and info.data.get("mode") != "noninferiority":
            raise ValueError(f"sequential gates are non-inferiority gates, not {info.data.get('mode')}")
        return v


PerfMetric = Literal["weights_bytes", "engine_rss_bytes", "engine_gpu_bytes", "model_memory_bytes", "kv_cache_tokens",
                     "max_output_throughput", "output_throughput_at_slo",
                     "ttft_p50_ms_c1", "tpot_p50_ms_c1"]


# `applies_to: auto`: the changes a figure answers for. The weights' size moves with the weights alone: an FP8 KV
# cache over the same weights is 1.00x of them, which says nothing of it; the KV cache's tokens move with the
# weights (the memory they leave) or the KV cache's type; speed and the engine's memory move with any change
AUTO_APPLIES: dict[str, tuple[Change, ...]] = {"weights_bytes": ("weights",), "model_memory_bytes": ("weights",),
                                               "kv_cache_tokens": ("weights", "kv_cache")}


class PerfRule(Strict):
    """A performance gate: the variant's figure over the baseline's, e.g. throughput >= 1.3x."""

    metric: PerfMetric
    min_ratio: float | None = Field(None, gt=0)
    max_ratio: float | None = Field(None, gt=0)
    action: Literal["fail", "warn"] = "fail"
    # which variants it gates, by what they change against the baseline: auto (by its metric: AUTO_APPLIES),
    # any, or a list; a variant that changes none of them is not gated by it (listed as not applicable)
    applies_to: Literal["auto", "any"] | list[Change] = "auto"

    @model_validator(mode="after")
    def _one_bound(self) -> "PerfRule":
        if (self.min_ratio is None) == (self.max_ratio is None):
            raise ValueError("give exactly one of `min_ratio` or `max_ratio`")
        if isinstance(self.applies_to, list) and not self.applies_to:
            raise ValueError("applies_to: name at least one of weights, kv_cache, serving (or any, or auto)")
        return self

    @property
    def scope(self) -> tuple[Change, ...]:
        """The changes this rule answers for, `auto` resolved by its metric."""
        if self.applies_to == "auto":
            return AUTO_APPLIES.get(self.metric, CHANGES)
        return CHANGES if self.applies_to == "any" else tuple(c for c in CHANGES if c in self.applies_to)

    def not_applicable(self, changes: Collection[str] | None) -> str | None:
        """Why this rule does not gate a variant that changes `changes` against the baseline, or None: it does.
        Unknown changes (None), or none that qeval sees, gate it as before: nothing rules it out."""
        if not changes or set(changes) & set(self.scope):
            return None
        how = "auto: by its metric" if self.applies_to == "auto" else "as written"
        return (f"answers for a change of {' or '.join(self.scope)} (applies_to {how}); the variant changes "
                f"{', '.join(c for c in CHANGES if c in changes)} only")

    @property
    def bound_text(self) -> str:
        """Its bound as written: ">= 1.3x", "<= 0.75x"."""
        return f">= {self.min_ratio:g}x" if self.min_ratio is not None else f"<= {self.max_ratio:g}x"

    @property
    def text(self) -> str:
        """The rule as its gate result names it: "weights_bytes <= 0.75x"."""
        return f"{self.metric} {self.bound_text}"


class Recommend(Strict):
    """How the report picks the variant to recommend among those that pass every gate."""

    # the least weights memory, the most output tok/s at the SLO, or the most KV cache tokens (variants that change
    # the KV cache over the same weights: their weights tie)
    by: Literal["weights_memory", "throughput_at_slo", "kv_capacity"] = "weights_memory"


class GatePolicy(Strict):
    rules: list[GateRule] = [GateRule()]
    performance: list[PerfRule] = []
    recommend: Recommend | None = None  # None: by weights memory
    # the bound a gate reads. auto: the cluster-robust t (CR2, Bell-McCaffrey df) when items carry groups,
    # Newcombe's score interval for 0/1 metrics; otherwise the paired t, or the bootstrap-t where the sample's
    # skew is past the t's reach, or no interval (INCONCLUSIVE) past the bootstrap-t's (qeval/stats/tails.py;
    # benchmarks/simulate_gates.py: the percentile bootstrap gave 5.7% false passes at a nominal 5% with n = 56)
    interval: Literal["auto", "bootstrap", "bca", "t", "bootstrap-t"] = "auto"
    correction: Literal["holm", "bh", "none"] = "holm"  # for the p-values across the campaign
    inconclusive: Literal["fail", "pass"] = "fail"  # what an underpowered gate does to the exit code
    bootstrap_resamples: int = Field(10000, ge=100)
    seed: int = 0
    sequential: SequentialSpec | None = None  # every rule's, unless a rule gives its own
    # once a gate of action fail FAILs a variant, skip its remaining suites (its verdict is FAIL whatever
    # they show: the overall PASS is an intersection-union test); they are reported NOT_RUN
    stop_variant_on_fail: bool = False

    @field_validator("sequential")
    @classmethod
    def _sequential_is_noninferiority(cls, v: SequentialSpec | None, info: ValidationInfo) -> SequentialSpec | None:
        rules = info.data.get("rules", [])
        other = [i for i, r in enumerate(rules) if r.sequential is None and r.mode != "noninferiority"]
        if v is not None and other:
            raise ValueError(f"sequential gates are non-inferiority gates, and rules {other} have another mode: "
                             "give `sequential` to the non-inferiority rules instead of the whole policy")
        return v

    @property
    def sequential_in_use(self) -> bool:
        return any(self.sequential_of(r) is not None for r in self.rules)

    @property
    def looks_while_running(self) -> bool:
        """Whether a variant's run must gate as it goes (sequential rules, or stopping on a failure)."""
        return self.stop_variant_on_fail or self.sequential_in_use

    def sequential_of(self, rule: GateRule) -> SequentialSpec | None:
        """The rule's sequential setting, else the policy's (None: a fixed-n gate)."""
        return rule.sequential if rule.sequential is not None else self.sequential
