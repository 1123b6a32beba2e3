"""The executor seam: given variant plans, yield their outcomes as they finish.

An executor only places: where each unit of work runs, how often it is tried again, and the run's time
budget (Budget, shared). What a unit sends back is merged by the stream's driver side (stream.Merge), and the
baseline's records the variants' looks pair with come from the driver's sink (sink.DriverSink): an executor
carries them, nothing more. The pipeline never knows where a variant runs; the campaign file picks an executor kind
(`executor: {kind: local}`), and a kind registered in EXECUTORS (executors/spec.py; a plugin's through the entry
point group `qeval.executors`) brings its own spec, so Ray is added beside `local` without touching the pipeline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Iterator, Protocol, Sequence

from ..executors.spec import EXECUTORS, ExecutorSpec, LocalExecutorSpec

if TYPE_CHECKING:
    from ..progress import Reporter
    from .plan import VariantPlan
    from .sink import DriverSink
    from .variant import VariantOutcome


class Executor(Protocol):
    Spec: ClassVar[type[ExecutorSpec]]

    def __init__(self, spec: ExecutorSpec, max_seconds: float | None = None) -> None: ...

    def check(self, plans: Sequence["VariantPlan"]) -> None:
        """Refuse, before anything is written, what this executor cannot run (ConfigError; QevalError when
        where it runs cannot be reached)."""
        ...

    def run(self, plans: Sequence["VariantPlan"], workspace: Path, sink: "DriverSink",
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

    def run(self, plans: Sequence["VariantPlan"], workspace: Path, sink: "DriverSink",
            reporter: "Reporter") -> Iterator["VariantOutcome"]:
        from .variant import run_variant

        budget = Budget(self.max_seconds)
        for p in plans:
            if p.role != "baseline" and budget.spent():
                yield budget.skipped(p.name, reporter)
                continue
            # this process writes the driver's sink itself: nothing to merge
            yield run_variant(p, workspace, sink, reporter, reference=sink.reference_for(p))


def not_evaluated(name: str, error: str, reporter: "Reporter", status: str = "error") -> "VariantOutcome":
    """A variant an executor did not (or could not) evaluate: said in the log, and its outcome."""
    from .variant import VariantOutcome

    reporter.log(f"[{name}] NOT EVALUATED: {error}")
    return VariantOutcome(name=name, status=status, error=error)


@dataclass(frozen=True)
class Budget:
    """The run's time budget (`qeval run --max-minutes`): once spent, no variant after the baseline starts;
    each is reported skipped (never PASS) and a rerun resumes it. Every executor asks it the same way."""

    max_seconds: float | None
    started: float = field(default_factory=time.monotonic)

    def spent(self) -> bool:
        return self.max_seconds is not None and time.monotonic() - self.started > self.max_seconds

    def skipped(self, name: str, reporter: "Reporter") -> "VariantOutcome":
        return not_evaluated(name, f"not started: the run's time budget ({self.max_seconds:.0f} s) was spent; "
                                   "run the same command again to resume", reporter, status="skipped")


def make_executor(spec: ExecutorSpec, max_seconds: float | None = None) -> Executor:
    return EXECUTORS.get(spec.kind)(spec, max_seconds)

