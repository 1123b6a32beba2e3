"""Honest latency when variants share hardware: quality work shares a GPU (a CPU node), a latency probe has it alone.

Variants packed on one GPU (gpu_fraction) or one CPU node run their suites side by side: a per-item
score does not depend on who else computes. A latency figure does, so the probe and the grid cells
take an exclusive lease on the devices their variant runs on: it waits until the quality work there has
let go, and no new quality work starts there until it is done (a waiting probe goes first, so probes are
never starved). Ray has no reader-writer lock across tasks; this small one is ours. The book is kept
by one actor of the driver (the `ray` executor, ray.py); every lease taken and given back stays in its
history, which the driver writes next to the run record as the evidence that no probe overlapped other work.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterator, Literal

Kind = Literal["shared", "exclusive"]
Guard = Callable[[Kind], ContextManager[None]]  # what run_variant asks before a stage: guard("exclusive")


@contextmanager
def unguarded(kind: Kind) -> Iterator[None]:
    yield  # one variant at a time (the local executor): every stage has the machine alone


@dataclass
class _Key:
    shared: set[str] = field(default_factory=set)
    exclusive: str | None = None
    waiting: int = 0  # exclusive leases waiting: new shared ones wait behind them


class LeaseBook:
    """Shared and exclusive leases on named devices ("<node>/gpu0", "<node>/cpu"), with their history.
    Async: as a Ray actor, many tasks wait on it at once."""

    def __init__(self) -> None:
        self._keys: dict[str, _Key] = {}
        self._cond = asyncio.Condition()
        self._history: list[dict[str, Any]] = []

    def _free(self, key: str, kind: Kind) -> bool:
        k = self._keys.setdefault(key, _Key())
        if kind == "exclusive":
            return k.exclusive is None and not k.shared
        return k.exclusive is None and k.waiting == 0

    async def acquire(self, keys: list[str], kind: Kind, holder: str) -> None:
        async with self._cond:
            if kind == "exclusive":
                for key in keys:
                    self._keys.setdefault(key, _Key()).waiting += 1
            try:
                await self._cond.wait_for(lambda: all(self._free(key, kind) for key in keys))
            finally:
                if kind == "exclusive":
                    for key in keys:
                        self._keys[key].waiting -= 1
            for key in keys:
                if kind == "exclusive":
                    self._keys[key].exclusive = holder
                else:
                    self._keys[key].shared.add(holder)
            self._history.append({"holder": holder, "kind": kind, "keys": sorted(keys), "start": time.time(),
                                  "end": None})

    async def release(self, keys: list[str], kind: Kind, holder: str) -> None:
        async with self._cond:
            self._let_go(keys, kind, holder)
            self._cond.notify_all()

    async def release_all(self, holder: str) -> None:
        """Whatever a lost task held (its worker died inside a stage)."""
        async with self._cond:
            for h in self._history:
                if h["holder"] == holder and h["end"] is None:
                    self._let_go(h["keys"], h["kind"], holder)
            self._cond.notify_all()

    def _let_go(self, keys: list[str], kind: Kind, holder: str) -> None:
        for key in keys:
            k = self._keys.setdefault(key, _Key())
            if kind == "exclusive" and k.exclusive == holder:
                k.exclusive = None
            k.shared.discard(holder)
        for h in reversed(self._history):
            if h["holder"] == holder and h["kind"] == kind and h["end"] is None:
                h["end"] = time.time()
                break

    async def history(self) -> list[dict[str, Any]]:
        return [dict(h) for h in self._history]


def overlaps(history: list[dict[str, Any]]) -> list[tuple[dict, dict]]:
    """Pairs of leases of different holders on a common device where one was exclusive and both were held
    at once: what must never happen (an empty list is the evidence)."""
    out = []
    for i, a in enumerate(history):
        for b in history[i + 1:]:
            if a["holder"] == b["holder"] or "exclusive" not in (a["kind"], b["kind"]):
                continue
            if not set(a["keys"]) & set(b["keys"]):
                continue
            a_end, b_end = a["end"] or float("inf"), b["end"] or float("inf")
            if a["start"] < b_end and b["start"] < a_end:
                out.append((a, b))
    return out
