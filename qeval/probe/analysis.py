"""Pure summaries of probe measurements: percentiles, the saturation point, the largest load within SLOs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

PCTS = (50, 90, 95, 99)


@dataclass(frozen=True)
class Dist:
    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    n: int

    def as_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "p50": self.p50, "p90": self.p90, "p95": self.p95, "p99": self.p99}


def dist(values: Sequence[float]) -> Dist:
    """Mean and percentiles (linear interpolation, numpy's default, as vLLM's benchmark uses)."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], dtype=float)
    if len(v) == 0:
        nan = float("nan")
        return Dist(nan, nan, nan, nan, nan, 0)
    p = np.percentile(v, PCTS)
    return Dist(float(v.mean()), *(float(x) for x in p), n=len(v))


def steady(rates: Sequence[float], tolerance: float) -> bool:
    """Whether the last two warm-up rounds' throughputs differ by at most `tolerance` of the earlier one."""
    if len(rates) < 2 or rates[-2] <= 0:
        return False
    return abs(rates[-1] / rates[-2] - 1.0) <= tolerance


@dataclass(frozen=True)
class Step:
    load: float  # concurrency, or request rate for rate steps
    throughput: float  # output tokens per second
    p95_latency: float  # seconds (end to end)


def saturation_point(steps: Sequence[Step], gain: float = 1.10, latency_jump: float = 1.5) -> float | None:
    """The first load where throughput stops growing (less than `gain` x the previous step) while p95
    latency jumps (at least `latency_jump` x): more load only adds queueing. None if never reached."""
    ordered = sorted(steps, key=lambda s: s.load)
    for prev, cur in zip(ordered, ordered[1:]):
        if prev.throughput <= 0:
            continue
        flat = cur.throughput < gain * prev.throughput
        jump = cur.p95_latency >= latency_jump * prev.p95_latency
        if flat and jump:
            return prev.load
    return None


def max_load_within_slo(loads: Sequence[float], metrics: Sequence[dict[str, float]],
                        slos: dict[str, float]) -> float | None:
    """The largest load whose every SLO holds (e.g. {"ttft_p95_ms": 500}), counting only loads below
    the first one that breaks an SLO, since latency only grows with load."""
    best = None
    for load, m in sorted(zip(loads, metrics), key=lambda x: x[0]):
        if all(m.get(k, float("inf")) <= v for k, v in slos.items()):
            best = load
        else:
            break
    return best
