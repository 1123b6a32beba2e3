"""Sequential gates over stored records: the order every variant evaluates a suite in, where its run
pauses to look, and each sequential rule's verdict from the items evaluated so far.

Pure: paired scores in, results out. A variant's run (pipeline/monitor.py) looks at each pause, through
suite.judge_suite, to decide whether to go on; the driver (pipeline/judge.py) asks the same function once
on what was stored and reaches the same verdict, because both read the same order, the same looks and the
same design from the same records. The design quantities a sequential gate needs (the MDE that makes it
INCONCLUSIVE, the sd that places its futility bound) are fixed at its first look, so later items never change
an earlier look.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from ..hashing import stable_hash
from .pairing import Paired
from .rules import direction_of_spec, gated_metrics

if TYPE_CHECKING:
    from ..record.metrics import MetricSpec
    from ..stats.sequential import SequentialResult
    from .policy import GatePolicy, GateRule, SequentialSpec


def evaluation_order(ids: Sequence[str], groups: Sequence[str | None], seed: int, salt: str) -> tuple[str, ...]:
    """The seeded order every variant evaluates a suite's items in (pairing holds at every look): groups
    are shuffled as wholes and their items kept together by id, so that no look splits a group."""
    by_group: dict[str, list[str]] = {}
    for i, g in zip(ids, groups):
        by_group.setdefault(i if g is None else f"group:{g}", []).append(i)
    units = sorted(by_group)
    rng = np.random.default_rng(int(stable_hash([seed, salt]), 16))
    return tuple(i for u in rng.permutation(len(units)) for i in sorted(by_group[units[u]]))


def prefix_length(order: Sequence[str], have: set[str]) -> int:
    """How many items from the start of the order are all there: the items a look may read."""
    for k, i in enumerate(order):
        if i not in have:
            return k
    return len(order)


def unfit(seq: "SequentialSpec", spec: "MetricSpec", grouped: bool) -> str | None:
    """Why the sequential method cannot gate a metric so declared (None: it can). A betting sequence needs 0/1
    scores (its bound is 1) and independent items."""
    if seq.method != "betting":
        return None
    why = "its items carry groups" if grouped else None if spec.binary else "its scores are not 0/1"
    return f"the betting sequence cannot gate it ({why}); use method gsd" if why else None


def pauses(policy: "GatePolicy", rules: Sequence["GateRule"], order_groups: Sequence[str | None],
           n: int) -> tuple[int, ...]:
    """Every item count at which some sequential rule of the suite looks (each moved to a group's end)."""
    from ..stats.sequential import cluster_looks, look_schedule

    out: set[int] = set()
    for r in rules:
        seq = policy.sequential_of(r)
        if seq is None:
            continue
        looks = look_schedule(n, seq.look_every, seq.min_items)
        if any(g is not None for g in order_groups):
            looks = cluster_looks(order_groups, looks)
        out.update(looks)
    return tuple(sorted(out))


def sequential_result(policy: "GatePolicy", rule: "GateRule", spec: "MetricSpec", d_raw: np.ndarray,
                      order_groups: Sequence[str | None], base_mean: float) -> "SequentialResult | None":
    """The rule's sequential verdict from the raw differences (variant - baseline) of the items evaluated
    so far, in the evaluation order; `order_groups` is every planned item's group in that order (its
    length is the planned n). None: the rule is a fixed-n one, or no direction is declared."""
    from ..stats import clustered_mean_delta, planned_power
    from ..stats.sequential import betting_gate, cluster_looks, gsd_gate, look_schedule

    seq = policy.sequential_of(rule)
    direction = direction_of_spec(rule, spec)
    if seq is None or direction is None:
        return None
    n = len(order_groups)
    d = (1.0 if direction == "higher" else -1.0) * np.asarray(d_raw, float)
    margin = rule.margin * abs(base_mean) if rule.relative else rule.margin
    grouped = any(g is not None for g in order_groups)
    groups = list(order_groups) if grouped else None
    looks = look_schedule(n, seq.look_every, seq.min_items)
    first = cluster_looks(order_groups, looks)[0] if grouped else looks[0]
    mde = plan_sd = None
    if len(d) >= first:  # the design, fixed from what the first look saw (see the module doc)
        y = d[:first]
        sd_obs = float(y.std(ddof=1)) if first > 1 else math.inf
        item_sd = math.sqrt(rule.planning_flip_rate) if spec.binary else (rule.planning_sd or sd_obs)
        inflation = 1.0
        if grouped:  # grouped items carry less information: the sd of their mean as the clustered se sees it
            se = clustered_mean_delta(np.zeros(first), y, [str(g) for g in groups[:first]]).se
            if sd_obs > 0 and math.isfinite(se):
                inflation = max(se * math.sqrt(first) / sd_obs, 1.0)
        plan_sd = item_sd * inflation
        mde = planned_power(n, spec.binary, rule.alpha, rule.beta, rule.planning_flip_rate, rule.planning_sd,
                            observed_sd=sd_obs).mde * inflation
    if seq.method == "betting":
        return betting_gate(d, n, margin, rule.alpha, look_every=seq.look_every, min_items=seq.min_items,
                            mde=mde, groups=groups)
    res = gsd_gate(d, n, margin, rule.alpha, look_every=seq.look_every, min_items=seq.min_items,
                   binary=spec.binary and not grouped, planning_sd=plan_sd if plan_sd is not None else 1.0,
                   futility=seq.futility_spend, mde=mde, groups=groups)
    return res if spec.binary or grouped or policy.interval != "auto" else heavy_tail_held(res, d, n)


def heavy_tail_held(res: "SequentialResult", d: np.ndarray, n: int) -> "SequentialResult":
    """A gsd PASS on continuous differences stands where the t interval keeps alpha at the skew of the items it
    read (qeval/stats/tails.py: gsd reads the same statistic). Past that: UNDECIDED until the full n, so that the
    suite runs on, then INCONCLUSIVE, since a later look would be a second try at a design that already passed."""
    import dataclasses

    from ..stats.tails import choose_interval

    if res.verdict != "PASS":
        return res
    choice = choose_interval(d[:res.items_used])
    if choice.method == "paired-t":
        return res
    if len(d) < n:
        return dataclasses.replace(res, verdict="UNDECIDED", reason=f"{choice.reason}; the suite runs on")
    return dataclasses.replace(res, verdict="INCONCLUSIVE", reason=choice.reason.replace(
        "no method keeps alpha", "the sequential gate's normal statistic does not keep alpha"))


@dataclass(frozen=True)
class SuiteLook:
    """One suite of one variant at one look: each gated metric's sequential result (None: a fixed-n rule)."""

    results: Mapping[str, "SequentialResult | None"] = field(default_factory=dict)
    actions: Mapping[str, str] = field(default_factory=dict)  # per metric, its rule's action

    @property
    def settled(self) -> bool:
        """Every gate of the suite is sequential and decided: the suite may stop."""
        return bool(self.results) and all(r is not None and r.verdict != "UNDECIDED" for r in self.results.values())

    @property
    def failed(self) -> list[str]:
        """The metrics whose fail-action gate is decided FAIL."""
        return [m for m, r in self.results.items() if r is not None and r.verdict == "FAIL" and self.actions[m] == "fail"]


def in_order(p: Paired, order: Sequence[str]) -> tuple[Paired, int]:
    """The pairs of the order's complete prefix, in that order, and the prefix's length."""
    pos = {i: k for k, i in enumerate(p.ids)}
    t = prefix_length(order, set(pos))
    take = [pos[i] for i in order[:t]]
    return Paired(ids=[p.ids[k] for k in take], groups=[p.groups[k] for k in take],
                  base={m: a[take] for m, a in p.base.items()}, cand={m: a[take] for m, a in p.cand.items()},
                  unpaired_base=p.unpaired_base, unpaired_cand=p.unpaired_cand), t


def look_at_suite(policy: "GatePolicy", suite: str, primary: str | None, declared: Mapping[str, "MetricSpec"],
                  paired: Paired, order: Sequence[str], order_groups: Sequence[str | None],
                  base_means: Mapping[str, float]) -> SuiteLook:
    """Each gated metric's sequential result on the complete prefix of the order (pure)."""
    from ..record.metrics import UNDECLARED

    ordered, _ = in_order(paired, order)
    metrics = sorted(paired.base)
    results, actions = {}, {}
    for m, rule in gated_metrics(policy, suite, metrics, primary):
        d = ordered.cand[m] - ordered.base[m]
        results[m] = sequential_result(policy, rule, declared.get(m, UNDECLARED), d, order_groups, base_means[m])
        actions[m] = rule.action
    return SuiteLook(results, actions)


def suite_order(ids: Sequence[str], groups: Sequence[str | None], seed: int,
                suite_key: str) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    """The evaluation order of a suite's planned items, and each item's group in that order."""
    order = evaluation_order(ids, groups, seed, suite_key)
    group_of = dict(zip(ids, groups))
    return order, tuple(group_of[i] for i in order)
