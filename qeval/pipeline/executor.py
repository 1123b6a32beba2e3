"""The executor seam: given variant plans, yield their outcomes as they finish.

The pipeline never knows where a variant runs; the campaign file picks an executor kind
(`executor: {kind: local}`), and a kind registered in EXECUTORS (executors/spec.py; a plugin's through the entry
point group `qeval.executors`) brings its own spec, so Ray is added beside `local` without touching the pipeline.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Iterator, Protocol, Sequence

from ..executors.spec import EXECUTORS, ExecutorSpec, LocalExecutorSpec

if TYPE_CHECKING:
    from ..progress import Reporter
    from .plan import VariantPlan
    from .sink import RecordSink
    from .variant import VariantOutcome


class Executor(Protocol):
    Spec: ClassVar[type[ExecutorSpec]]

    def __init__(self, spec: ExecutorSpec, max_seconds: float | None = None) -> None: ...

    def check(self, plans: Sequence["VariantPlan"]) -> None:
        """Refuse, before anything is written, what this executor cannot run (ConfigError; QevalError when
        where it runs cannot be reached)."""
        ...

    def run(self, plans: Sequence["VariantPlan"], workspace: Path, sink: "RecordSink",
            reporter: "Reporter") -> Iterator["VariantOutcome"]:
        """Each plan's outcome, as it finishes. The first plan is the baseline."""
        ...


@EXECUTORS.register("local")
class LocalExecutor:
    """Today's way: one variant after another in this process. With `max_seconds`, no variant after the
    baseline starts once that much time has passed: it is reported skipped (never PASS), a rerun resumes it."""

    Spec = LocalExecutorSpec

    def __init__(self, spec: ExecutorSpec | None = None, max_seconds: float | None = None):
        self.spec, self.max_seconds = spec or LocalExecutorSpec(), max_seconds

    def check(self, plans: Sequence["VariantPlan"]) -> None:
        pass  # this machine runs whatever the plan step accepted

    def run(self, plans: Sequence["VariantPlan"], workspace: Path, sink: "RecordSink",
            reporter: "Reporter") -> Iterator["VariantOutcome"]:
        from .monitor import Reference
        from .variant import run_variant

        t0 = time.monotonic()
        reference = None  # the baseline's records, which gates that look while a variant runs pair with
        for p in plans:
            if p.role != "baseline" and self.max_seconds is not None and time.monotonic() - t0 > self.max_seconds:
                yield budget_spent(p.name, self.max_seconds, reporter)
                continue
            out = run_variant(p, workspace, sink, reporter, reference=reference)
            if p.role == "baseline" and out.status == "ok" and any(q.gates is not None for q in plans):
                reference = Reference.read(sink, out.key, p)
            yield out


def not_evaluated(name: str, error: str, reporter: "Reporter", status: str = "error") -> "VariantOutcome":
    """A variant an executor did not (or could not) evaluate: said in the log, and its outcome."""
    from .variant import VariantOutcome

    reporter.log(f"[{name}] NOT EVALUATED: {error}")
    return VariantOutcome(name=name, status=status, error=error)


def budget_spent(name: str, max_seconds: float, reporter: "Reporter") -> "VariantOutcome":
    """Not started because the run's time budget is spent: skipped (never PASS); a rerun resumes it."""
    return not_evaluated(name, f"not started: the run's time budget ({max_seconds:.0f} s) was spent; run the "
                               "same command again to resume", reporter, status="skipped")


def make_executor(spec: ExecutorSpec, max_seconds: float | None = None) -> Executor:
    return EXECUTORS.get(spec.kind)(spec, max_seconds)

