"""One suite of one variant against the baseline: everything the statistics say about it, from its paired
scores and the policy. Pure: paired arrays in, a frozen judgement out.

The driver (pipeline/judge.py) calls it once on what was stored; a running variant's monitor
(pipeline/monitor.py) calls it at each pause of the suite. Both pair the records their own way (item by item,
or chunk by chunk for a logprobs suite) and then ask this one function, so a look while the suite runs and
the verdict afterwards are the same computation on the same pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

from ..record.metrics import UNDECLARED, MetricSpec
from ..record.run import Comparison
from .comparison import compare_metric
from .pairing import Paired
from .policy import GatePolicy, GateRule
from .rules import rule_for
from .sequential import SuiteLook, look_at_suite, suite_order

if TYPE_CHECKING:
    from ..stats.sequential import SequentialResult


@dataclass(frozen=True)
class SuiteJudgement:
    """The comparisons of one suite of one variant, the results of its gates that look while it runs, and
    the look they came from."""

    variant: str
    suite: str
    comparisons: tuple[Comparison, ...] = ()
    # per metric: the result of a sequential gate (a fixed-n rule's metric is absent)
    sequential: Mapping[str, "SequentialResult"] = field(default_factory=dict)
    look: SuiteLook | None = None  # None: no sequential gate read the suite

    @property
    def keyed(self) -> dict[tuple[str, str, str], "SequentialResult"]:
        """The sequential results keyed (variant, suite, metric), as gates.evaluate reads them."""
        return {(self.variant, self.suite, m): r for m, r in self.sequential.items()}


def judge_suite(policy: GatePolicy, seed: int, variant: str, suite: str, key: str, primary: str | None,
                declared: Mapping[str, MetricSpec], paired: Paired, *, planned_ids: Sequence[str],
                planned_groups: Sequence[str | None], base_means: Mapping[str, float],
                compared: Sequence[str] | None = None, gated: bool = True) -> SuiteJudgement:
    """Compare each metric of `paired` and, where the policy has sequential gates, look at them.

    `primary`: the metric the suite's gate reads (None: its first paired metric); `declared`: each metric as
    the suite declares it. `planned_ids`, `planned_groups`: the baseline's items of the suite, whose seeded
    order every look reads; `base_means`: the baseline's mean of each metric over them (a relative margin's
    scale), read only when a sequential gate looks. `compared`: the metrics to compare (None: every paired
    one, sorted). `gated`: whether the suite's gates read this pairing; a logprobs suite's per-item scores
    are compared for the report only (its gates read its chunks): no primary metric, no look.
    """
    metrics = sorted(paired.base)
    lead = primary or (metrics[0] if metrics else None)
    comparisons = tuple(
        compare_metric(variant, suite, m, gated and m == lead, paired, rule_for(policy, suite, m) or GateRule(),
                       policy, spec=declared.get(m, UNDECLARED))
        for m in (metrics if compared is None else compared))
    if not (gated and policy.sequential_in_use and metrics):
        return SuiteJudgement(variant, suite, comparisons)
    order, order_groups = suite_order(planned_ids, planned_groups, seed, key)
    look = look_at_suite(policy, suite, primary, declared, paired, order, order_groups, base_means)
    return SuiteJudgement(variant, suite, comparisons, {m: r for m, r in look.results.items() if r is not None}, look)
