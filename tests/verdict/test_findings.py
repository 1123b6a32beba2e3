"""What each gate found, beside its verdict, from every path of verdict/gates.py, and how the verdict line,
the reports, JUnit, the recommendation and MLflow say it (pure: hand-built comparisons and records)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import get_args

import numpy as np
import pytest

from qeval.cli import verdict_table
from qeval.record.run import Comparison, GateFinding, RunRecord
from qeval.report import html, junit, markdown
from qeval.stats.sequential import gsd_gate
from qeval.tracking.mlflow import gate_tags
from qeval.verdict.findings import WORDS, label, qualifier, would_pass
from qeval.verdict.gates import evaluate, evaluate_performance
from qeval.verdict.policy import GatePolicy, GateRule, PerfRule
from qeval.verdict.recommend import for_record

OLD = Path(__file__).parents[1] / "fixtures" / "records" / "schema2-gpu.json"


def comp(suite="custom/caps", metric="contains", delta=-0.01, low=-0.03, high=0.01, mde=0.02, base=0.9,
         binary=False, **kw) -> Comparison:
    return Comparison(variant="q", suite=suite, metric=metric, primary=True, n_paired=76, unpaired_base=0,
                      unpaired_variant=0, base_mean=base, variant_mean=base + delta, delta=delta, ci_low=low,
                      ci_high=high, interval_method="paired-t", confidence=0.9, t_ci_low=low, t_ci_high=high,
                      binary=binary, higher_is_better=True, mde=mde, p_value=0.5, **kw)


def one(policy: GatePolicy, c: Comparison, **kw):
    [g] = evaluate(policy, [c], ["q"], **kw)
    return g


def test_every_finding_has_its_words():
    assert set(WORDS) == set(get_args(GateFinding))


@pytest.mark.parametrize("c, verdict, finding", [
    (comp(), "PASS", "shown_within"),
    (comp(delta=-0.755, low=-0.85, high=-0.66), "FAIL", "shown_worse"),  # a 3-bit variant on capitals
    (comp(delta=-0.04, low=-0.106, high=0.027, mde=0.09), "FAIL", "not_shown_within"),  # an FP8 one, 76 items
    (comp(delta=-0.04, low=-0.106, high=0.027, mde=0.2), "INCONCLUSIVE", "underpowered"),
    (comp(delta=0.02, low=-0.01, high=0.05, mde=0.2), "INCONCLUSIVE", "underpowered_within"),
])
def test_fixed_n_gates_carry_their_finding(c, verdict, finding):
    g = one(GatePolicy(rules=[GateRule(margin=0.1)]), c)
    assert (g.verdict, g.finding) == (verdict, finding)


def test_a_warn_rule_keeps_the_finding_and_a_lower_is_better_metric_is_oriented():
    g = one(GatePolicy(rules=[GateRule(margin=0.1, action="warn")]), comp(delta=-0.3, low=-0.4, high=-0.2))
    assert (g.verdict, g.finding) == ("WARN", "shown_worse") and label(g) == "WARN (worse than the margin)"
    # a KL that rose by 0.2 to 0.4: worse than a 0.1 margin; one that rose by up to 0.15, not shown within it
    kl = GatePolicy(rules=[GateRule(match="*/kl", direction="lower", margin=0.1)])
    assert one(kl, comp(metric="kl", delta=0.3, low=0.2, high=0.4)).finding == "shown_worse"
    assert one(kl, comp(metric="kl", delta=0.05, low=-0.05, high=0.15)).finding == "not_shown_within"


def test_other_modes_name_what_the_interval_shows():
    equiv = GatePolicy(rules=[GateRule(margin=0.1, mode="equivalence")])
    g = one(equiv, comp(delta=0.2, low=0.15, high=0.25))
    assert (g.verdict, g.finding) == ("FAIL", "shown_better")
    assert label(g) == "FAIL (better than the baseline by more than the margin)"  # not equivalent: outside the band
    sup = GatePolicy(rules=[GateRule(margin=0.1, mode="superiority")])
    assert one(sup, comp(delta=0.2, low=0.15, high=0.25)).finding == "shown_better"
    assert one(sup, comp(delta=0.05, low=0.0, high=0.09)).finding == "shown_not_better"
    assert one(sup, comp(delta=0.1, low=0.05, high=0.15)).finding == "not_shown_better"


def test_gates_without_an_interval_say_why():
    missing = [g for g in evaluate(GatePolicy(rules=[GateRule(), GateRule(match="lm_eval/needed/acc", required=True)]),
                                   [comp()], ["q"]) if g.suite == "lm_eval/needed"]
    assert [g.finding for g in missing] == ["missing"] and label(missing[0]) == "FAIL (required metric missing)"
    not_run = evaluate(GatePolicy(rules=[GateRule()]), [], ["q"],
                       not_run={"q": {"custom/sums": ("numeric", "a gate had already failed the variant")}})
    assert [(g.verdict, g.finding) for g in not_run] == [("NOT_RUN", "not_run")] and label(not_run[0]) == "NOT_RUN"


def test_sequential_gates_carry_the_deciding_looks_finding():
    n, m = 400, 0.05
    policy = GatePolicy(rules=[GateRule(margin=m)])
    kw = dict(look_every=100, min_items=100, binary=False, planning_sd=0.3)
    noise = np.tile([-1.0, 1.0], n // 2) * 0.3
    futile = gsd_gate(-m - 2 * noise[:100].std(ddof=1) / 10 + noise, n, m, 0.05, **kw)
    undecided = gsd_gate(noise[:150], n, m, 0.05, **kw)
    c = comp(metric="contains", delta=-0.05)
    g = one(policy, c, sequential={("q", "custom/caps", "contains"): futile})
    assert (g.verdict, g.finding) == ("FAIL", "futile") and g.items_used == 100
    assert label(g).startswith("FAIL (stopped for futility")
    g = one(policy, c, sequential={("q", "custom/caps", "contains"): undecided})
    assert (g.verdict, g.finding) == ("INCONCLUSIVE", "undecided")
    assert label(g) == "INCONCLUSIVE (stopped before a decision)"


def test_performance_gates_name_theirs():
    policy = GatePolicy(rules=[], performance=[PerfRule(metric="max_output_throughput", min_ratio=1.2),
                                               PerfRule(metric="weights_bytes", max_ratio=0.75),
                                               PerfRule(metric="kv_cache_tokens", min_ratio=1.8)])
    base = {"max_output_throughput": 100.0, "weights_bytes": 1000.0}
    met, missed, unmeasured = evaluate_performance(policy, "q", base, {"max_output_throughput": 130.0,
                                                                       "weights_bytes": 1000.0})
    assert (met.finding, missed.finding, unmeasured.finding) == ("ratio_met", "ratio_missed", "not_measured")
    assert label(missed) == "FAIL (ratio misses its bound)" and label(met) == "PASS"
    simulated = evaluate_performance(policy, "q", base, base, simulated="W3A16: no kernel here")
    assert {g.finding for g in simulated} == {"simulated"} and {g.verdict for g in simulated} == {"INCONCLUSIVE"}


def test_an_underpowered_gate_within_the_margin_says_what_inconclusive_pass_would_do():
    g = one(GatePolicy(rules=[GateRule(margin=0.1)]), comp(delta=0.02, low=-0.01, high=0.05, mde=0.2))
    assert label(g, "fail") == ("INCONCLUSIVE (within the margin, but the suite is underpowered; "
                                "with `inconclusive: pass` this would PASS)")
    assert would_pass(g, "pass") == "counted as a pass (`inconclusive: pass`)"
    assert label(g) == "INCONCLUSIVE (within the margin, but the suite is underpowered)"  # no setting given
    straddles = one(GatePolicy(rules=[GateRule(margin=0.1)]), comp(delta=-0.04, low=-0.106, high=0.027, mde=0.2))
    assert would_pass(straddles, "fail") == "" and "would PASS" not in label(straddles, "fail")


def test_a_record_written_before_findings_reads_as_before():
    rec = RunRecord.load(OLD)
    assert rec.gates and all(g.finding is None for g in rec.gates)
    assert all(label(g, rec.inconclusive) == g.verdict and qualifier(g) == "" for g in rec.gates)
    assert gate_tags(rec, rec.gates[0].variant) == {}
    data = json.loads(OLD.read_text())
    assert "finding" not in json.dumps(data["gates"])  # the field is new: the old file has none


def _record(gates) -> RunRecord:
    return RunRecord(run_id="x", campaign="c", config_hash="h", config={}, config_file="f", command=[],
                     started_at="now", gates=gates, verdicts={"q": "FAIL"}, verdict="FAIL",
                     variants=[{"name": "base", "method": "bf16", "role": "baseline"},
                               {"name": "q", "method": "fp8", "role": "variant"}])


@pytest.fixture(scope="module")
def two_fails() -> RunRecord:
    """Both FAILs of one margin: a clear drop, and an interval that straddles -margin; and an INCONCLUSIVE
    whose interval lies inside the margin."""
    policy = GatePolicy(rules=[GateRule(margin=0.1)])
    return _record(evaluate(policy, [comp(suite="custom/bits3", delta=-0.755, low=-0.85, high=-0.66),
                                      comp(suite="custom/fp8", delta=-0.04, low=-0.106, high=0.027, mde=0.09),
                                      comp(suite="custom/small", delta=0.02, low=-0.01, high=0.05, mde=0.2)], ["q"]))


def test_junit_names_the_two_fails_apart(two_fails):
    root = ET.fromstring(junit.render(two_fails).split("?>", 1)[1])
    cases = {c.get("name"): c.find("failure") for c in root.iter("testcase")}
    worse, unshown, small = cases["custom/bits3/contains"], cases["custom/fp8/contains"], cases["custom/small/contains"]
    assert worse.get("type") == "shown_worse" and worse.get("message").startswith("FAIL (worse than the margin): ")
    assert unshown.get("type") == "not_shown_within"
    assert unshown.get("message").startswith("FAIL (not shown within the margin): lower bound -0.1060")
    assert small.get("type") == "underpowered_within" and "with `inconclusive: pass` this would PASS" in \
        small.get("message")


def test_reports_and_the_verdict_line_name_the_two_fails_apart(two_fails):
    md = markdown.render(two_fails)
    row = {s: next(line for line in md.splitlines() if line.startswith(f"| q | custom/{s} / contains |"))
           for s in ("bits3", "fp8", "small")}
    assert "| \u2718 **FAIL** (worse than the margin) |" in row["bits3"]
    assert "| \u2718 **FAIL** (not shown within the margin) |" in row["fp8"]
    assert "with `inconclusive: pass` this would PASS) |" in row["small"]
    summary = markdown.render_summary(two_fails)
    assert "custom/bits3/contains: FAIL (worse than the margin) (delta" in summary
    assert "custom/fp8/contains: FAIL (not shown within the margin) (delta" in summary
    page = html.render(two_fails)
    assert '<span class="badge v-FAIL">\u2718 <strong>FAIL</strong></span> (not shown within the margin)</td>' in page
    assert "first failing gate: custom/bits3 / contains: FAIL (worse than the margin) (upper bound" in \
        for_record(two_fails).text()
    result = {row[1]: row[-1] for row in zip(*(col._cells for col in verdict_table(two_fails).columns))}
    assert result["custom/bits3/contains"] == "FAIL (worse than the margin)"
    assert result["custom/fp8/contains"] == "FAIL (not shown within the margin)"


def test_mlflow_tags_each_gate_with_its_finding(two_fails):
    assert gate_tags(two_fails, "q") == {"finding.custom/bits3/contains": "shown_worse",
                                         "finding.custom/fp8/contains": "not_shown_within",
                                         "finding.custom/small/contains": "underpowered_within"}
    assert gate_tags(two_fails, "base") == {}


def test_findings_round_trip_through_the_record(two_fails, tmp_path):
    two_fails.save(tmp_path / "run.json")
    again = RunRecord.load(tmp_path / "run.json")
    assert [g.finding for g in again.gates] == ["shown_worse", "not_shown_within", "underpowered_within"]
