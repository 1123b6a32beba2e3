"""The paired statistics of one metric of a suite (its interval, power and tests), and the campaign-wide
correction of their p-values."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..record.metrics import MetricSpec
from ..record.run import Comparison
from ..stats import (adjust, clustered, clustered_mean_delta, design_effect, effect_size_dz, flips, mcnemar_exact,
                     mean_delta, observed_power, paired_bootstrap_ci, paired_bootstrap_t_ci, paired_proportion_ci,
                     planned_power, sign_flip_permutation, wilcoxon)
from ..stats.tails import choose_interval
from .pairing import Paired
from .policy import GatePolicy, GateRule
from .rules import direction_of_spec


def compare_metric(variant: str, suite: str, metric: str, primary: bool, p: Paired, rule: GateRule,
                   policy: GatePolicy, spec: MetricSpec) -> Comparison:
    """`spec` is the metric as its suite declares it: which test fits (0/1 or not) is never read off the values."""
    base, cand = p.base[metric], p.cand[metric]
    spec.check(suite, metric, base, cand)
    conf = 1 - 2 * rule.alpha  # two-sided interval whose ends are the one-sided (1 - alpha) bounds
    t = mean_delta(base, cand, confidence=conf)
    grouped = all(g is not None for g in p.groups) and len(set(p.groups)) > 1
    labels = [str(g) for g in p.groups]
    binary = spec.binary
    skew = refused = None
    if grouped:
        ci = clustered_mean_delta(base, cand, labels, confidence=conf)
        low, high, method = ci.ci_low, ci.ci_high, ci.method
    elif policy.interval == "auto" and binary:
        ci = paired_proportion_ci(base, cand, confidence=conf)
        low, high, method = ci.ci_low, ci.ci_high, ci.method
    elif policy.interval == "auto":  # continuous: t or bootstrap-t by the skew where each kept alpha, else none
        choice = choose_interval(_oriented(base, cand, rule, spec), two_sided=rule.mode == "equivalence")
        skew = choice.skew
        if choice.method == "paired-bootstrap-t":
            bt = paired_bootstrap_t_ci(base, cand, confidence=conf, resamples=policy.bootstrap_resamples,
                                       seed=policy.seed)
            low, high, method = bt.ci_low, bt.ci_high, bt.method
        else:  # t; where refused, t is reported and the gate reads only whether it shows the variant worse
            low, high, method = t.ci_low, t.ci_high, t.method
            refused = None if choice.method else choice.reason
    elif policy.interval == "t":
        low, high, method = t.ci_low, t.ci_high, t.method
    elif policy.interval == "bootstrap-t":
        bt = paired_bootstrap_t_ci(base, cand, confidence=conf, resamples=policy.bootstrap_resamples, seed=policy.seed)
        low, high, method = bt.ci_low, bt.ci_high, bt.method
    else:
        boot = paired_bootstrap_ci(base, cand, confidence=conf, resamples=policy.bootstrap_resamples,
                                   seed=policy.seed, method="bca" if policy.interval == "bca" else "percentile")
        low, high, method = boot.ci_low, boot.ci_high, boot.method
    seen = observed_power(base, cand, binary, alpha=rule.alpha, beta=rule.beta)
    power = planned_power(len(p.ids), binary, rule.alpha, rule.beta, rule.planning_flip_rate, rule.planning_sd,
                          observed_sd=seen.sigma)
    if grouped:  # items in groups carry less information than their count: power as the interval sees it
        sizes = np.unique(labels, return_counts=True)[1]
        df = ci.df  # the clustered interval's (Bell-McCaffrey) degrees of freedom
        observed = (ci.se / t.se) ** 2 if t.se > 0 and np.isfinite(ci.se) else np.inf
        seen = clustered(seen, observed, df, len(sizes))
        # the plan stays a design quantity (fixed before the run): grouped only with an assumed correlation
        power = (clustered(power, design_effect(sizes, rule.planning_icc), df, len(sizes))
                 if rule.planning_icc is not None else
                 dataclasses.replace(power, method=power.method + ", as if independent (no planning_icc)"))
    extra: dict = {}
    if binary:
        f = flips(base, cand)
        mc = mcnemar_exact(f)
        extra = dict(flips_base_only=f.base_only, flips_variant_only=f.cand_only, flip_rate=f.rate,
                     flip_rate_ci=f.rate_ci(), p_value=mc.p_value, p_method=mc.method)
    else:
        w = wilcoxon(base, cand)
        perm = sign_flip_permutation(base, cand, resamples=policy.bootstrap_resamples, seed=policy.seed)
        extra = dict(p_value=w.p_value, p_method=w.method, p_permutation=perm.p_value)
    return Comparison(variant=variant, suite=suite, metric=metric, primary=primary, n_paired=len(p.ids),
                      unpaired_base=len(p.unpaired_base), unpaired_variant=len(p.unpaired_cand),
                      base_mean=t.base_mean, variant_mean=t.cand_mean, delta=t.delta, ci_low=low, ci_high=high,
                      interval_method=method, confidence=conf, t_ci_low=t.ci_low, t_ci_high=t.ci_high,
                      n_groups=len(set(p.groups)) if grouped else None, binary=binary,
                      higher_is_better=spec.higher_is_better, mde=power.mde,
                      power_method=power.method, mde_observed=seen.mde, effect_size=effect_size_dz(base, cand), skew=skew,
                      interval_refused=refused, **extra)


def _oriented(base: np.ndarray, cand: np.ndarray, rule: GateRule, spec: MetricSpec) -> np.ndarray:
    """The per-item differences with positive better, so that a negative skew is a tail of losses (no
    direction declared: as given; such a gate is not judged on its interval)."""
    d = np.asarray(cand, float) - np.asarray(base, float)
    return -d if direction_of_spec(rule, spec) == "lower" else d


def adjust_all(comparisons: list[Comparison], method: str) -> list[Comparison]:
    """Correct the p-values of every comparison in the campaign together."""
    idx = [k for k, c in enumerate(comparisons) if c.p_value is not None]
    if not idx:
        return comparisons
    adj = adjust([comparisons[k].p_value for k in idx], method)
    out = list(comparisons)
    for k, a in zip(idx, adj):
        out[k] = out[k].model_copy(update={"p_adjusted": float(a)})
    return out
