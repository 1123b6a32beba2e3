"""What sequential gates saved: per variant, the items its sequential suites evaluated of the items they
planned, and an estimate of the engine time the rest would have taken. Pure: the record in, frozen answers
out, so the CLI, the reports, JUnit and MLflow all give the same figures.

A suite counts when a sequential gate read it, when sequential gates stopped it before its last item
(`SuiteSummary.planned`), or when it was not run because a gate had already failed the variant
(`VariantResult.not_run`: all its items saved; how many it had is the baseline's count of that suite).
The time is an estimate: the variant's `eval_seconds` per item it served, times the items saved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .findings import label

if TYPE_CHECKING:
    from ..record.run import GateResult, RunRecord, VariantResult


@dataclass(frozen=True)
class SuiteItems:
    suite: str
    evaluated: int
    planned: int
    not_run: bool = False

    @property
    def saved(self) -> int:
        return self.planned - self.evaluated


@dataclass(frozen=True)
class VariantItems:
    variant: str
    suites: tuple[SuiteItems, ...]
    seconds_per_item: float | None = None  # eval_seconds over the items it served (None: not measured)

    @property
    def evaluated(self) -> int:
        return sum(s.evaluated for s in self.suites)

    @property
    def planned(self) -> int:
        return sum(s.planned for s in self.suites)

    @property
    def saved(self) -> int:
        return sum(s.saved for s in self.suites)

    @property
    def seconds_saved(self) -> float | None:
        """An estimate: as if each item saved had cost what the variant's items cost on average."""
        return None if self.seconds_per_item is None else self.seconds_per_item * self.saved


@dataclass(frozen=True)
class Savings:
    variants: tuple[VariantItems, ...]  # in campaign order, those with a sequential or not-run suite
    methods: tuple[str, ...]  # each sequential gate's method, once

    @property
    def evaluated(self) -> int:
        return sum(v.evaluated for v in self.variants)

    @property
    def planned(self) -> int:
        return sum(v.planned for v in self.variants)

    @property
    def saved(self) -> int:
        return sum(v.saved for v in self.variants)

    @property
    def seconds_saved(self) -> float | None:
        """The estimates summed over the variants that measured their time (None: none did)."""
        known = [v.seconds_saved for v in self.variants if v.seconds_saved is not None]
        return sum(known) if known else None

    def __bool__(self) -> bool:
        return bool(self.variants)


def short_method(g: "GateResult") -> str:
    """The method's name without its parameters: "gsd" of "gsd (O'Brien-Fleming spending, 4 looks, ...)"."""
    return (g.sequential or "").split(" (", 1)[0]


def stopped_at(g: "GateResult", inconclusive: str | None = None) -> str:
    """A gate's verdict with its finding (findings.label) and, for a sequential one, where it stopped:
    "FAIL (worse than the margin) at 100 of 400 items (gsd)"."""
    said = label(g, inconclusive)
    if g.sequential is None or g.items_used is None or g.items_planned is None:
        return said
    return f"{said} at {g.items_used:,} of {g.items_planned:,} items ({short_method(g)})"


def _variant(r: "RunRecord", v: "VariantResult", base_n: dict[str, int]) -> VariantItems | None:
    sequential = {g.suite for g in r.gates if g.variant == v.name and g.sequential is not None}
    not_run = set(v.not_run)
    # a suite cut part-way because a gate failed the variant has records and is not run: counted once
    suites = [SuiteItems(s.suite, s.n, s.planned or base_n.get(s.suite, s.n), not_run=s.suite in not_run)
              for s in v.suites if s.suite in sequential or s.planned is not None or s.suite in not_run]
    seen = {s.suite for s in suites}
    suites += [SuiteItems(suite, 0, base_n[suite], not_run=True) for suite in v.not_run
               if suite in base_n and suite not in seen]
    if not suites:
        return None
    served = sum(s.n for s in v.suites) - sum(v.reused.values())  # reused records cost no engine time
    rate = v.eval_seconds / served if v.eval_seconds is not None and served > 0 else None
    return VariantItems(v.name, tuple(suites), rate)


def savings(r: "RunRecord") -> Savings:
    base = next((v for v in r.variants if v.role == "baseline"), None)
    base_n = {s.suite: s.n for s in (base.suites if base else [])}
    found = (_variant(r, v, base_n) for v in r.variants if v.role == "variant")
    methods = dict.fromkeys(g.sequential for g in r.gates if g.sequential is not None)
    return Savings(tuple(x for x in found if x is not None), tuple(methods))
