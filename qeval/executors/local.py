"""The `local` executor: one variant after another in this process.

Placement is "here", retries none, and the budget shared (Budget): each unit runs in the driver's process
(Work.here) and every message it sends is merged, as it is sent, by the same Merge a remote executor's
stream goes through."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

from .base import Budget, DriverSink, Unit, Work
from .outcome import VariantOutcome
from .spec import EXECUTORS, ExecutorSpec, LocalExecutorSpec
from .stream import Merge

if TYPE_CHECKING:
    from ..progress import Reporter


@EXECUTORS.register("local")
class LocalExecutor:
    """With `max_seconds`, no variant after the baseline starts once that much time has passed: it is reported
    skipped (never PASS), a rerun resumes it."""

    Spec = LocalExecutorSpec

    def __init__(self, spec: ExecutorSpec | None = None, max_seconds: float | None = None):
        self.spec, self.max_seconds = spec or LocalExecutorSpec(), max_seconds

    def check(self, plans: Sequence[Unit]) -> None:
        pass  # this machine runs whatever the plan step accepted

    def run(self, plans: Sequence[Unit], work: Work, workspace: Path, sink: DriverSink,
            reporter: "Reporter") -> Iterator[VariantOutcome]:
        merge, budget = Merge(sink, reporter, workspace), Budget(self.max_seconds)
        for p in plans:
            if p.role != "baseline" and budget.spent():
                yield budget.skipped(p.name, reporter)
                continue
            # on this thread: an interrupt (KeyboardInterrupt) reaches the unit where it is, which stops its engine
            last = work.here(p, workspace, sink, merge, reporter, reference=sink.reference_for(p))
            yield merge(last)
