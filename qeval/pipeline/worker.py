"""A variant's unit of work as an executor runs it (the executors' Work): `run_variant` with a sink and a
reporter that send what it produces as the stream's messages (executors/stream.py), which the driver merges.

The campaign hands WORK to its executor; the executor only decides where it runs: in the driver's process
(`here`: the driver's folder, reporter and sink, read as they are written), or on a node of its own (`on_node`:
the node's settings and a fresh workspace, what the driver holds shipped in, files shipped back), and whether a
variant's checkpoint is made in a unit of its own first (`make`). WORK is module-level and stateless, so a
remote executor sends it by name and the node imports this module to run it.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import MissingEnvError, QuantizeError
from ..executors.leases import Guard, unguarded
from ..executors.outcome import VariantOutcome
from ..executors.stream import (Done, Emit, Made, Message, Reads, Stored, StreamReporter, StreamSink, node_workspace,
                                shipped_files, unpack)
from ..hashing import in_hub_cache
from ..progress import Reporter
from ..settings import Settings
from .plan import VariantPlan
from .sink import Pending, Reference
from .variant import make_checkpoint, made_here, run_variant


def on_node(plan: VariantPlan, settings: Settings) -> VariantPlan:
    """The plan as this node runs it: its own settings (cache, engine builds, shared store), and the base
    checkpoint where this node keeps it (base_on_node)."""
    base = base_on_node(plan.suites.base_checkpoint, plan.settings, settings)
    return dataclasses.replace(plan, settings=settings, suites=dataclasses.replace(plan.suites, base_checkpoint=base))


def base_on_node(base: Path, driver: Settings, node: Settings) -> Path:
    """Under the node's own models folder where the driver's was under the driver's; a Hugging Face snapshot at
    the same commit in the node's own hub cache (downloaded there where the hub is reachable); else as it is."""
    if base.is_relative_to(driver.models):
        return node.models / base.relative_to(driver.models)
    if in_hub_cache(base):  # <cache>/models--org--name/snapshots/<commit>
        from ..machine.hub import snapshot

        return snapshot(base.parent.parent.name.removeprefix("models--").replace("--", "/"), base.name)
    return base


def _shared(settings: Settings) -> Path | None:
    return settings.records if settings.share_records else None


@dataclass(frozen=True)
class VariantWork:
    """The pipeline's Work (executors/base.py): one variant's run, or the making of its checkpoint, as a unit
    whose records, notices and outcome are messages."""

    def here(self, plan: VariantPlan, workspace: Path, sink: Reads, emit: Emit, reporter: Reporter,
             reference: Reference | Pending | None = None) -> Message:
        """Run the variant in the driver's process, as planned: its files straight into the driver's run folder
        and its steps on the driver's reporter (nothing of them travels); its records, its notice and its
        outcome through `emit`. The last message is Done."""
        outcome = run_variant(plan, workspace, StreamSink(sink, emit, _shared(plan.settings)), reporter,
                              reference=reference)
        return Done(outcome, {})

    def on_node(self, plan: VariantPlan, stored: Stored, files: dict[str, bytes], emit: Emit,
                guard: Guard = unguarded, reference: Pending | None = None, made: dict[str, object] | None = None,
                settings: Settings | None = None) -> Message:
        """Run the variant on this node and send what it produces as it produces it; the last message is Done.
        `files`: the driver's probe and grid files, so what is done is not redone. `made`: what making its
        checkpoint recorded, where a unit of its own made it on this node (make). The workspace is the node's
        own (a fresh folder under its cache: node_workspace), removed afterwards."""
        settings = settings or Settings.from_env()
        plan = on_node(plan, settings)
        ws = node_workspace(settings, plan.name)
        try:
            unpack(files, ws)
            sink = StreamSink(stored, emit, _shared(settings))
            outcome = run_variant(plan, ws, sink, StreamReporter(emit, ws), guard, reference)
            if made is not None and outcome.measured.quantize_seconds is None:  # made by its own unit, found made
                outcome = dataclasses.replace(outcome, measured=outcome.measured.model_copy(
                    update={"quantize_seconds": made.get("quantize_seconds")}))
            return Done(outcome, shipped_files(ws))
        finally:
            shutil.rmtree(ws, ignore_errors=True)

    def make(self, plan: VariantPlan, emit: Emit, guard: Guard = unguarded,
             settings: Settings | None = None) -> Message:
        """Only make the variant's checkpoint on this node (quantize it into the node's cache, unless it is there):
        a unit of its own where making needs less than serving (one GPU of a tensor-parallel variant's several),
        so the rest are not held idle meanwhile. Its log lines and quantizer log stream as a variant's do; the
        last message is Made, or Done with the error where it could not be made. The serving unit that follows
        on this node finds the checkpoint made."""
        settings = settings or Settings.from_env()
        plan = on_node(plan, settings)
        ws = node_workspace(settings, plan.name)
        try:
            reporter = StreamReporter(emit, ws)
            try:
                with guard("make"):  # no engine sizes its memory beside a quantizer (leases.py)
                    _, facts = make_checkpoint(plan, ws, reporter)
            except (QuantizeError, MissingEnvError) as e:
                reporter.log(f"[{plan.name}] NOT EVALUATED: {e}")
                return Done(VariantOutcome(name=plan.name, status="error", error=str(e)), {})
            return Made(facts)
        finally:
            shutil.rmtree(ws, ignore_errors=True)

    def made_apart(self, plan: VariantPlan) -> bool:
        """Whether the variant's checkpoint is made by a quantizer (a step `make` can run apart)."""
        return made_here(plan)


WORK = VariantWork()
