"""The decision a KV-cache or serving variant asks for: may it be turned on?

A variant that changes the KV cache (an FP8 KV cache, on the baseline's weights or on top of a weight scheme) or
how the model is served (an attention backend, a tensor-parallel size) asks one question of a campaign: may it be
turned on? The gates answer it gate by gate; this says it in one line, grounded in them and in the figures that
justify the change: "kv-fp8 (changes: kv_cache_dtype auto -> fp8): may be turned on — every quality gate passes
(12, incl. logprobs/long/kl@4k-8k); KV capacity 2.00x the baseline's (745,648 vs 372,816 tokens); output
throughput at saturation 1.31x". The outcomes, in the order they are looked for:

- not_evaluated: the variant was not evaluated (an error, a cut run);
- shown_worse: a quality gate FAILs with its interval wholly beyond the margin ("do not turn it on");
- not_shown_safe: a quality gate did not pass otherwise (not shown within the margin, INCONCLUSIVE: a depth bucket
  too few documents reach, an underpowered suite; NOT_RUN), or no quality gate judged it;
- gain_not_shown: every quality gate passes, but a performance gate that applies to it does not (its KV capacity
  misses the policy's ratio, say): safe by quality, its reason for being is not shown;
- turn_on: every gate passes.

A WARN never stops it (as in the verdict). Pure: a frozen Subject in (the record's gates, changes and figures for
one variant), a frozen Decision out; for_record reads a record's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..record.run import DecisionOutcome as Outcome
from ..record.run import changes_text
from .findings import label

if TYPE_CHECKING:
    from ..record.run import GateResult, RunRecord

HEADS: dict[str, str] = {
    "turn_on": "may be turned on",
    "shown_worse": "do not turn it on",
    "not_shown_safe": "not shown safe",
    "gain_not_shown": "within every quality margin, but its gain is not shown",
    "not_evaluated": "not evaluated",
}

# what the decision is for: a variant that changes these (a weight scheme alone is the recommendation's)
DECIDED = ("kv_cache", "serving")
NOT_PASSED = ("FAIL", "INCONCLUSIVE", "NOT_RUN")  # WARN never stops a variant


@dataclass(frozen=True)
class Subject:
    """What the decision reads of one variant: its verdict, what it changes (pipeline/changes.py), its gates in the
    gates table's order, and its performance figures and the baseline's (VariantResult.perf)."""

    name: str
    verdict: str
    changes: tuple[str, ...] = ()
    serving_diff: tuple[str, ...] = ()
    gates: tuple["GateResult", ...] = ()
    figures: Mapping[str, float] = field(default_factory=dict)
    base_figures: Mapping[str, float] = field(default_factory=dict)
    inconclusive: str = "fail"  # the policy's: what label() says an underpowered gate within the margin would do
    error: str | None = None  # why it was not evaluated


@dataclass(frozen=True)
class Decision:
    variant: str
    outcome: Outcome
    setting: str  # what sets it apart from the baseline: "kv_cache_dtype auto -> fp8"
    because: str  # the gate(s) the outcome rests on
    figures: str = ""  # its KV capacity and throughput against the baseline's

    def text(self) -> str:
        """One line, as the verdict output, the report, the record and MLflow give it."""
        tail = f"; {self.figures}" if self.figures else ""
        return f"{self.variant} (changes: {self.setting}): {HEADS[self.outcome]} — {self.because}{tail}"


def setting(changes: tuple[str, ...], serving_diff: tuple[str, ...]) -> str:
    """What sets the variant apart: changes_text's words ("weights; kv_cache_dtype auto -> fp8")."""
    return changes_text(changes, serving_diff).removeprefix("differs in: ")


_DEPTH = re.compile(r"(\d+(?:\.\d+)?)(k?)")


def depth(metric: str) -> float:
    """How deep a stratified metric reaches: kl@4k-8k -> 8192, acc@4096 -> 4096; -1 for an unstratified one."""
    if "@" not in metric:
        return -1.0
    found = _DEPTH.findall(metric.split("@", 1)[1])
    return max((float(n) * (1024 if k else 1) for n, k in found), default=-1.0)


def deepest(gates: tuple["GateResult", ...]) -> list[str]:
    """Per suite, its deepest stratified gate ("logprobs/long/kl@4k-8k"), where one reaches a depth."""
    best: dict[str, "GateResult"] = {}
    for g in gates:
        if depth(g.metric) >= 0 and (g.suite not in best or depth(g.metric) > depth(best[g.suite].metric)):
            best[g.suite] = g
    return [f"{g.suite}/{g.metric}" for g in best.values()]


def _gate(g: "GateResult", inconclusive: str) -> str:
    why = f": {g.reason}" if g.reason else ""
    return f"{g.suite}/{g.metric} {label(g, inconclusive)}{why}"


def _blocking(gates: list["GateResult"], inconclusive: str) -> str:
    """The gate that stops it (a FAIL before an INCONCLUSIVE before a NOT_RUN), and how many more do."""
    first = min(gates, key=lambda g: NOT_PASSED.index(g.verdict))
    more = f"; {len(gates) - 1} more gate(s) not passed" if len(gates) > 1 else ""
    return _gate(first, inconclusive) + more


def _ratio(name: str, key: str, s: Subject, unit: str = "") -> str | None:
    a, b = s.figures.get(key), s.base_figures.get(key)
    if not a or not b:
        return None
    if unit == "tokens":
        return f"{name} {a / b:.2f}x the baseline's ({a:,.0f} vs {b:,.0f} tokens)"
    return f"{name} {a / b:.2f}x ({a:,.1f} vs {b:,.1f}{unit})"


def figures(s: Subject) -> str:
    """Its KV capacity (tokens the KV cache holds), output throughput at saturation (the probe's largest) and,
    where it changes them, its weights, each against the baseline's."""
    out = []
    kv = _ratio("KV capacity", "kv_cache_tokens", s, "tokens")
    if kv:
        out.append(kv)
    elif "kv_cache" in s.changes:
        out.append("KV capacity not measured")
    tput = _ratio("output throughput at saturation", "max_output_throughput", s, " tok/s")
    if tput:
        out.append(tput)
    if "weights" in s.changes:
        w = s.figures.get("weights_bytes"), s.base_figures.get("weights_bytes")
        if w[0] and w[1]:
            out.append(f"weights {w[0] / w[1]:.2f}x")
    return "; ".join(out)


def decide(s: Subject) -> Decision:
    """The outcome for one variant, the gate it rests on and its figures (the module's docstring: the order)."""
    def out(outcome: Outcome, because: str) -> Decision:
        return Decision(variant=s.name, outcome=outcome, setting=setting(s.changes, s.serving_diff),
                        because=because, figures="" if outcome == "not_evaluated" else figures(s))

    if s.verdict == "NOT_EVALUATED" or s.error:
        return out("not_evaluated", s.error or "no verdict: the run did not reach its gates")
    quality = [g for g in s.gates if g.mode != "ratio"]
    perf = [g for g in s.gates if g.mode == "ratio"]
    worse = [g for g in quality if g.verdict == "FAIL" and g.finding == "shown_worse"]
    if worse:
        return out("shown_worse", _blocking(worse, s.inconclusive))
    stopped = [g for g in quality if g.verdict in NOT_PASSED]
    if stopped:
        return out("not_shown_safe", _blocking(stopped, s.inconclusive))
    if not quality:
        return out("not_shown_safe", "no quality gate judged it")
    missed = [g for g in perf if g.verdict in NOT_PASSED]
    if missed:
        return out("gain_not_shown", _blocking(missed, s.inconclusive))
    deep = deepest(tuple(quality))
    warned = [f"{g.suite}/{g.metric}" for g in s.gates if g.verdict == "WARN"]
    passed = sum(g.verdict == "PASS" for g in perf)
    because = (f"every quality gate passes ({len(quality)}" + (f", incl. {', '.join(deep)}" if deep else "") + ")"
               + ("" if not perf else f"; every performance gate passes ({passed})" if passed == len(perf)
                  else f"; {passed} of {len(perf)} performance gates pass")
               + (f"; WARN: {', '.join(warned)}" if warned else ""))
    return out("turn_on", because)


def subjects(r: "RunRecord") -> list[Subject]:
    """The record's variants that change the KV cache or a serving setting, in campaign order."""
    base = next((v for v in r.variants if v.role == "baseline"), None)
    base_figures = base.perf() if base is not None else {}
    return [Subject(name=v.name, verdict=r.verdicts.get(v.name, "NOT_EVALUATED"), changes=tuple(v.changes),
                    serving_diff=tuple(v.serving_diff), gates=tuple(g for g in r.gates if g.variant == v.name),
                    figures=v.perf(), base_figures=base_figures, inconclusive=r.inconclusive,
                    error=v.error if v.status == "error" else None)
            for v in r.variants if v.role == "variant" and set(v.changes) & set(DECIDED)]


def for_record(r: "RunRecord") -> list[Decision]:
    """A decision per variant of the record that changes the KV cache or a serving setting."""
    return [decide(s) for s in subjects(r)]
