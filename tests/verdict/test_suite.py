"""judge_suite: one suite of one variant against the baseline, from its paired scores and the policy. The
driver and a running variant's monitor both ask it, so it must be what comparing each metric and looking at
the suite's sequential gates give, metric by metric."""

from __future__ import annotations

import numpy as np
import pytest

from qeval.record.metrics import UNDECLARED, continuous, indicator
from qeval.verdict.comparison import compare_metric
from qeval.verdict.pairing import Paired
from qeval.verdict.policy import GatePolicy, GateRule, SequentialSpec
from qeval.verdict.rules import rule_for
from qeval.verdict.sequential import look_at_suite, suite_order
from qeval.verdict.suite import SuiteJudgement, judge_suite

DECLARED = {"contains": indicator("test"), "f1": continuous(True, "test")}


def _paired(n: int, wrong: float, seed: int = 0, groups: bool = False) -> Paired:
    """n items whose baseline is right 80% of the time; the variant loses `wrong` of the baseline's rights."""
    rng = np.random.default_rng(seed)
    base = (rng.random(n) < 0.8).astype(float)
    cand = np.where((base == 1) & (rng.random(n) < wrong), 0.0, base)
    f1b = rng.random(n)
    ids = [f"i{k:04d}" for k in range(n)]
    return Paired(ids=ids, groups=[f"g{k // 4}" if groups else None for k in range(n)],
                  base={"contains": base, "f1": f1b}, cand={"contains": cand, "f1": f1b - 0.01 * rng.random(n)},
                  unpaired_base=[], unpaired_cand=[])


def _prefix(p: Paired, keep: set[str]) -> Paired:
    """The pairs of `keep` only: what a variant has stored at a pause."""
    take = [k for k, i in enumerate(p.ids) if i in keep]
    return Paired(ids=[p.ids[k] for k in take], groups=[p.groups[k] for k in take],
                  base={m: a[take] for m, a in p.base.items()}, cand={m: a[take] for m, a in p.cand.items()},
                  unpaired_base=p.unpaired_base, unpaired_cand=p.unpaired_cand)


def _judge(policy: GatePolicy, p: Paired, planned: Paired | None = None, **kw) -> SuiteJudgement:
    planned = planned or p
    means = {m: float(a.mean()) for m, a in planned.base.items()}
    args = dict(planned_ids=planned.ids, planned_groups=planned.groups, base_means=means)
    return judge_suite(policy, 7, "q", "custom/s", "key-s", kw.pop("primary", "contains"), DECLARED, p,
                       **{**args, **kw})


def _same(a, b) -> bool:
    return repr(a) == repr(b)  # NaN-safe: a betting gate's bounds are NaN


def test_a_fixed_n_policy_gives_each_metrics_comparison_and_no_look():
    policy = GatePolicy(rules=[GateRule(match="*/f1", margin=0.02), GateRule(match="custom/*/contains")])
    p = _paired(120, 0.05)
    j = _judge(policy, p)
    assert [c.metric for c in j.comparisons] == ["contains", "f1"]
    assert [c.primary for c in j.comparisons] == [True, False]
    for c in j.comparisons:
        direct = compare_metric("q", "custom/s", c.metric, c.primary, p, rule_for(policy, "custom/s", c.metric),
                                policy, spec=DECLARED[c.metric])
        assert _same(c, direct)
    assert j.sequential == {} and j.look is None and j.keyed == {}


def test_the_primary_defaults_to_the_first_metric_and_an_undeclared_metric_is_compared_as_such():
    p = _paired(60, 0.0)
    p.base["zz"], p.cand["zz"] = p.base["f1"], p.cand["f1"]
    j = _judge(GatePolicy(), p, primary=None)
    assert [(c.metric, c.primary) for c in j.comparisons] == [("contains", True), ("f1", False), ("zz", False)]
    assert j.comparisons[2].higher_is_better is None  # not declared: never guessed
    assert _same(j.comparisons[2], compare_metric("q", "custom/s", "zz", False, p, GateRule(), GatePolicy(),
                                                  spec=UNDECLARED))


def test_compared_picks_and_orders_the_metrics():
    p = _paired(60, 0.0)
    j = _judge(GatePolicy(), p, compared=("f1",))
    assert [(c.metric, c.primary) for c in j.comparisons] == [("f1", False)]


def test_a_pairing_the_gates_do_not_read_has_no_primary_and_no_look():
    policy = GatePolicy(sequential=SequentialSpec(look_every=50, min_items=50))
    j = _judge(policy, _paired(200, 0.4), gated=False)
    assert [c.primary for c in j.comparisons] == [False, False]
    assert j.look is None and j.sequential == {}


def test_nothing_paired_is_nothing_judged():
    empty = Paired(ids=[], groups=[], base={}, cand={}, unpaired_base=["a"], unpaired_cand=[])
    policy = GatePolicy(sequential=SequentialSpec(look_every=50, min_items=50))
    j = judge_suite(policy, 0, "q", "custom/s", "k", None, DECLARED, empty, planned_ids=["a"], planned_groups=[None],
                    base_means={})
    assert j == SuiteJudgement("q", "custom/s")


@pytest.mark.parametrize("method", ["gsd", "betting"])
def test_a_sequential_look_is_the_look_at_the_suites_seeded_order(method):
    policy = GatePolicy(rules=[GateRule(match="*", margin=0.05)],
                        sequential=SequentialSpec(method=method, look_every=50, min_items=50))
    planned = _paired(200, 0.5, seed=3)
    order, groups = suite_order(planned.ids, planned.groups, 7, "key-s")
    stored = _prefix(planned, set(order[:110]) | {order[150]})  # a look reads the complete prefix only
    j = _judge(policy, stored, planned)
    means = {m: float(a.mean()) for m, a in planned.base.items()}
    look = look_at_suite(policy, "custom/s", "contains", DECLARED, stored, order, groups, means)
    assert _same(j.look, look)
    assert set(j.sequential) == {"contains"}  # f1 is neither primary nor named by a rule
    assert j.keyed == {("q", "custom/s", "contains"): j.sequential["contains"]}
    assert j.sequential["contains"].items_used <= 110 and j.sequential["contains"].n_planned == 200
    assert j.look.failed == ["contains"] and j.look.settled  # a variant this much worse is decided early


def test_a_fixed_n_rule_beside_a_sequential_one_is_looked_at_but_not_decided():
    policy = GatePolicy(rules=[GateRule(match="*", margin=0.05, sequential=SequentialSpec(look_every=50, min_items=50)),
                               GateRule(match="*/f1", margin=0.02)])
    j = _judge(policy, _paired(200, 0.5, seed=3))
    assert set(j.look.results) == {"contains", "f1"} and j.look.results["f1"] is None
    assert set(j.sequential) == {"contains"} and not j.look.settled


def test_groups_keep_together_in_the_order_the_look_reads():
    policy = GatePolicy(rules=[GateRule(match="*", margin=0.05)],
                        sequential=SequentialSpec(look_every=50, min_items=50))
    p = _paired(200, 0.1, seed=5, groups=True)
    j = _judge(policy, p)
    assert j.comparisons[0].n_groups == 50
    order, groups = suite_order(p.ids, p.groups, 7, "key-s")
    means = {m: float(a.mean()) for m, a in p.base.items()}
    assert _same(j.look, look_at_suite(policy, "custom/s", "contains", DECLARED, p, order, groups, means))


def test_an_item_asked_differently_of_two_variants_is_bad_input():
    from qeval.errors import EXIT_USAGE
    from qeval.record.store import Record
    from qeval.verdict.pairing import PairingError, align

    base = [Record(item_id="1", scores={"acc": 1.0}, prompt_hash="aaaa")]
    with pytest.raises(PairingError, match="different prompt_hash") as e:
        align("s", base, [Record(item_id="1", scores={"acc": 1.0}, prompt_hash="bbbb")])
    assert e.value.exit_code == EXIT_USAGE
