"""Before a run: how many items each suite has and the smallest drop it can detect."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .plan import Plan
from ..config import CampaignConfig
from ..stats import clustered, design_effect, mde, n_required, n_required_clustered
from ..stats.power import BINARY_PLANNING_VAR
from ..verdict.policy import GateRule
from ..verdict.rules import rule_for


@dataclass(frozen=True)
class SuitePlan:
    suite: str
    metric: str
    n: int
    rule: GateRule
    margin_note: str
    mde_worst: float  # no pilot: the binary planning variance
    mde_assumed: float  # at the assumed flip rate
    n_needed: int  # for the margin, at the assumed flip rate

    @property
    def supports(self) -> bool:
        return self.mde_assumed <= self.rule.margin


def plan_power(cfg: CampaignConfig, p: Plan, data_dir: Path, flip_rate: float | None = None) -> list[SuitePlan]:
    """Planning sigma: sqrt(flip rate) (a 0/1 difference with that discordance has at most that variance),
    the flip rate being the gate rule's planning_flip_rate unless overridden; and the no-pilot worst
    case, sqrt(0.5). The gates use the same design figure after the run."""
    out = []
    for suite, metric, n, groups in (e for s in p.suites for e in s.sizes(data_dir)):
        rule = rule_for(cfg.gates, suite, metric) or GateRule()
        worst = mde(n, math.sqrt(BINARY_PLANNING_VAR), rule.alpha, rule.beta).mde
        rate = flip_rate if flip_rate is not None else rule.planning_flip_rate
        assumed = mde(n, math.sqrt(rate), rule.alpha, rule.beta).mde
        note = f"{rule.margin:.0%} of baseline" if rule.relative else f"{rule.margin:g}"
        needed = n_required(rule.margin, math.sqrt(rate), rule.alpha, rule.beta, binary=True)
        sizes = np.unique(groups, return_counts=True)[1] if groups else None
        if sizes is not None and len(sizes) > 1 and rule.planning_icc is not None:
            # items in groups: the same plan counted in groups, as the gate will (design effect, G - 1 df)
            deff, df = design_effect(sizes, rule.planning_icc), len(sizes) - 1
            worst, assumed = (clustered(mde(n, sd, rule.alpha, rule.beta), deff, df, len(sizes)).mde
                              for sd in (math.sqrt(BINARY_PLANNING_VAR), math.sqrt(rate)))
            needed = n_required_clustered(rule.margin, math.sqrt(rate), round(n / len(sizes)), rule.planning_icc,
                                          rule.alpha, rule.beta)
        out.append(SuitePlan(suite=suite, metric=metric, n=n, rule=rule, margin_note=note, mde_worst=worst,
                             mde_assumed=assumed, n_needed=needed))
    return out


def as_json(plans: list[SuitePlan]) -> str:
    return json.dumps([{"suite": s.suite, "metric": s.metric, "n": s.n, "margin": s.margin_note,
                        "alpha": s.rule.alpha, "beta": s.rule.beta, "mde_worst_case": s.mde_worst,
                        "mde_assumed": s.mde_assumed, "n_needed": s.n_needed, "supports_margin": s.supports}
                       for s in plans], indent=1)
