"""Where a variant's run sends what it produces: per-item records, and the notice that it has begun; and
what it reads back: the baseline's records that its sequential gates pair with.

A run never writes the store or the run record itself: the driver owns both, so that several runs at
once (processes, machines) can report through one writer. The driver's sink also knows when the baseline's
records are all stored, and hands them to each variant whose gates look while it runs: an executor only
carries them where the variant runs. StoreSink is what the executors' DriverSink asks for (executors/base.py).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Protocol, Union, runtime_checkable

from ..executors.stream import Stored
from ..record.store import Record, ResultsStore

if TYPE_CHECKING:
    from .plan import VariantPlan


@dataclass(frozen=True)
class Reference:
    """The baseline's records of every suite, which a variant's looks pair with: given by the driver's sink
    once the baseline's suites are all stored, and carried with each variant's unit of work."""

    key: str
    records: Mapping[str, tuple[Record, ...]]  # per suite key

    @classmethod
    def read(cls, sink: "RecordSink", key: str, plan: "VariantPlan") -> "Reference":
        return cls(key, {part.key: tuple(sink.records(key, part.key)) for part in plan.suites.parts()})


# the baseline's records still to come: called once, when a variant first needs them (None: the baseline failed)
Pending = Callable[[], "Reference | None"]


@runtime_checkable
class RecordSink(Protocol):
    def done_ids(self, vkey: str, skey: str) -> set[str]:
        """The items of the variant key's suite already stored (a resumed run skips them)."""
        ...

    def is_complete(self, vkey: str, skey: str) -> bool: ...

    def records(self, vkey: str, skey: str) -> list[Record]:
        """The records of the variant key's suite this sink knows (what the looks of sequential gates read)."""
        ...

    def reuse(self, vkey: str, skey: str, variant: str, suite: str) -> int:
        """Take a whole suite another campaign stored under the same keys; the records taken (0: none)."""
        ...

    def put(self, vkey: str, skey: str, variant: str, suite: str, records: Iterable[Record]) -> None: ...

    def mark_complete(self, vkey: str, skey: str, n_items: int) -> None: ...

    def begin(self, started: "object") -> None:
        """The variant has something to run under its key (a VariantOutcome with status "partial")."""
        ...


class StoreSink:
    """The driver's sink: straight into the campaign's store, each whole suite also into the machine's shared
    store (`shared`), which later campaigns read; `on_begin` tells the driver (it marks the record).
    `baseline`: the plan whose records the variants' sequential gates pair with (None: no gate looks)."""

    def __init__(self, store: ResultsStore, on_begin: Callable[[object], None] = lambda started: None,
                 shared: Path | None = None, baseline: "VariantPlan | None" = None):
        self.store, self.on_begin = store, on_begin
        self.shared = ResultsStore(shared) if shared is not None else None
        self.baseline = baseline
        self._names: dict[str, str] = {}  # variant key -> variant name, as runs report them
        self._reference: Reference | None = None
        self._given = threading.Event()  # set once the reference is known (None too: the baseline failed)
        self._listeners: list[Callable[[Reference | None], None]] = []

    def close(self) -> None:
        if self.shared is not None:
            self.shared.close()

    def __enter__(self) -> "StoreSink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def done_ids(self, vkey: str, skey: str) -> set[str]:
        return self.store.done_ids(vkey, skey)

    def is_complete(self, vkey: str, skey: str) -> bool:
        return self.store.is_complete(vkey, skey)

    def records(self, vkey: str, skey: str) -> list[Record]:
        return self.store.records(vkey, skey)

    def reuse(self, vkey: str, skey: str, variant: str, suite: str) -> int:
        return 0 if self.shared is None else self.shared.copy_suite(self.store, vkey, skey, variant, suite)

    def put(self, vkey: str, skey: str, variant: str, suite: str, records: Iterable[Record]) -> None:
        self._names[vkey] = variant
        self.store.put(vkey, skey, variant, suite, records)

    def mark_complete(self, vkey: str, skey: str, n_items: int) -> None:
        self.store.mark_complete(vkey, skey, n_items)
        if self.shared is not None:
            self.store.copy_suite(self.shared, vkey, skey)
        b = self.baseline
        # the baseline's suites all stored: the variants may pair with them before its latency probe ends
        if b is not None and self._names.get(vkey) == b.name and all(self.is_complete(vkey, p.key) for p in b.suites.parts()):
            self._give(Reference.read(self, vkey, b))

    def begin(self, started: object) -> None:
        self._names[started.key] = started.name  # type: ignore[attr-defined]
        self.on_begin(started)

    def stored(self, variant: str, with_records: bool = False) -> Stored:
        return Stored.of(self.store, variant, with_records)

    # -- the baseline's records, for the variants' looks --------------------------------------------------
    def settled(self, outcome: object) -> None:
        b = self.baseline
        if b is not None and outcome.name == b.name:  # type: ignore[attr-defined]
            # whatever happened to it: a failed baseline leaves the variants nothing to look at
            ok = outcome.status == "ok"  # type: ignore[attr-defined]
            self._give(Reference.read(self, outcome.key, b) if ok else None)  # type: ignore[attr-defined]

    def _give(self, reference: Reference | None) -> None:
        if self._given.is_set():
            return
        self._reference = reference
        self._given.set()
        for give in self._listeners:
            give(reference)

    def reference_for(self, plan: "VariantPlan") -> Union[Reference, Pending, None]:
        if self.baseline is None or plan.role != "variant" or plan.gates is None:
            return None
        if self._given.is_set():
            return self._reference

        def pending() -> Reference | None:
            self._given.wait()
            return self._reference

        return pending

    def on_reference(self, give: Callable[[Reference | None], None]) -> None:
        self._listeners.append(give)
        if self._given.is_set():
            give(self._reference)
