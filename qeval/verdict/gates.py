"""Gate policy -> verdicts. Pure: comparisons in, gate results out.

The overall PASS needs every gate to pass: an intersection-union test, which keeps the false-pass
rate at each gate's alpha without a multiplicity correction (Berger, 1982). Corrections apply to
the p-values that look for differences, and the report says which one.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Mapping

from ..record.run import Comparison, GateResult, GateVerdict
from ..stats import decide
from ..stats.exact import noninferiority_exact
from .policy import GatePolicy, GateRule
from .rules import direction_of, gated_metrics, named_by_a_rule, rule_for

if TYPE_CHECKING:
    from ..stats.sequential import SequentialResult

# (variant, suite, metric) -> the sequential result of a gate that looked while its suite ran
Sequential = Mapping[tuple[str, str, str], "SequentialResult"]


def _sequential_gate(c: Comparison, rule: GateRule, seq: "SequentialResult") -> GateResult:
    """A gate that looked while its suite ran: its verdict is the design's, read at the look that decided it
    (an interval on the items used, taken as a fixed-n one, would be peeking)."""
    verdict: GateVerdict = "INCONCLUSIVE" if seq.verdict == "UNDECIDED" else seq.verdict
    reason = seq.reason if seq.verdict != "UNDECIDED" else f"{seq.reason}: the suite stopped before a decision"
    if verdict == "FAIL" and rule.action == "warn":
        verdict = "WARN"
    last = seq.looks[-1] if seq.looks else None
    # a PASS held for a heavy tail (verdict/sequential.heavy_tail_held) keeps its look's finding, not its verdict
    finding = ("undecided" if seq.verdict == "UNDECIDED" else "refused_heavy_tail"
               if seq.verdict == "INCONCLUSIVE" and seq.finding == "shown_within" else seq.finding)
    bound = (lambda x: None if x is None or x != x else x)  # the betting method has no interval: its capital decides
    sign = -1.0 if direction_of(rule, c) == "lower" else 1.0
    return GateResult(variant=c.variant, suite=c.suite, metric=c.metric, rule=rule.match, mode=rule.mode,
                      margin=seq.margin, margin_spec=f"{rule.margin:.0%} of baseline" if rule.relative else f"{rule.margin:g}",
                      alpha=rule.alpha, beta=rule.beta, base_mean=c.base_mean, variant_mean=c.variant_mean,
                      delta=last.mean if last else sign * c.delta, lower_bound=bound(last.lower if last else None),
                      upper_bound=bound(last.upper if last else None), mde=c.mde, p_value=c.p_value,
                      p_adjusted=c.p_adjusted, action=rule.action, verdict=verdict, reason=reason,
                      finding=finding, sequential=seq.method, items_used=seq.items_used,
                      items_planned=seq.n_planned)


def _undirected(c: Comparison, rule: GateRule, margin: float) -> GateResult:
    return GateResult(variant=c.variant, suite=c.suite, metric=c.metric, rule=rule.match, mode=rule.mode,
                      margin=margin, margin_spec=f"{rule.margin:g}", alpha=rule.alpha, beta=rule.beta,
                      base_mean=c.base_mean, variant_mean=c.variant_mean, action=rule.action,
                      verdict="FAIL" if rule.action == "fail" else "WARN",
                      reason="which direction is better is not declared for this metric: give the rule a "
                             "`direction` (higher or lower)", finding="undirected")


def _gate(c: Comparison, rule: GateRule, policy: GatePolicy) -> GateResult:
    direction = direction_of(rule, c)
    margin = rule.margin * abs(c.base_mean) if rule.relative else rule.margin
    if direction is None:  # never guessed from the metric's name
        return _undirected(c, rule, margin)
    sign = 1.0 if direction == "higher" else -1.0  # orient so that positive is better
    delta, low, high = sign * c.delta, *sorted((sign * c.ci_low, sign * c.ci_high))
    d = decide(rule.mode, low, high, margin, mde=c.mde)
    verdict: GateVerdict = d.verdict
    reason, p_exact, finding = d.reason, None, d.finding
    if c.insufficient:  # too few data: no interval is read, whatever it says
        verdict, reason, finding = "INCONCLUSIVE", c.insufficient, "insufficient_data"
    if c.interval_refused and not high < (margin if rule.mode == "superiority" else -margin):
        # no interval keeps alpha on these differences: only a clear FAIL stands (a loss tail the sample
        # missed pulls the bounds up, so an upper bound that still falls short errs on the safe side)
        verdict, reason, finding = "INCONCLUSIVE", c.interval_refused, "refused_heavy_tail"
    if verdict == "PASS" and c.binary and c.n_groups is None and rule.mode != "superiority" \
            and c.flips_variant_only is not None and c.flips_base_only is not None:
        # the interval is an approximation (a little above alpha at some n): a PASS must also clear the
        # exact test, which keeps the false-pass rate at or below alpha for every flip rate
        gains, losses = ((c.flips_variant_only, c.flips_base_only) if sign > 0
                         else (c.flips_base_only, c.flips_variant_only))
        p_exact = noninferiority_exact(gains, losses, c.n_paired, margin).p_value
        if rule.mode == "equivalence":  # the other one-sided test: not better by the margin or more
            p_exact = max(p_exact, noninferiority_exact(losses, gains, c.n_paired, margin).p_value)
        if p_exact > rule.alpha:
            verdict, finding = "FAIL", "exact_test_not_confirmed"
            reason = f"{reason}, but the exact test does not confirm it (p = {p_exact:.4f} > alpha {rule.alpha:g})"
        else:
            reason = f"{reason}; exact test p = {p_exact:.4f}"
    if verdict == "FAIL" and rule.action == "warn":
        verdict = "WARN"
    return GateResult(variant=c.variant, suite=c.suite, metric=c.metric, rule=rule.match, mode=rule.mode,
                      margin=margin, margin_spec=f"{rule.margin:.0%} of baseline" if rule.relative else f"{rule.margin:g}",
                      alpha=rule.alpha, beta=rule.beta, base_mean=c.base_mean, variant_mean=c.variant_mean,
                      delta=delta, lower_bound=low, upper_bound=high, mde=c.mde, p_value=c.p_value,
                      p_adjusted=c.p_adjusted, p_exact=p_exact, action=rule.action, verdict=verdict, reason=reason,
                      finding=finding, method=c.interval_method)


def _not_run(variant: str, suite: str, metric: str, rule: GateRule, why: str) -> GateResult:
    return GateResult(variant=variant, suite=suite, metric=metric, rule=rule.match, mode=rule.mode, margin=rule.margin,
                      margin_spec=f"{rule.margin:g}", alpha=rule.alpha, beta=rule.beta, action=rule.action,
                      verdict="NOT_RUN", reason=why, finding="not_run")


@dataclass(frozen=True)
class Unjudged:
    """A suite the variant has no results for, though the baseline has (imported results that lack a task): each
    of its gated metrics is NOT_EVALUATED, with why."""

    variant: str
    suite: str
    metrics: tuple[str, ...]  # the baseline's metrics of the suite
    primary: str | None
    why: str


def _not_evaluated(variant: str, suite: str, metric: str, rule: GateRule, why: str) -> GateResult:
    return GateResult(variant=variant, suite=suite, metric=metric, rule=rule.match, mode=rule.mode, margin=rule.margin,
                      margin_spec=f"{rule.margin:g}", alpha=rule.alpha, beta=rule.beta, action=rule.action,
                      verdict="NOT_EVALUATED", reason=why, finding="not_evaluated")


def evaluate(policy: GatePolicy, comparisons: list[Comparison], variants: list[str], sequential: Sequential = {},
             not_run: Mapping[str, Mapping[str, tuple[str, str]]] = {},
             unjudged: Sequence[Unjudged] = ()) -> list[GateResult]:
    """`sequential`: the results of gates that looked while their suite ran (they decide those gates);
    `not_run`: per variant, the suites it skipped after a failed gate, each as (its primary metric, why);
    `unjudged`: the suites a variant has no results for (each gated metric NOT_EVALUATED, never passed)."""
    results = []
    for c in comparisons:
        if not c.primary and not named_by_a_rule(policy, c.suite, c.metric):
            continue  # secondary metrics are reported, gated only when a rule names them
        rule = rule_for(policy, c.suite, c.metric)
        if rule is not None:
            seq = sequential.get((c.variant, c.suite, c.metric))
            # too few data: no look decides it either
            results.append(_gate(c, rule, policy) if seq is None or c.insufficient else _sequential_gate(c, rule, seq))
    for v, suites in not_run.items():  # never passed, never failed: the variant had failed already
        for suite, (metric, why) in suites.items():
            rule = rule_for(policy, suite, metric)
            if rule is not None:
                results.append(_not_run(v, suite, metric, rule, why))
    for u in unjudged:
        results += [_not_evaluated(u.variant, u.suite, m, rule, u.why)
                    for m, rule in gated_metrics(policy, u.suite, u.metrics, u.primary)]
    # a metric the policy requires but the campaign lacks is a failure, never a silent pass
    for rule in (r for r in policy.rules if r.required):
        for v in variants:
            if not any(g.variant == v and fnmatchcase(f"{g.suite}/{g.metric}", rule.match) for g in results):
                suite, _, metric = rule.match.rpartition("/")
                results.append(GateResult(variant=v, suite=suite, metric=metric, rule=rule.match, mode=rule.mode,
                                          margin=rule.margin, margin_spec=f"{rule.margin:g}", alpha=rule.alpha,
                                          beta=rule.beta, action=rule.action, verdict="FAIL",
                                          reason="required metric missing from the campaign", finding="missing"))
    return results


def variant_verdict(gates: list[GateResult], evaluated: bool) -> GateVerdict:
    """FAIL where a gate failed; else NOT_EVALUATED where a fail rule had nothing to judge (a task the variant's
    results lack, a performance rule over imported results), so that a variant never passes on a rule it was not
    judged on; else INCONCLUSIVE where a gate showed nothing either way, or there is no gate; else PASS. A warn
    rule never changes the verdict, judged or not."""
    if not evaluated:
        return "NOT_EVALUATED"
    verdicts = {g.verdict for g in gates}
    if "FAIL" in verdicts:
        return "FAIL"
    if any(g.verdict == "NOT_EVALUATED" and g.action == "fail" for g in gates):
        return "NOT_EVALUATED"
    if "INCONCLUSIVE" in verdicts or not gates:
        return "INCONCLUSIVE"  # nothing was shown either way
    return "PASS"


def overall_verdict(per_variant: dict[str, GateVerdict]) -> GateVerdict:
    vs = set(per_variant.values())
    for v in ("NOT_EVALUATED", "FAIL", "INCONCLUSIVE"):
        if v in vs:
            return v
    return "PASS"


def evaluate_performance(policy: GatePolicy, variant: str, base: dict[str, float],
                         cand: dict[str, float], simulated: str | None = None,
                         changes: Collection[str] | None = None) -> list[GateResult]:
    """Measured figures, no interval: the ratio variant / baseline against the rule's bound. A figure
    the campaign did not measure (no probe, say) fails a fail rule rather than passing it, and warns a
    warn rule (which never fails a variant). A simulated variant's figures are the dense model's, not its
    scheme's: nothing is shown either way (INCONCLUSIVE; a warn rule WARNs), and the reason says why.
    `changes`: what the variant changes against the baseline (pipeline/changes.py); a rule that does not apply
    to them is not gated (perf_not_applicable lists it)."""
    out = []
    for r in policy.performance:
        if r.not_applicable(changes):
            continue
        bound = r.min_ratio if r.min_ratio is not None else r.max_ratio
        spec = r.bound_text
        common = dict(variant=variant, suite="perf", metric=r.metric, rule=r.text, mode="ratio",
                      margin=bound, margin_spec=f"{spec} baseline", alpha=0.0, beta=0.0, action=r.action)
        if simulated:
            out.append(GateResult(**common, verdict="INCONCLUSIVE" if r.action == "fail" else "WARN",
                                  reason=f"not this scheme's {r.metric}: served on its dequantized weights ({simulated})",
                                  finding="simulated"))
            continue
        if r.metric not in base or r.metric not in cand or not base[r.metric]:
            out.append(GateResult(**common, verdict="FAIL" if r.action == "fail" else "WARN",
                                  reason=f"{r.metric} was not measured", finding="not_measured"))
            continue
        ratio = cand[r.metric] / base[r.metric]
        ok = ratio >= r.min_ratio if r.min_ratio is not None else ratio <= r.max_ratio
        verdict: GateVerdict = "PASS" if ok else ("FAIL" if r.action == "fail" else "WARN")
        out.append(GateResult(**common, base_mean=base[r.metric], variant_mean=cand[r.metric], delta=ratio,
                              verdict=verdict, reason=f"ratio {ratio:.3f} ({spec} required)",
                              finding="ratio_met" if ok else "ratio_missed"))
    return out


def performance_not_evaluated(policy: GatePolicy, variant: str, why: str,
                              changes: Collection[str] | None = None) -> list[GateResult]:
    """Every performance rule that applies, NOT_EVALUATED with why: the variant has no figures to read (its
    results were imported, not served), which is neither a pass nor a measured miss."""
    return [GateResult(variant=variant, suite="perf", metric=r.metric, rule=r.text, mode="ratio",
                       margin=r.min_ratio if r.min_ratio is not None else r.max_ratio,
                       margin_spec=f"{r.bound_text} baseline", alpha=0.0, beta=0.0, action=r.action,
                       verdict="NOT_EVALUATED", reason=why, finding="not_evaluated")
            for r in policy.performance if not r.not_applicable(changes)]


def perf_not_applicable(policy: GatePolicy, changes: Collection[str] | None) -> dict[str, str]:
    """The performance rules that do not gate a variant of these changes, each with why (rule text -> reason)."""
    return {r.text: why for r in policy.performance if (why := r.not_applicable(changes))}
