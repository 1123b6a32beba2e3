"""Where a variant's run sends what it produces: per-item records, and the notice that it has begun.

A run never writes the store or the run record itself: the driver owns both, so that several runs at
once (processes, machines) can report through one writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Protocol, runtime_checkable

from ..store import Record, ResultsStore


@dataclass(frozen=True)
class Stored:
    """What the driver's store holds of one variant: per (variant key, suite key), the item ids, and the
    keys whose suite is complete. A unit of work that runs elsewhere resumes from it."""

    done: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    complete: frozenset[tuple[str, str]] = frozenset()
    # the records themselves, for a variant whose run gates as it goes (sequential gates read scores)
    records: dict[tuple[str, str], tuple[Record, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, store: ResultsStore, variant: str, with_records: bool = False) -> "Stored":
        done, complete = store.progress(variant)
        records = {k: tuple(store.records(*k)) for k in done} if with_records else {}
        return cls({k: frozenset(v) for k, v in done.items()}, frozenset(complete), records)


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


class StoredSink(RecordSink, Protocol):
    """A sink that can also say what it holds of a variant: what a unit of work run elsewhere starts from."""

    def stored(self, variant: str, with_records: bool = False) -> Stored: ...


class StoreSink:
    """The local sink: straight into the campaign's store, each whole suite also into the machine's shared
    store (`shared`), which later campaigns read; `on_begin` tells the driver (it marks the record)."""

    def __init__(self, store: ResultsStore, on_begin: Callable[[object], None] = lambda started: None,
                 shared: Path | None = None):
        self.store, self.on_begin = store, on_begin
        self.shared = ResultsStore(shared) if shared is not None else None

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
        self.store.put(vkey, skey, variant, suite, records)

    def mark_complete(self, vkey: str, skey: str, n_items: int) -> None:
        self.store.mark_complete(vkey, skey, n_items)
        if self.shared is not None:
            self.store.copy_suite(self.shared, vkey, skey)

    def begin(self, started: object) -> None:
        self.on_begin(started)

    def stored(self, variant: str, with_records: bool = False) -> Stored:
        return Stored.of(self.store, variant, with_records)
