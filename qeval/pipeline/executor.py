"""The executor seam: given variant plans, yield their outcomes as they finish.

The pipeline never knows where a variant runs; an executor kind is chosen by the campaign file
(`executor: {kind: local}`), so another (Ray) is added beside this one without touching the pipeline.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Iterator, Literal, Protocol, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from ..progress import Reporter
    from .plan import VariantPlan
    from .sink import RecordSink
    from .variant import VariantOutcome


class LocalExecutorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["local"] = "local"


# a kind-discriminated union: one member per executor kind
ExecutorSpec = Annotated[Union[LocalExecutorSpec], Field(discriminator="kind")]


class Executor(Protocol):
    def run(self, plans: Sequence["VariantPlan"], workspace: Path, sink: "RecordSink",
            reporter: "Reporter") -> Iterator["VariantOutcome"]:
        """Each plan's outcome, as it finishes. The first plan is the baseline."""
        ...


class LocalExecutor:
    """Today's way: one variant after another in this process. With `max_seconds`, no variant after the
    baseline starts once that much time has passed: it is reported skipped (never PASS), a rerun resumes it."""

    def __init__(self, spec: LocalExecutorSpec | None = None, max_seconds: float | None = None):
        self.spec, self.max_seconds = spec or LocalExecutorSpec(), max_seconds

    def run(self, plans: Sequence["VariantPlan"], workspace: Path, sink: "RecordSink",
            reporter: "Reporter") -> Iterator["VariantOutcome"]:
        from .variant import VariantOutcome, run_variant

        t0 = time.monotonic()
        for p in plans:
            if p.role == "variant" and self.max_seconds is not None and time.monotonic() - t0 > self.max_seconds:
                error = (f"not started: the run's time budget ({self.max_seconds:.0f} s) was spent; run the "
                         "same command again to resume")
                reporter.log(f"[{p.name}] NOT EVALUATED: {error}")
                yield VariantOutcome(name=p.name, status="skipped", error=error)
                continue
            yield run_variant(p, workspace, sink, reporter)


def make_executor(spec: BaseModel | None, max_seconds: float | None = None) -> Executor:
    kind = getattr(spec, "kind", "local")
    if kind == "local":
        return LocalExecutor(spec, max_seconds)  # type: ignore[arg-type]
    raise ValueError(f"no executor of kind {kind!r}")
