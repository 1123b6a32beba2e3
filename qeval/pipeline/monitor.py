"""What a variant's run watches while it runs: its suites in the seeded order, paused at the looks of their
sequential gates and stopped once every gate of the suite is decided; and, with `stop_variant_on_fail`,
the rest of its suites skipped once a gate has failed the variant.

Every decision is the one the driver reaches afterwards from the store (pipeline/judge.py: the same
functions on the same records), so stopping early never changes a verdict, only the items it costs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    from ..suites.base import Part
    from ..verdict.sequential import SuiteLook
    from .plan import VariantPlan
    from .sink import Pending, RecordSink, Reference


def batches(order: Sequence[str], pauses: Sequence[int]) -> list[list[str]]:
    """The order cut at each pause: what is evaluated before each look."""
    edges = [0, *pauses]
    return [list(order[a:b]) for a, b in zip(edges, edges[1:]) if b > a]


class Monitor:
    """One variant's looks. Off (every method a no-op) for the baseline, without a reference, or for a
    policy that neither looks while running nor stops on a failure."""

    def __init__(self, plan: "VariantPlan", reference: "Reference | Pending | None", sink: "RecordSink", vkey: str,
                 log: Callable[[str], None]):
        self.plan, self.sink, self.vkey, self.log = plan, sink, vkey, log
        self._reference = reference
        self.policy = plan.gates
        self._wants = plan.role == "variant" and self.policy is not None
        self.failed: str | None = None  # "suite/metric" of the first fail-action gate that FAILed
        self.not_run: dict[str, str] = {}  # per suite skipped after that, why

    @property
    def reference(self) -> Reference | None:
        """The baseline's records; a pending one is waited for here, at the first suite that needs it (so the
        variant is made and its engine started while the baseline still runs)."""
        if callable(self._reference):
            self._reference = self._reference()
        return self._reference

    def wait_for_reference(self) -> None:
        if self._wants:
            self.reference  # noqa: B018 (resolving it is the point)

    @property
    def on(self) -> bool:
        return self._wants and self.reference is not None

    # -- which suites run, and in which batches ------------------------------------------------
    def skip(self, sk: "Part") -> bool:
        """Whether this suite is skipped: a gate has already failed the variant (stop_variant_on_fail)."""
        if not (self.on and self.policy.stop_variant_on_fail and self.failed):
            return False
        if sk.suite not in self.not_run:  # asked again when the run goes on for its probe: said once
            self.not_run[sk.suite] = f"not run: gate {self.failed} had already failed the variant (stop_variant_on_fail)"
            self.log(f"[{self.plan.name}] {sk.suite}: {self.not_run[sk.suite]}")
        return True

    def batches(self, sk: "Part", ids: Sequence[str], groups: Sequence[str | None]) -> list[list[str]] | None:
        """The suite's items cut at the looks of its sequential gates; None: no sequential gate reads it."""
        from ..verdict.rules import gated_metrics
        from ..verdict.sequential import pauses, suite_order

        if not self.on or not self.policy.sequential_in_use:
            return None
        metrics = self._metrics(sk)
        rules = [r for _, r in gated_metrics(self.policy, sk.suite, metrics, self._primary(sk))] if metrics else []
        order, order_groups = suite_order(ids, groups, self.plan.seed, sk.key)
        cut = pauses(self.policy, rules, order_groups, len(order))
        return batches(order, cut) if cut else None

    def _metrics(self, sk: "Part") -> list[str]:
        if sk.gated is not None:
            return list(sk.gated)
        base = self.reference.records.get(sk.key, ()) if self.reference else ()
        return sorted(base[0].scores) if base else []

    @staticmethod
    def _primary(sk: "Part") -> str | None:
        return sk.gate_metric

    # -- looking ---------------------------------------------------------------------------------
    def _compare(self, sk: "Part") -> tuple[list, dict, "SuiteLook | None"]:
        """The part's comparisons so far, its sequential results, and the look of the view its gates read."""
        from .judge import judge_view

        base = list(self.reference.records.get(sk.key, ()))
        cand = self.sink.records(self.vkey, sk.key)
        if not base or not cand:
            return [], {}, None
        comparisons, sequential, look = [], {}, None
        # the views alone: a look reads no flips and no per-token figures
        for view in self.plan.suites.suite_of(sk).views(sk, base, cand):
            comps, seq, seen = judge_view(self.policy, self.plan.seed, self.plan.name, sk, view)
            comparisons, look = comparisons + comps, seen or look
            sequential.update(seq)
        return comparisons, sequential, look

    def look(self, sk: "Part") -> bool:
        """At a pause: True when the suite may stop (every gate of it decided, or one failed the variant
        under stop_variant_on_fail)."""
        if not self.on:
            return False
        _, _, look = self._compare(sk)
        if look is None:
            return False
        for m in look.failed:
            self.failed = self.failed or f"{sk.suite}/{m}"
        from ..verdict.findings import WORDS

        # "contains FAIL (worse than the margin) at 100 of 400": what the deciding look showed, as the reports say it
        done = [f"{m} {r.verdict}{'' if r.verdict == 'PASS' else f' ({WORDS[r.finding]})'} at {r.items_used} of "
                f"{r.n_planned}" for m, r in look.results.items() if r is not None and r.verdict != "UNDECIDED"]
        if look.settled:
            self.log(f"[{self.plan.name}] {sk.suite}: settled ({'; '.join(done)}): the rest is not evaluated")
            return True
        if look.failed and self.policy.stop_variant_on_fail:
            self.log(f"[{self.plan.name}] {sk.suite}: {', '.join(look.failed)} FAILed: stopping the variant")
            return True
        return False

    def finished(self, sk: "Part") -> None:
        """A suite ran to its end: with stop_variant_on_fail, its gates (fixed n now final) may fail the variant."""
        from ..verdict.gates import evaluate

        if not (self.on and self.policy.stop_variant_on_fail) or self.failed:
            return
        comps, seq, _ = self._compare(sk)
        gates = [g for g in evaluate(self.policy, comps, [self.plan.name], seq) if g.suite == sk.suite]
        failed = [g.metric for g in gates if g.verdict == "FAIL" and g.action == "fail"]
        if failed:
            self.failed = f"{sk.suite}/{failed[0]}"
            self.log(f"[{self.plan.name}] {self.failed} FAILed: the variant's remaining suites are skipped")

    def failed_already(self) -> bool:
        """Whether the suites already stored have failed the variant (a rerun then serves nothing more)."""
        if not (self._wants and self.policy.stop_variant_on_fail):
            return False
        stored = [sk for sk in self.plan.suites.parts() if self.sink.is_complete(self.vkey, sk.key)]
        if not stored or not self.on:  # nothing stored: no need to wait for a pending reference
            return False
        for sk in stored:
            self.finished(sk)
        return self.failed is not None
