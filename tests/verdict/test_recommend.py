"""The recommendation on hand-made records: the cheapest passing variant by the policy's figure, ties, missing
figures, and the closest variant with the gate that stopped it when none passes."""

from __future__ import annotations

import math

from qeval.record.run import GateResult, RunRecord, VariantResult
from qeval.verdict.recommend import Candidate, Failure, candidates, for_record, recommend, shortfall

MIB = 2**20


def _fail(gate: str, short: float, verdict: str = "FAIL") -> Failure:
    return Failure(gate=gate, verdict=verdict, reason=f"{gate} missed", shortfall=short)


def test_the_least_weights_memory_among_the_passing_wins():
    cands = [Candidate("w8", "PASS", 156 * MIB, 900.0), Candidate("w4", "PASS", 108 * MIB, 800.0),
             Candidate("w2", "FAIL", 60 * MIB, 1200.0, (_fail("a / acc", 1.0),))]
    rec = recommend(cands)
    assert rec.chosen.name == "w4" and rec.passing == 2 and not rec.unranked
    assert rec.text() == ("Recommended: w4 (the least weights memory among the 2 variant(s) that pass every gate): "
                          "weights 108 MiB, output tok/s at the SLO 800.0")


def test_by_throughput_at_the_slo():
    cands = [Candidate("w8", "PASS", 156 * MIB, 900.0), Candidate("w4", "PASS", 108 * MIB, 800.0)]
    rec = recommend(cands, by="throughput_at_slo")
    assert rec.chosen.name == "w8" and "the most output tokens/s at the SLO" in rec.text()


def test_a_tie_goes_to_the_other_figure_then_campaign_order():
    same = [Candidate("a", "PASS", 100 * MIB, 500.0), Candidate("b", "PASS", 100 * MIB, 700.0)]
    assert recommend(same).chosen.name == "b"  # equal memory: the faster one
    assert recommend(same[::-1], by="throughput_at_slo").chosen.name == "b"
    twins = [Candidate("first", "PASS", 100 * MIB, 500.0), Candidate("second", "PASS", 100 * MIB, 500.0)]
    assert recommend(twins).chosen.name == "first" and recommend(twins[::-1]).chosen.name == "second"


def test_a_missing_figure_ranks_after_every_measured_one():
    cands = [Candidate("unmeasured", "PASS", None, None), Candidate("measured", "PASS", 300 * MIB, None)]
    assert recommend(cands).chosen.name == "measured"
    assert recommend(cands, by="throughput_at_slo").chosen.name == "measured"  # no throughput: memory decides
    alone = recommend([Candidate("x", "PASS"), Candidate("y", "PASS")], by="throughput_at_slo")
    assert alone.chosen.name == "x" and alone.unranked
    assert alone.text().startswith("Recommended: x (no throughput at the SLO measured for it, picked in campaign order)")
    assert alone.text().endswith("weights -, output tok/s at the SLO -")


def test_warn_and_inconclusive_verdicts_do_not_pass():
    cands = [Candidate("unsure", "INCONCLUSIVE", 50 * MIB, None, (_fail("c / x", 0.0, "INCONCLUSIVE"),)),
             Candidate("ok", "PASS", 500 * MIB, None)]
    assert recommend(cands).chosen.name == "ok"


def test_none_passing_names_the_closest_and_its_first_failing_gate():
    cands = [Candidate("far", "FAIL", failures=(_fail("a / acc", 0.1), _fail("b / acc", 0.1))),
             Candidate("near", "FAIL", failures=(_fail("c / kl", 2.0), )),
             Candidate("nearer", "INCONCLUSIVE", failures=(_fail("d / acc", 0.5, "INCONCLUSIVE"),))]
    rec = recommend(cands, gates_of={"far": 4, "near": 4, "nearer": 4})
    assert rec.chosen is None and rec.closest.name == "nearer"  # one failing gate each: the smaller shortfall
    assert rec.text() == ("No variant passes every gate. Closest: nearer (1 of 4 gates not passed); first failing "
                          "gate: d / acc: INCONCLUSIVE (d / acc missed)")
    # fewest failing gates first, however small the shortfalls of a variant with more
    assert recommend(cands[:2]).closest.name == "near"
    # equal on both: campaign order
    assert recommend([Candidate("p", "FAIL", failures=(_fail("g", 1.0),)),
                      Candidate("q", "FAIL", failures=(_fail("g", 1.0),))]).closest.name == "p"


def test_nothing_evaluated_recommends_nothing():
    rec = recommend([Candidate("cut", "NOT_EVALUATED"), Candidate("gone", "NOT_EVALUATED")])
    assert rec.chosen is None and rec.closest is None
    assert rec.text() == "No variant to recommend: none was evaluated"
    assert recommend([]).text() == "No variant to recommend: none was evaluated"


def _gate(**kw) -> GateResult:
    base = dict(variant="v", suite="s", metric="m", rule="*", mode="noninferiority", margin=0.1, margin_spec="0.1",
                alpha=0.05, beta=0.2, action="fail", verdict="FAIL")
    return GateResult(**base | kw)


def test_shortfall_is_in_units_of_the_gates_margin():
    assert math.isclose(shortfall(_gate(lower_bound=-0.15)), 0.5)  # 0.05 below -0.1
    assert shortfall(_gate(lower_bound=-0.02, verdict="INCONCLUSIVE")) == 0.0  # clears -margin, underpowered
    assert shortfall(_gate(reason="required metric missing from the campaign")) == math.inf
    ratio = dict(suite="perf", mode="ratio", margin=1.3)
    assert math.isclose(shortfall(_gate(**ratio, metric="max_output_throughput", rule="max_output_throughput >= 1.3x",
                                        delta=1.17)), 0.1)
    assert math.isclose(shortfall(_gate(**ratio | {"margin": 0.5}, metric="weights_bytes",
                                        rule="weights_bytes <= 0.5x", delta=0.6)), 0.2)
    assert shortfall(_gate(**ratio, rule="weights_bytes <= 1.3x")) == math.inf  # not measured


def _record(policy: dict | None, verdicts: dict[str, str], gates: list[GateResult]) -> RunRecord:
    variants = [VariantResult(name="bf16", method="bf16", role="baseline", weights_bytes=257 * MIB)]
    variants += [VariantResult(name=n, method="gptq", role="variant", weights_bytes=w * MIB)
                 for n, w in (("w4", 108), ("w8", 156))]
    return RunRecord(run_id="r", campaign="c", config_hash="h", config={} if policy is None else {"gates": policy},
                     config_file="c.yaml", command=[], started_at="now", variants=variants, verdicts=verdicts,
                     gates=gates)


def test_from_a_record_with_and_without_the_policy_field():
    both = _record(None, {"w4": "PASS", "w8": "PASS"}, [])  # a record of a policy that predates `recommend`
    assert for_record(both).by == "weights_memory" and for_record(both).chosen.name == "w4"
    by_tp = _record({"rules": [], "recommend": {"by": "throughput_at_slo"}}, {"w4": "PASS", "w8": "PASS"}, [])
    assert for_record(by_tp).by == "throughput_at_slo"
    assert for_record(by_tp).chosen.name == "w4" and for_record(by_tp).unranked  # no probe: campaign order
    gates = [_gate(variant="w4", lower_bound=-0.3), _gate(variant="w4", metric="n", lower_bound=-0.2),
             _gate(variant="w8", lower_bound=-0.12, reason="lower bound -0.12 <= -margin -0.1"),
             _gate(variant="w8", metric="n", verdict="PASS", lower_bound=0.0)]
    none = for_record(_record({}, {"w4": "FAIL", "w8": "FAIL"}, gates))
    assert none.closest.name == "w8" and none.total_gates == 2
    assert none.text().endswith("Closest: w8 (1 of 2 gates not passed); first failing gate: s / m: FAIL "
                                "(lower bound -0.12 <= -margin -0.1)")


def test_a_not_run_gate_is_not_passed():
    """stop_variant_on_fail: the gates a failed variant skipped count against it, so a variant that failed its
    first gate and ran nothing more is not the closest over one with more gates passed."""
    gates = [_gate(variant="w4", lower_bound=-0.3), *(_gate(variant="w4", metric=f"n{i}", verdict="NOT_RUN")
                                                      for i in range(5)),
             _gate(variant="w8", lower_bound=-0.12), _gate(variant="w8", metric="n", verdict="INCONCLUSIVE",
                                                          lower_bound=-0.05),
             *(_gate(variant="w8", metric=f"p{i}", verdict="PASS", lower_bound=0.0) for i in range(4))]
    none = for_record(_record({}, {"w4": "FAIL", "w8": "INCONCLUSIVE"}, gates))
    w4 = next(c for c in candidates(
        _record({}, {"w4": "FAIL", "w8": "INCONCLUSIVE"}, gates)) if c.name == "w4")
    assert len(w4.failures) == 6 and math.isinf(w4.failures[1].shortfall)
    assert none.closest.name == "w8" and "(2 of 6 gates not passed)" in none.text()
