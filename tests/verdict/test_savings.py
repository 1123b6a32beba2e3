"""What sequential gates saved, from the record alone: the items each variant's sequential suites evaluated
of those planned, a skipped suite counted whole (the baseline's count), and the engine time as an estimate
from the items the variant served (records reused from another campaign cost none)."""

from __future__ import annotations

import pytest

from qeval.record.run import GateResult, RunRecord, SuiteSummary, VariantResult
from qeval.verdict.savings import savings, short_method, stopped_at

GSD = "gsd (O'Brien-Fleming spending, 4 looks, futility 0.05)"


def _gate(variant: str, suite: str, verdict: str = "PASS", used: int | None = None, planned: int | None = None,
          method: str | None = GSD) -> GateResult:
    return GateResult(variant=variant, suite=suite, metric="m", rule="*", mode="noninferiority", margin=0.05,
                      margin_spec="0.05", alpha=0.05, beta=0.2, action="fail", verdict=verdict,
                      sequential=method if used is not None else None, items_used=used, items_planned=planned)


def _suite(suite: str, n: int, planned: int | None = None) -> SuiteSummary:
    return SuiteSummary(suite=suite, key=suite, n=n, primary="m", means={"m": 1.0}, planned=planned)


def _record(variants: list[VariantResult], gates: list[GateResult]) -> RunRecord:
    base = VariantResult(name="base", method="bf16", role="baseline",
                         suites=[_suite("a", 400), _suite("b", 300), _suite("c", 50)])
    return RunRecord(run_id="r", campaign="c", config_hash="h", config={}, config_file="c.yaml", command=[],
                     started_at="now", variants=[base, *variants], gates=gates)


def test_items_and_time_saved_per_variant_and_in_all():
    q = VariantResult(name="q", method="gptq", role="variant", eval_seconds=30.0,
                      suites=[_suite("a", 100, planned=400), _suite("c", 50)],  # c: a fixed-n suite, not counted
                      not_run={"b": "not run: gate a/m had already failed the variant"})
    w = VariantResult(name="w", method="int8", role="variant", eval_seconds=None,
                      suites=[_suite("a", 400), _suite("b", 300), _suite("c", 50)])
    rec = _record([q, w], [_gate("q", "a", "FAIL", 100, 400), _gate("q", "c", method=None),
                           _gate("q", "b", "NOT_RUN"), _gate("w", "a", "PASS", 400, 400)])
    s = savings(rec)
    assert [v.variant for v in s.variants] == ["q", "w"] and s.methods == (GSD,)
    q_items, w_items = s.variants
    assert [(x.suite, x.evaluated, x.planned, x.not_run) for x in q_items.suites] == [
        ("a", 100, 400, False), ("b", 0, 300, True)]  # b skipped: all 300 of the baseline's saved
    assert (q_items.evaluated, q_items.planned, q_items.saved) == (100, 700, 600)
    # 30 s for the 150 items q served (a and c): 0.2 s an item, times 600 saved
    assert q_items.seconds_saved == pytest.approx(120.0)
    # decided only at the last item: counted, nothing saved; no eval_seconds, no estimate
    assert (w_items.evaluated, w_items.planned, w_items.saved, w_items.seconds_saved) == (400, 400, 0, None)
    assert (s.evaluated, s.planned, s.saved) == (500, 1100, 600) and s.seconds_saved == pytest.approx(120.0)


def test_reused_records_cost_no_engine_time():
    q = VariantResult(name="q", method="gptq", role="variant", eval_seconds=10.0, reused={"a": 50},
                      suites=[_suite("a", 100, planned=400)])
    [v] = savings(_record([q], [_gate("q", "a", "FAIL", 100, 400)])).variants
    assert v.seconds_per_item == pytest.approx(10.0 / 50) and v.seconds_saved == pytest.approx(300 * 0.2)


def test_fixed_n_gates_save_nothing_and_say_nothing():
    q = VariantResult(name="q", method="gptq", role="variant", eval_seconds=10.0, suites=[_suite("a", 400)])
    s = savings(_record([q], [_gate("q", "a", "FAIL")]))
    assert not s and s.saved == 0 and s.seconds_saved is None


def test_the_verdict_says_where_a_sequential_gate_stopped():
    g = _gate("q", "a", "FAIL", 100, 400)
    assert short_method(g) == "gsd"
    assert stopped_at(g) == "FAIL at 100 of 400 items (gsd)"
    assert stopped_at(_gate("q", "a", "FAIL", 1200, 4000, method="betting (e-values)")) == \
        "FAIL at 1,200 of 4,000 items (betting)"
    assert stopped_at(_gate("q", "a", "PASS")) == "PASS"  # fixed n: the verdict alone
    assert stopped_at(_gate("q", "b", "NOT_RUN")) == "NOT_RUN"
    # with its finding, the verdict says what the data showed
    worse = _gate("q", "a", "FAIL", 100, 400).model_copy(update={"finding": "shown_worse"})
    assert stopped_at(worse) == "FAIL (worse than the margin) at 100 of 400 items (gsd)"
    futile = _gate("q", "a", "FAIL", 100, 400).model_copy(update={"finding": "futile"})
    assert stopped_at(futile).startswith("FAIL (stopped for futility: a pass at the full n had become unlikely) at 100")


def test_a_suite_cut_part_way_by_a_failed_gate_counts_once():
    """lm-eval runs a variant's tasks batch by batch together: when one task's gate fails the variant, the
    others stop with the batches they have; such a suite has records and is NOT_RUN, and counts once (counted
    twice, a GPU run would say 895 items planned of 695)."""
    q = VariantResult(name="q", method="fp8", role="variant", eval_seconds=20.0,
                      suites=[_suite("a", 100, planned=400), _suite("b", 100, planned=300)],
                      not_run={"b": "not run: gate a/m had already failed the variant"})
    [v] = savings(_record([q], [_gate("q", "a", "FAIL", 100, 400), _gate("q", "b", "NOT_RUN")])).variants
    assert [(x.suite, x.evaluated, x.planned, x.not_run) for x in v.suites] == [
        ("a", 100, 400, False), ("b", 100, 300, True)]
    assert (v.evaluated, v.planned, v.saved) == (200, 700, 500)
