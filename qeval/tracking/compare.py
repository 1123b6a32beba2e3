"""A variant's comparisons with the baseline in MLflow's own comparison vocabulary, beside qeval's keys.

MLflow's paired comparison of two evaluation runs (`mlflow.genai.compare_evaluations`) logs on the candidate's
run `compare/<first 8 characters of the baseline's run id>/<scorer>/<stat>` for the stats `diff, ci_low,
ci_high, p_value, effect_size, n_paired`, and the whole comparison as the artifact `compare/<id8>.json`. qeval
logs its comparisons under the same keys, a scorer being `<suite>/<metric>`, so that a team reading
`compare/...` in the MLflow UI sees qeval's beside its own, with qeval's own fields (the gate's margin and
lower bound, the MDE, the confidence, whether the gate passed) next to them.

One key, one meaning as far as MLflow's words allow: `diff` is variant - baseline, `p_value` the two-sided test
before any correction, `effect_size` Cohen's d_z. `ci_low`/`ci_high` are the interval qeval's gate reads: two-sided
at `confidence` (1 - 2 alpha of the metric's rule), each end a one-sided (1 - alpha) bound, by the comparison's
interval method; not the 95% percentile bootstrap MLflow computes. The artifact says so.

Pure: a record and run ids in, figures and a JSON-ready dict out (tracking/mlflow.py names and logs them).
"""

from __future__ import annotations

import math
from typing import Any

from ..record.run import Comparison, GateResult, RunRecord, VariantResult

# MLflow's: the stats compare_evaluations logs per scorer, and how much of the baseline's run id names it
MLFLOW_STATS = ("diff", "ci_low", "ci_high", "p_value", "effect_size", "n_paired")
SHORT_ID = 8
# qeval's, logged under the same prefix
QEVAL_STATS = ("margin", "lower_bound", "mde", "confidence", "gate_pass")

INTERVAL = ("ci_low and ci_high are the interval qeval's gate reads: two-sided at `confidence` (1 - 2 alpha of the "
            "metric's rule), so each end is a one-sided (1 - alpha) bound, computed by `interval_method`; not a 95% "
            "percentile bootstrap. diff, ci_low and ci_high are variant - baseline in the metric's units; lower_bound "
            "is the gate's, oriented so that positive is better. p_value is before any correction; p_adjusted is "
            "after `correction`, over every comparison of the run.")


def shown_verdict(record: RunRecord, v: VariantResult) -> str:
    """The variant's verdict as MLflow shows it (its `qeval.verdict` tag): its gates', else its role's."""
    return record.verdicts.get(v.name, "BASELINE" if v.role == "baseline" else
                               "NOISE_FLOOR" if v.role == "noise" else "NOT_EVALUATED")


def compare_prefix(baseline_run_id: str) -> str:
    """`compare/<id8>`: where a comparison with the baseline's run is logged (metric keys and artifact)."""
    return f"compare/{baseline_run_id[:SHORT_ID]}"


def comparisons_of(record: RunRecord, name: str) -> list[Comparison]:
    """The variant's comparisons with the baseline: a quantized variant's, or the noise floor's A/A (never gated)."""
    aa = record.noise_floor.comparisons if record.noise_floor is not None else []
    return [c for c in [*record.comparisons, *aa] if c.variant == name]


def _gate(record: RunRecord, c: Comparison) -> GateResult | None:
    return next((g for g in record.gates if (g.variant, g.suite, g.metric) == (c.variant, c.suite, c.metric)), None)


def _finite(value: Any) -> bool:
    return value is not None and math.isfinite(value)


def stats(c: Comparison, gate: GateResult | None) -> dict[str, float]:
    """The figures logged per comparison, MLflow's stats then qeval's, those that are set and finite."""
    out = {"diff": c.delta, "ci_low": c.ci_low, "ci_high": c.ci_high, "p_value": c.p_value,
           "effect_size": c.effect_size, "n_paired": c.n_paired, "mde": c.mde, "confidence": c.confidence}
    if gate is not None:
        out |= {"margin": gate.margin, "lower_bound": gate.lower_bound,
                "gate_pass": 1.0 if gate.verdict == "PASS" else 0.0}
    return {k: float(out[k]) for k in (*MLFLOW_STATS, *QEVAL_STATS) if _finite(out.get(k))}


def compared(record: RunRecord, name: str) -> list[tuple[Comparison, dict[str, float]]]:
    """Each of the variant's comparisons and its figures, to be logged as `compare/<id8>/<suite>/<metric>/<stat>`."""
    return [(c, stats(c, _gate(record, c))) for c in comparisons_of(record, name)]


def _plain(value: Any) -> Any:
    """NaN and infinity as null, as MLflow writes its artifact (JSON has no NaN)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _scorer(c: Comparison, gate: GateResult | None) -> dict[str, Any]:
    ties = (c.n_paired - c.flips_base_only - c.flips_variant_only
            if c.flips_base_only is not None and c.flips_variant_only is not None else None)
    out = {
        # MLflow's ScorerComparison fields, where qeval has them
        "scorer": f"{c.suite}/{c.metric}", "status": "ok", "n_paired": c.n_paired,
        "greater_is_better": c.higher_is_better, "value_type": "binary" if c.binary else "numeric",
        "method": c.p_method, "baseline_mean": c.base_mean, "candidate_mean": c.variant_mean, "diff": c.delta,
        "ci_low": c.ci_low, "ci_high": c.ci_high, "p_value": c.p_value, "effect_size": c.effect_size, "ties": ties,
        # qeval's
        "suite": c.suite, "metric": c.metric, "primary": c.primary, "confidence": c.confidence,
        "interval_method": c.interval_method, "t_ci_low": c.t_ci_low, "t_ci_high": c.t_ci_high,
        "n_groups": c.n_groups, "unpaired_baseline": c.unpaired_base, "unpaired_candidate": c.unpaired_variant,
        "p_adjusted": c.p_adjusted, "p_permutation": c.p_permutation, "flips_base_only": c.flips_base_only,
        "flips_variant_only": c.flips_variant_only, "mde": c.mde, "mde_observed": c.mde_observed,
        "power_method": c.power_method,
        "verdict": gate.verdict if gate is not None else "NOT_GATED",
        "gate": None if gate is None else gate.model_dump(
            include={"rule", "mode", "margin", "margin_spec", "alpha", "beta", "lower_bound", "upper_bound",
                     "p_exact", "sequential", "items_used", "items_planned", "action", "reason"}),
    }
    return {k: (_plain(v) if not isinstance(v, dict) else {k2: _plain(v2) for k2, v2 in v.items()})
            for k, v in out.items()}


def compare_artifact(record: RunRecord, name: str, baseline_run_id: str, candidate_run_id: str,
                     items: str | None = None) -> dict[str, Any]:
    """The variant's comparisons as `compare/<id8>.json`, in the shape of MLflow's ComparisonResult (run ids,
    then `scorers` keyed by scorer) with qeval's verdict, margin, interval method and correction. `items`: the
    artifact path of the variant's per-item table (MLflow's artifact carries the paired rows themselves)."""
    v = next(x for x in record.variants if x.name == name)
    baseline = next((x.name for x in record.variants if x.role == "baseline"), "")
    return {"baseline_run_id": baseline_run_id, "candidate_run_id": candidate_run_id,
            "baseline": baseline, "candidate": name, "qeval_run_id": record.run_id, "verdict": shown_verdict(record, v),
            "correction": record.multiplicity, "interval": INTERVAL,
            "scorers": {f"{c.suite}/{c.metric}": _scorer(c, _gate(record, c)) for c in comparisons_of(record, name)},
            "items": items}
