"""The recommendation: the cheapest variant that passes every gate, or, when none does, the closest one and
the gate that stopped it. Pure: the record's verdicts, gates and figures in, a frozen answer out.

"Cheapest" is what the policy's `recommend.by` says: the least weights memory (default), the most output
tokens/s at the latency SLO, or the most KV cache tokens (kv_capacity: for variants that change the KV cache,
whose weights are the baseline's). "Closest" is the evaluated variant with the fewest gates not passed (FAIL,
INCONCLUSIVE, or NOT_RUN after another gate failed it), then the smallest total shortfall, each gate's measured in units of its own margin: how far
its lower bound sits below -margin (a performance gate: how far its ratio misses the bound; an
INCONCLUSIVE gate whose bound clears -margin: 0; a gate with no figure, a NOT_RUN one too: infinite), then campaign order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Sequence

from .findings import label

if TYPE_CHECKING:
    from ..record.run import GateResult, RunRecord

By = Literal["weights_memory", "throughput_at_slo", "kv_capacity"]
FAILING = ("FAIL", "INCONCLUSIVE")  # WARN never stops a variant
# a gate skipped once another had failed the variant (stop_variant_on_fail) is unknown: never a pass
NOT_PASSED = (*FAILING, "NOT_RUN")


@dataclass(frozen=True)
class Failure:
    """One gate that keeps a variant from passing."""

    gate: str  # "suite / metric"
    verdict: str  # with the finding it rests on: "FAIL (worse than the margin)"
    reason: str
    shortfall: float  # in units of the gate's margin; inf when the gate had no figure


@dataclass(frozen=True)
class Candidate:
    """What the choice needs of one non-baseline variant, in campaign order."""

    name: str
    verdict: str
    weights_bytes: float | None = None
    throughput_at_slo: float | None = None
    kv_cache_tokens: float | None = None
    failures: tuple[Failure, ...] = ()  # in the gates table's order


@dataclass(frozen=True)
class Recommendation:
    by: By
    chosen: Candidate | None = None  # the cheapest passing variant
    passing: int = 0  # how many pass every gate
    unranked: bool = False  # the chosen one's figure is missing: picked by campaign order among those lacking it
    closest: Candidate | None = None  # when none passes
    total_gates: int = 0  # of the closest

    def text(self) -> str:
        """One line, as the report, the CI summary and the MLflow tag give it."""
        if self.chosen is not None:
            c = self.chosen
            how = (f"no {_FIGURE[self.by]} measured for it, picked in campaign order" if self.unranked
                   else f"{_MOST[self.by]} among the {self.passing} variant(s) that pass every gate")
            return f"Recommended: {c.name} ({how}): {figures(c, self.by)}"
        if self.closest is None:
            return "No variant to recommend: none was evaluated"
        c, first = self.closest, self.closest.failures[0]
        return (f"No variant passes every gate. Closest: {c.name} ({len(c.failures)} of {self.total_gates} gates "
                f"not passed); first failing gate: {first.gate}: {first.verdict} ({first.reason})")


_FIGURE = {"weights_memory": "weights memory", "throughput_at_slo": "throughput at the SLO",
           "kv_capacity": "KV cache capacity"}
_MOST = {"weights_memory": "the least weights memory", "throughput_at_slo": "the most output tokens/s at the SLO",
         "kv_capacity": "the most KV cache tokens"}


def figures(c: Candidate, by: By = "weights_memory") -> str:
    w = "-" if c.weights_bytes is None else f"{c.weights_bytes / 2**20:,.0f} MiB"
    t = "-" if c.throughput_at_slo is None else f"{c.throughput_at_slo:,.1f}"
    kv = "" if by != "kv_capacity" else ", KV cache " + (
        "-" if c.kv_cache_tokens is None else f"{c.kv_cache_tokens:,.0f}") + " tokens"
    return f"weights {w}, output tok/s at the SLO {t}{kv}"


def _figure(c: Candidate, by: By) -> float | None:
    return {"weights_memory": c.weights_bytes, "throughput_at_slo": c.throughput_at_slo,
            "kv_capacity": c.kv_cache_tokens}[by]


def recommend(candidates: Sequence[Candidate], by: By = "weights_memory", gates_of: dict[str, int] | None = None
              ) -> Recommendation:
    """The cheapest candidate whose verdict is PASS; ties go to the other figure(s), then campaign order.
    `gates_of`: how many gates each candidate had (for the closest one's "k of n")."""
    order = {c.name: i for i, c in enumerate(candidates)}
    passing = [c for c in candidates if c.verdict == "PASS"]
    if passing:
        def cost(c: Candidate) -> tuple:
            w = math.inf if c.weights_bytes is None else c.weights_bytes
            t = -math.inf if c.throughput_at_slo is None else c.throughput_at_slo
            kv = -math.inf if c.kv_cache_tokens is None else c.kv_cache_tokens
            first = {"weights_memory": (w, -t), "throughput_at_slo": (-t, w), "kv_capacity": (-kv, w, -t)}[by]
            return *first, order[c.name]

        best = min(passing, key=cost)
        missing = _figure(best, by) is None
        return Recommendation(by=by, chosen=best, passing=len(passing), unranked=missing)
    failed = [c for c in candidates if c.verdict in FAILING and c.failures]
    if not failed:
        return Recommendation(by=by)
    near = min(failed, key=lambda c: (len(c.failures), sum(f.shortfall for f in c.failures), order[c.name]))
    return Recommendation(by=by, closest=near, total_gates=(gates_of or {}).get(near.name, len(near.failures)))


def shortfall(g: "GateResult") -> float:
    """How far a gate misses, in units of its margin (0 when its bound clears -margin but it is underpowered)."""
    if g.mode == "ratio":
        if g.delta is None:
            return math.inf
        gap = (g.margin - g.delta) if ">=" in g.rule else (g.delta - g.margin)  # min_ratio / max_ratio
    else:
        if g.lower_bound is None:
            return math.inf
        gap = -g.margin - g.lower_bound
    gap = max(gap, 0.0)
    return gap / g.margin if g.margin > 0 else gap


def candidates(r: "RunRecord") -> list[Candidate]:
    out = []
    for v in r.variants:
        if v.role != "variant":  # the baseline, and its A/A (noise.py)
            continue
        perf = v.perf()
        fails = tuple(Failure(gate=f"{g.suite} / {g.metric}", verdict=label(g, r.inconclusive), reason=g.reason,
                              shortfall=shortfall(g))
                      for g in r.gates if g.variant == v.name and g.verdict in NOT_PASSED)
        out.append(Candidate(name=v.name, verdict=r.verdicts.get(v.name, "NOT_EVALUATED"),
                             weights_bytes=perf.get("weights_bytes"),
                             throughput_at_slo=perf.get("output_throughput_at_slo"),
                             kv_cache_tokens=perf.get("kv_cache_tokens"), failures=fails))
    return out


def policy_by(r: "RunRecord") -> By:
    """The record's policy says how to choose; a record of a policy without `recommend` means weights memory."""
    gates = r.config.get("gates")
    rec = gates.get("recommend") if isinstance(gates, dict) else None
    return (rec or {}).get("by", "weights_memory")


def for_record(r: "RunRecord") -> Recommendation:
    counts = {v.name: sum(1 for g in r.gates if g.variant == v.name) for v in r.variants}
    return recommend(candidates(r), policy_by(r), counts)
