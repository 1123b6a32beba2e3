"""The executor seam: given variants' plans and the work to run for each, yield their outcomes as they finish.

An executor only places: where each unit of work runs, how often it is tried again, and the run's time
budget (Budget, shared). The rest is given to it. What a unit runs is the pipeline's (Work: `run_variant`
behind the stream's worker side); what a unit sends back is merged by the stream's driver side
(stream.Merge); the baseline's records the variants' looks pair with come from the driver's sink
(DriverSink.reference_for / on_reference): an executor carries them, nothing more. The campaign file picks an
executor kind (`executor: {kind: local}`), and a kind registered in EXECUTORS (spec.py; a plugin's through the
entry point group `qeval.executors`) brings its own spec, so Ray is added beside `local` without touching
the pipeline.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar, Iterator, Protocol, Sequence

from ..engines.spec import EngineSpec
from .leases import Guard
from .outcome import VariantOutcome
from .spec import EXECUTORS, ExecutorSpec
from .stream import Emit, Message, Reads, Receiver, Stored

if TYPE_CHECKING:
    from ..progress import Reporter


class Unit(Protocol):
    """What an executor reads of a variant's plan (the pipeline's VariantPlan); the rest travels unread."""

    @property
    def name(self) -> str: ...

    @property
    def role(self) -> str:
        """"baseline" (the first plan), "variant", or "noise" (the baseline served again: the A/A)."""
        ...

    @property
    def engine(self) -> EngineSpec:
        """How the variant is served: what its unit asks of where it runs (device, GPUs)."""
        ...

    @property
    def external(self) -> bool:
        """Served by an endpoint someone else runs: its unit holds no device."""
        ...

    @property
    def after(self) -> str | None:
        """The plan whose unit must have finished before this one starts (None: it starts at once). The plans
        come in an order that keeps it: one after another, as the local executor runs them, keeps it too."""
        ...


class Work(Protocol):
    """What runs for each plan, given by the pipeline (pipeline/worker.py WORK): each method sends the unit's
    messages through `emit` as they are made and returns its last one. A remote executor sends it by name
    (it is module-level and stateless) and runs it there, turning it into a stream with stream.streamed."""

    def here(self, plan: Unit, workspace: Path, sink: Reads, emit: Emit, reporter: "Reporter",
             reference: object = None) -> Message:
        """Run the plan in the driver's process: its files in the driver's `workspace`, its steps on the driver's
        `reporter`, its own keys read from the driver's sink. The last message is Done."""
        ...

    def on_node(self, plan: Unit, stored: Stored, files: dict[str, bytes], emit: Emit, guard: Guard,
                reference: Callable[[], object] | None = None, made: dict[str, object] | None = None) -> Message:
        """Run the plan on this node, from what the driver holds of it (`stored`, and its probe and grid
        `files`), each stage leased through `guard`; `reference` waits for the baseline's records; `made`: what
        making its checkpoint recorded where `make` made it on this node. The last message is Done."""
        ...

    def make(self, plan: Unit, emit: Emit, guard: Guard) -> Message:
        """Only make the plan's checkpoint on this node. The last message is Made, or Done where it failed."""
        ...

    def made_apart(self, plan: Unit) -> bool:
        """Whether the plan's checkpoint is made by a step `make` can run as a unit of its own."""
        ...


class DriverSink(Reads, Receiver, Protocol):
    """What an executor asks of the driver's sink (the pipeline's StoreSink): what the stream's merge writes,
    what a unit reads, and the baseline's records the variants' looks pair with."""

    def stored(self, variant: str, with_records: bool = False) -> Stored:
        """What it holds of a variant: what a unit of work run elsewhere starts from."""
        ...

    def reference_for(self, plan: Unit) -> object:
        """What the plan's looks pair with: the baseline's records, a callable that waits for them, or None
        (the plan looks at nothing)."""
        ...

    def on_reference(self, give: Callable[[object], None]) -> None:
        """Call `give` once the baseline's records are known (at once if they are): how an executor sends
        them where its variants run."""
        ...


class Executor(Protocol):
    Spec: ClassVar[type[ExecutorSpec]]

    def __init__(self, spec: ExecutorSpec, max_seconds: float | None = None) -> None: ...

    def check(self, plans: Sequence[Unit]) -> object:
        """Refuse, before anything is written, what this executor cannot run (ConfigError; QevalError when
        where it runs cannot be reached)."""
        ...

    def run(self, plans: Sequence[Unit], work: Work, workspace: Path, sink: DriverSink,
            reporter: "Reporter") -> Iterator[VariantOutcome]:
        """Each plan's outcome, as it finishes. The first plan is the baseline."""
        ...


def not_evaluated(name: str, error: str, reporter: "Reporter", status: str = "error") -> VariantOutcome:
    """A variant an executor did not (or could not) evaluate: said in the log, and its outcome."""
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

    def skipped(self, name: str, reporter: "Reporter") -> VariantOutcome:
        return not_evaluated(name, f"not started: the run's time budget ({self.max_seconds:.0f} s) was spent; "
                                   "run the same command again to resume", reporter, status="skipped")


def make_executor(spec: ExecutorSpec, max_seconds: float | None = None) -> Executor:
    return EXECUTORS.get(spec.kind)(spec, max_seconds)
