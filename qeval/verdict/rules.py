"""The policy's queries: which rule gates a metric, whether a rule names it, which direction is better, and
which of a suite's metrics a gate reads. The gate evaluator and the sequential looks both ask them here, so
the two always pick the same metrics under the same rules."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from ..record.metrics import MetricSpec
    from ..record.run import Comparison
    from .policy import GatePolicy, GateRule


def rule_for(policy: "GatePolicy", suite: str, metric: str) -> "GateRule | None":
    """The last rule whose glob matches "suite/metric" wins, so specific rules follow general ones."""
    hits = [r for r in policy.rules if fnmatchcase(f"{suite}/{metric}", r.match)]
    return hits[-1] if hits else None


def _direction(rule: "GateRule", higher_is_better: bool | None) -> str | None:
    if rule.direction is not None:
        return rule.direction
    return None if higher_is_better is None else ("higher" if higher_is_better else "lower")


def direction_of(rule: "GateRule", c: "Comparison") -> str | None:
    """The rule's direction, else the one the metric's definition declares (None: neither says)."""
    return _direction(rule, c.higher_is_better)


def direction_of_spec(rule: "GateRule", spec: "MetricSpec") -> str | None:
    """direction_of, for a metric known by its declaration alone (before any comparison is made)."""
    return _direction(rule, spec.higher_is_better)


def named_by_a_rule(policy: "GatePolicy", suite: str, metric: str) -> bool:
    """A rule names a metric when its pattern's last part is that metric, e.g. "logprobs/*/top1": then
    the metric is gated even where it is not its suite's primary one."""
    return any(r.match.rsplit("/", 1)[-1] == metric and fnmatchcase(f"{suite}/{metric}", r.match)
               for r in policy.rules)


def gated_metrics(policy: "GatePolicy", suite: str, metrics: Sequence[str], primary: str | None) -> list[tuple[str, "GateRule"]]:
    """The suite's metrics a gate reads, with its rule, as gates.evaluate picks them: the primary metric,
    and any metric a rule names."""
    out = []
    for m in metrics:
        if m != (primary or metrics[0]) and not named_by_a_rule(policy, suite, m):
            continue
        rule = rule_for(policy, suite, m)
        if rule is not None:
            out.append((m, rule))
    return out
