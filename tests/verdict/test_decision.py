"""The decision a KV-cache or serving variant asks for, on hand-made records: may be turned on (every gate
passes, incl. the deepest bucket), do not (a quality gate shows it worse), not shown safe (a deep bucket few
documents reach is INCONCLUSIVE), its gain not shown (the KV capacity rule not met), and which variants get one;
the recommendation by KV capacity."""

from __future__ import annotations

from qeval.record.run import GateResult, RunRecord, VariantResult
from qeval.verdict.decision import Subject, decide, deepest, depth, for_record
from qeval.verdict.recommend import Candidate, for_record as recommendation, recommend

KV = ("kv_cache",)
FP8 = ("kv_cache_dtype auto -> fp8",)
BASE = {"kv_cache_tokens": 372_816.0, "max_output_throughput": 1000.0, "weights_bytes": 269e6}
DOUBLED = {"kv_cache_tokens": 745_648.0, "max_output_throughput": 1310.0, "weights_bytes": 269e6}


def _gate(metric: str, verdict: str = "PASS", finding: str | None = "shown_within", suite: str = "logprobs/long",
          **kw) -> GateResult:
    base = dict(variant="kv-fp8", suite=suite, metric=metric, rule="*", mode="noninferiority", margin=0.02,
                margin_spec="0.02", alpha=0.05, beta=0.2, action="fail", verdict=verdict, finding=finding,
                reason="")
    return GateResult(**base | kw)


def _kv_rule(ratio: float, verdict: str) -> GateResult:
    return _gate("kv_cache_tokens", verdict, "ratio_met" if verdict == "PASS" else "ratio_missed", suite="perf",
                 mode="ratio", margin=1.8, margin_spec=">= 1.8x baseline", rule="kv_cache_tokens >= 1.8x",
                 alpha=0.0, beta=0.0, delta=ratio, reason=f"ratio {ratio:.3f} (>= 1.8x required)")


QUALITY = (_gate("kl@0-1k"), _gate("kl@4k-8k"), _gate("kl@1k-2k"), _gate("acc", suite="needle/needle"),
           _gate("acc@4096", suite="needle/needle"), _gate("acc@1024", suite="needle/needle"),
           _gate("exact_match", suite="lm_eval/oe_addition"))


def _subject(gates, verdict="PASS", figures=DOUBLED, **kw) -> Subject:
    return Subject(name="kv-fp8", verdict=verdict, changes=KV, serving_diff=FP8, gates=tuple(gates),
                   figures=figures, base_figures=BASE, **kw)


def test_depth_reads_the_stratum_a_metric_reaches():
    assert depth("kl@4k-8k") == 8192 and depth("kl@0-1k") == 1024 and depth("acc@4096") == 4096
    assert depth("kl@100-200") == 200 and depth("acc") == -1 and depth("kl") == -1
    assert deepest(QUALITY) == ["logprobs/long/kl@4k-8k", "needle/needle/acc@4096"]


def test_every_gate_passes_it_may_be_turned_on_with_its_figures():
    d = decide(_subject([*QUALITY, _kv_rule(2.0, "PASS")]))
    assert d.outcome == "turn_on"
    assert d.text() == (
        "kv-fp8 (changes: kv_cache_dtype auto -> fp8): may be turned on — every quality gate passes (7, incl. "
        "logprobs/long/kl@4k-8k, needle/needle/acc@4096); every performance gate passes (1); KV capacity 2.00x the "
        "baseline's (745,648 vs 372,816 tokens); output throughput at saturation 1.31x (1,310.0 vs 1,000.0 tok/s)")


def test_a_warn_does_not_stop_it_and_is_named():
    warn = _gate("max_output_throughput", "WARN", "ratio_missed", suite="perf", mode="ratio", margin=1.0,
                 action="warn", delta=0.9)
    d = decide(_subject([*QUALITY, warn], figures={**DOUBLED, "max_output_throughput": 900.0}))
    assert d.outcome == "turn_on" and d.because.endswith("; 0 of 1 performance gates pass; WARN: "
                                                        "perf/max_output_throughput")
    assert "output throughput at saturation 0.90x" in d.figures


def test_a_quality_gate_worse_than_the_margin_says_do_not():
    worse = _gate("kl@2k-4k", "FAIL", "shown_worse", lower_bound=-0.09, upper_bound=-0.05,
                  reason="upper bound -0.05 < -margin -0.02")
    also = _gate("acc", "FAIL", "not_shown_within", suite="needle/needle")
    d = decide(_subject([*QUALITY, also, worse], verdict="FAIL"))
    assert d.outcome == "shown_worse"
    assert d.because == ("logprobs/long/kl@2k-4k FAIL (worse than the margin): upper bound -0.05 < -margin -0.02")
    assert d.text().startswith("kv-fp8 (changes: kv_cache_dtype auto -> fp8): do not turn it on — ")


def test_an_inconclusive_deep_bucket_is_not_shown_safe_never_a_pass():
    thin = _gate("kl@4k-8k", "INCONCLUSIVE", "insufficient_data",
                 reason="only 6 documents reach 4k-8k (min_bucket_documents: 8)")
    gates = [g for g in QUALITY if g.metric != "kl@4k-8k"] + [thin, _kv_rule(2.0, "PASS")]
    d = decide(_subject(gates, verdict="INCONCLUSIVE"))
    assert d.outcome == "not_shown_safe"
    assert d.text() == (
        "kv-fp8 (changes: kv_cache_dtype auto -> fp8): not shown safe — logprobs/long/kl@4k-8k INCONCLUSIVE (too "
        "few data to judge): only 6 documents reach 4k-8k (min_bucket_documents: 8); KV capacity 2.00x the "
        "baseline's (745,648 vs 372,816 tokens); output throughput at saturation 1.31x (1,310.0 vs 1,000.0 tok/s)")
    # a FAIL that is not shown within the margin comes before it, and the rest are counted
    straddles = _gate("acc@4096", "FAIL", "not_shown_within", suite="needle/needle", reason="bound -0.15")
    d = decide(_subject([*gates, straddles], verdict="FAIL"))
    assert d.because == ("needle/needle/acc@4096 FAIL (not shown within the margin): bound -0.15; 1 more gate(s) "
                         "not passed")
    # a campaign with no quality gate shows nothing safe
    assert decide(_subject([_kv_rule(2.0, "PASS")])).because == "no quality gate judged it"


def test_quality_within_but_the_capacity_rule_not_met():
    d = decide(_subject([*QUALITY, _kv_rule(1.0, "FAIL")], verdict="FAIL",
                        figures={**DOUBLED, "kv_cache_tokens": 372_816.0}))
    assert d.outcome == "gain_not_shown"
    assert d.text().startswith(
        "kv-fp8 (changes: kv_cache_dtype auto -> fp8): within every quality margin, but its gain is not shown — "
        "perf/kv_cache_tokens FAIL (ratio misses its bound): ratio 1.000 (>= 1.8x required); KV capacity 1.00x")


def test_not_evaluated_and_a_weights_change_on_top():
    assert decide(_subject([], verdict="NOT_EVALUATED")).outcome == "not_evaluated"
    d = decide(_subject([], verdict="NOT_EVALUATED", error="engine not healthy"))
    assert d.text() == "kv-fp8 (changes: kv_cache_dtype auto -> fp8): not evaluated — engine not healthy"
    both = Subject(name="int8-kv-fp8", verdict="PASS", changes=("weights", "kv_cache"), serving_diff=FP8,
                   gates=QUALITY, figures={**DOUBLED, "weights_bytes": 160e6}, base_figures=BASE)
    assert decide(both).text().startswith("int8-kv-fp8 (changes: weights; kv_cache_dtype auto -> fp8): may be")
    assert decide(both).figures.endswith("; weights 0.59x")
    no_kv = decide(_subject(QUALITY, figures={}))
    assert no_kv.figures == "KV capacity not measured"


def _record(verdicts: dict[str, str], gates: list[GateResult]) -> RunRecord:
    variants = [VariantResult(name="bf16", method="bf16", role="baseline", kv_cache_tokens=372_816,
                              weights_bytes=269_000_000),
                VariantResult(name="kv-fp8", method="bf16", role="variant", kv_cache_tokens=745_648,
                              weights_bytes=269_000_000, changes=["kv_cache"], serving_diff=list(FP8)),
                VariantResult(name="w8", method="int8", role="variant", kv_cache_tokens=380_000,
                              weights_bytes=160_000_000, changes=["weights"]),
                VariantResult(name="flash", method="bf16", role="variant", changes=["serving"],
                              serving_diff=["attention_backend unset -> FLASHINFER"], status="error",
                              error="engine not healthy")]
    return RunRecord(run_id="r", campaign="kv", config_hash="h", config={"gates": {"recommend": {"by": "kv_capacity"}}},
                     config_file="kv.yaml", command=[], started_at="now", variants=variants, verdicts=verdicts,
                     gates=gates)


def test_a_record_decides_for_its_kv_and_serving_variants_only():
    gates = [*QUALITY, *(g.model_copy(update={"variant": "w8"}) for g in QUALITY)]
    r = _record({"kv-fp8": "PASS", "w8": "PASS", "flash": "NOT_EVALUATED"}, gates)
    out = for_record(r)
    assert [(d.variant, d.outcome) for d in out] == [("kv-fp8", "turn_on"), ("flash", "not_evaluated")]
    assert out[1].text() == ("flash (changes: attention_backend unset -> FLASHINFER): not evaluated — engine not "
                             "healthy")
    # ranked by KV capacity, the FP8 KV cache is recommended over the int8 weights
    rec = recommendation(r)
    assert rec.by == "kv_capacity" and rec.chosen.name == "kv-fp8"
    assert rec.text() == ("Recommended: kv-fp8 (the most KV cache tokens among the 2 variant(s) that pass every "
                          "gate): weights 257 MiB, output tok/s at the SLO -, KV cache 745,648 tokens")


def test_recommend_by_kv_capacity_ties_go_to_the_weights():
    cands = [Candidate("kv", "PASS", 200.0, kv_cache_tokens=700.0), Candidate("w8kv", "PASS", 100.0,
                                                                            kv_cache_tokens=700.0),
             Candidate("w8", "PASS", 100.0, kv_cache_tokens=380.0)]
    assert recommend(cands, by="kv_capacity").chosen.name == "w8kv"
    assert recommend([Candidate("a", "PASS"), Candidate("b", "PASS")], by="kv_capacity").unranked
