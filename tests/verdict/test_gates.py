"""Gate policy -> verdicts, on hand-built comparisons (pure)."""

import pytest

from qeval.config import load_policy
from qeval.errors import ConfigError
from qeval.record.run import Comparison, RunRecord
from qeval.report.junit import render as junit
from qeval.verdict.gates import Unjudged, evaluate, overall_verdict, variant_verdict
from qeval.verdict.policy import GatePolicy, GateRule
from qeval.verdict.rules import rule_for

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def comp(variant="q", suite="lm_eval/t", metric="acc", delta=-0.01, low=-0.03, high=0.01, mde=0.02, base=0.6,
         primary=True, higher_is_better=True) -> Comparison:
    return Comparison(variant=variant, suite=suite, metric=metric, primary=primary, n_paired=500, unpaired_base=0,
                      unpaired_variant=0, base_mean=base, variant_mean=base + delta, delta=delta, ci_low=low,
                      ci_high=high, interval_method="paired-bootstrap-percentile", confidence=0.9, t_ci_low=low,
                      t_ci_high=high, binary=True, higher_is_better=higher_is_better, mde=mde, p_value=0.5)


def test_last_matching_rule_wins():
    policy = GatePolicy(rules=[GateRule(match="*", margin=0.05), GateRule(match="custom/*", margin=0.2)])
    assert rule_for(policy, "custom/x", "m").margin == 0.2
    assert rule_for(policy, "lm_eval/x", "acc").margin == 0.05


def test_pass_fail_inconclusive():
    policy = GatePolicy(rules=[GateRule(margin=0.05)])
    [g] = evaluate(policy, [comp()], ["q"])
    assert g.verdict == "PASS" and g.lower_bound == -0.03
    [g] = evaluate(policy, [comp(low=-0.08)], ["q"])
    assert g.verdict == "FAIL"
    [g] = evaluate(policy, [comp(mde=0.2)], ["q"])
    assert g.verdict == "INCONCLUSIVE" and "0.2" in g.reason
    [g] = evaluate(policy, [comp(delta=-0.3, low=-0.4, high=-0.2, mde=0.2)], ["q"])
    assert g.verdict == "FAIL"  # clearly worse even though underpowered


def test_relative_margin_and_warn():
    policy = GatePolicy(rules=[GateRule(margin=0.1, relative=True, action="warn")])
    [g] = evaluate(policy, [comp(base=0.5, low=-0.06, mde=0.01)], ["q"])
    assert g.margin == pytest.approx(0.05) and g.verdict == "WARN" and g.margin_spec == "10% of baseline"
    assert variant_verdict([g], evaluated=True) == "PASS"


def test_lower_is_better_metric_is_oriented():
    # e.g. a KL divergence: the variant's rise is the harm
    policy = GatePolicy(rules=[GateRule(match="*/kl", direction="lower", margin=0.05)])
    [g] = evaluate(policy, [comp(metric="kl", delta=0.02, low=0.01, high=0.03, mde=0.01)], ["q"])
    assert g.delta == -0.02 and (g.lower_bound, g.upper_bound) == (-0.03, -0.01) and g.verdict == "PASS"
    [g] = evaluate(policy, [comp(metric="kl", delta=0.08, low=0.06, high=0.1, mde=0.01)], ["q"])
    assert g.verdict == "FAIL"


def test_required_metric_missing_fails():
    policy = GatePolicy(rules=[GateRule(), GateRule(match="lm_eval/needed/acc", required=True)])
    gates = evaluate(policy, [comp()], ["q"])
    missing = [g for g in gates if g.suite == "lm_eval/needed"]
    assert len(missing) == 1 and missing[0].verdict == "FAIL" and "missing" in missing[0].reason


def test_secondary_metrics_are_gated_only_when_named():
    policy = GatePolicy(rules=[GateRule()])
    assert evaluate(policy, [comp(primary=False)], ["q"]) == []
    policy = GatePolicy(rules=[GateRule(match="lm_eval/t/acc")])
    assert len(evaluate(policy, [comp(primary=False)], ["q"])) == 1


def test_a_gate_with_nothing_to_judge_keeps_its_variant_from_passing():
    policy = GatePolicy(rules=[GateRule(margin=0.05), GateRule(match="lm_eval/warned/*", margin=0.05, action="warn")])
    lacks = [Unjudged("q", "lm_eval/gone", ("acc", "acc_norm"), "acc", "no such task"),
             Unjudged("q", "lm_eval/warned", ("acc",), "acc", "no such task")]
    passed, gone, warned = evaluate(policy, [comp()], ["q"], unjudged=lacks)
    assert passed.verdict == "PASS"
    # the primary metric only, as for a judged suite (acc_norm is named by no rule)
    assert (gone.suite, gone.metric, gone.verdict, gone.finding, gone.reason) == \
        ("lm_eval/gone", "acc", "NOT_EVALUATED", "not_evaluated", "no such task")
    assert variant_verdict([passed, gone], evaluated=True) == "NOT_EVALUATED"
    assert variant_verdict([passed, warned], evaluated=True) == "PASS"  # a warn rule never changes a verdict
    failed = evaluate(policy, [comp(low=-0.08)], ["q"])[0]
    assert variant_verdict([failed, gone], evaluated=True) == "FAIL"  # a failure shown stands


def test_verdicts_roll_up():
    assert variant_verdict([], evaluated=False) == "NOT_EVALUATED"
    assert variant_verdict([], evaluated=True) == "INCONCLUSIVE"
    assert overall_verdict({"a": "PASS", "b": "INCONCLUSIVE"}) == "INCONCLUSIVE"
    assert overall_verdict({"a": "PASS", "b": "FAIL", "c": "INCONCLUSIVE"}) == "FAIL"
    assert overall_verdict({"a": "PASS", "b": "NOT_EVALUATED"}) == "NOT_EVALUATED"


def test_junit_has_one_case_per_gate_and_failures():
    policy = GatePolicy(rules=[GateRule(margin=0.05)])
    gates = evaluate(policy, [comp(), comp(suite="lm_eval/u", low=-0.2)], ["q"])
    rec = RunRecord(run_id="x", campaign="c", config_hash="h", config={}, config_file="f", command=[],
                    started_at="now", gates=gates, verdicts={"q": "FAIL"}, verdict="FAIL",
                    variants=[{"name": "base", "method": "bf16", "role": "baseline"},
                              {"name": "q", "method": "gptq", "role": "variant"}])
    xml = junit(rec)
    assert xml.count("<testcase") == 2 and xml.count("<failure") == 1 and 'failures="1"' in xml


def test_policy_file_errors_name_the_file(tmp_path):
    p = tmp_path / "policy.yaml"
    p.write_text("rules:\n  - match: '*'\n    margn: 0.1\n")
    with pytest.raises(ConfigError, match=r"policy.yaml:line 3: rules.0.margn: unknown key"):
        load_policy(p)
    assert load_policy(ROOT / "examples" / "gates" / "demo.yaml").correction == "holm"


def test_grouped_items_count_as_groups_in_power_when_the_plan_says_how_correlated():
    """Items sharing a group: the observed MDE is the cluster-robust one; the planned MDE (which decides
    INCONCLUSIVE) counts groups only with an assumed planning_icc, so it stays fixed before the run."""
    import numpy as np

    from qeval.record.metrics import continuous
    from qeval.stats import clustered, design_effect, mde
    from qeval.verdict.comparison import compare_metric
    from qeval.verdict.pairing import Paired

    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(40), 3)
    base = rng.normal(0.6, 0.2, 120)
    cand = base + (rng.normal(0, 0.1, 120) + rng.normal(0, 0.1, 40)[groups]) / np.sqrt(2)
    p = Paired(ids=[str(i) for i in range(120)], groups=[f"g{g}" for g in groups], base={"m": base},
               cand={"m": cand}, unpaired_base=[], unpaired_cand=[])
    policy = GatePolicy(rules=[GateRule(margin=0.05, planning_sd=0.1)])
    spec = continuous(True, "test")
    plain = compare_metric("v", "s", "m", True, p, GateRule(margin=0.05, planning_sd=0.1), policy, spec=spec)
    icc = compare_metric("v", "s", "m", True, p, GateRule(margin=0.05, planning_sd=0.1, planning_icc=0.5), policy,
                         spec=spec)
    iid = mde(120, 0.1).mde
    assert plain.mde == pytest.approx(iid) and "as if independent" in plain.power_method
    want = clustered(mde(120, 0.1), design_effect(np.full(40, 3), 0.5), 39, 40).mde  # deff 2, t at 39 df
    assert icc.mde == pytest.approx(want) and icc.mde > iid * np.sqrt(2)
    assert "clustered (40 groups" in icc.power_method
    assert plain.mde_observed == icc.mde_observed > mde(120, float(np.std(cand - base, ddof=1))).mde
    d = cand - base  # the effect size is per item, whatever the groups
    assert plain.effect_size == icc.effect_size == pytest.approx(np.mean(d) / np.std(d, ddof=1))
