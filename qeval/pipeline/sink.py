"""Where a variant's run sends what it produces: per-item records, and the notice that it has begun.

A run never writes the store or the run record itself: the driver owns both, so that several runs at
once (processes, machines) can report through one writer.
"""

from __future__ import annotations

from typing import Callable, Iterable, Protocol, runtime_checkable

from ..store import Record, ResultsStore


@runtime_checkable
class RecordSink(Protocol):
    def done_ids(self, vkey: str, skey: str) -> set[str]:
        """The items of the variant key's suite already stored (a resumed run skips them)."""
        ...

    def is_complete(self, vkey: str, skey: str) -> bool: ...

    def put(self, vkey: str, skey: str, variant: str, suite: str, records: Iterable[Record]) -> None: ...

    def mark_complete(self, vkey: str, skey: str, n_items: int) -> None: ...

    def begin(self, started: "object") -> None:
        """The variant has something to run under its key (a VariantOutcome with status "partial")."""
        ...


class StoreSink:
    """The local sink: straight into the campaign's store; `on_begin` tells the driver (it marks the record)."""

    def __init__(self, store: ResultsStore, on_begin: Callable[[object], None] = lambda started: None):
        self.store, self.on_begin = store, on_begin

    def done_ids(self, vkey: str, skey: str) -> set[str]:
        return self.store.done_ids(vkey, skey)

    def is_complete(self, vkey: str, skey: str) -> bool:
        return self.store.is_complete(vkey, skey)

    def put(self, vkey: str, skey: str, variant: str, suite: str, records: Iterable[Record]) -> None:
        self.store.put(vkey, skey, variant, suite, records)

    def mark_complete(self, vkey: str, skey: str, n_items: int) -> None:
        self.store.mark_complete(vkey, skey, n_items)

    def begin(self, started: object) -> None:
        self.on_begin(started)
