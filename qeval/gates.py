"""Gate policy -> verdicts. Pure: comparisons in, gate results out."""

from __future__ import annotations

from fnmatch import fnmatchcase

from .config import GatePolicy, GateRule
from .record import Comparison, GateResult, GateVerdict


def rule_for(policy: GatePolicy, suite: str, metric: str) -> GateRule | None:
    """The last rule whose glob matches "suite/metric" wins, so specific rules follow general ones."""
    hits = [r for r in policy.rules if fnmatchcase(f"{suite}/{metric}", r.match)]
    return hits[-1] if hits else None


def evaluate(policy: GatePolicy, comparisons: list[Comparison]) -> list[GateResult]:
    results = []
    for c in comparisons:
        if not c.primary:
            continue
        rule = rule_for(policy, c.suite, c.metric)
        if rule is None:
            continue
        margin = rule.margin * abs(c.base_mean) if rule.relative else rule.margin
        ok = c.ci_low > -margin
        verdict: GateVerdict = "PASS" if ok else ("FAIL" if rule.action == "fail" else "WARN")
        results.append(GateResult(
            variant=c.variant, suite=c.suite, metric=c.metric, rule=rule.match, margin=margin,
            margin_spec=f"{rule.margin:.0%} of baseline" if rule.relative else f"{rule.margin:g}",
            alpha=rule.alpha, lower_bound=c.ci_low, delta=c.delta, action=rule.action, verdict=verdict))
    return results


def variant_verdict(gates: list[GateResult], evaluated: bool) -> GateVerdict:
    if not evaluated:
        return "NOT_EVALUATED"
    if any(g.verdict == "FAIL" for g in gates):
        return "FAIL"
    if not gates:
        return "INCONCLUSIVE"  # nothing was gated: no evidence either way
    return "PASS"


def overall_verdict(per_variant: dict[str, GateVerdict]) -> GateVerdict:
    vs = set(per_variant.values())
    for v in ("NOT_EVALUATED", "FAIL", "INCONCLUSIVE"):
        if v in vs:
            return v
    return "PASS"
