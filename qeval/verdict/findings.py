"""A gate's verdict in words that say what its data showed.

One verdict can rest on different findings: a non-inferiority FAIL is either "worse than the margin" (the
upper bound below -margin: the variant is clearly worse) or "not shown within the margin" (the interval
straddles -margin: more items might yet show it within), and a reader acts on the two differently. The
verdict line, the reports, JUnit's messages and a variant's log read these words from here, so each says the
same; JUnit's failure type and MLflow's tags give the finding's name. Pure: a gate result in, a string out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..record.run import GateResult

# one entry per record.run.GateFinding
WORDS: dict[str, str] = {
    "shown_within": "within the margin",
    "shown_worse": "worse than the margin",
    "shown_better": "better than the baseline by more than the margin",
    "not_shown_within": "not shown within the margin",
    "shown_not_better": "not better by the margin",
    "not_shown_better": "not shown better by the margin",
    "underpowered": "underpowered: the suite detects only differences larger than the margin",
    "underpowered_within": "within the margin, but the suite is underpowered",
    "futile": "stopped for futility: a pass at the full n had become unlikely",
    "undecided": "stopped before a decision",
    "exact_test_not_confirmed": "within the margin by its interval, not confirmed by the exact test",
    "refused_heavy_tail": "heavy tail: no interval keeps alpha on these differences",
    "undirected": "no direction declared",
    "missing": "required metric missing",
    "not_run": "suite not run",
    "not_evaluated": "nothing to judge",
    "ratio_met": "ratio meets its bound",
    "ratio_missed": "ratio misses its bound",
    "not_measured": "not measured",
    "simulated": "simulated: not this scheme's figures",
    "insufficient_data": "too few data to judge",
}

# verdicts that say all there is: a PASS is within (or better than) the margin, a NOT_RUN gate has no data
_PLAIN = ("PASS", "NOT_RUN", "NOT_EVALUATED")


def words(g: "GateResult") -> str:
    """The finding in words; "" for a record written before gates named their findings."""
    return WORDS[g.finding] if g.finding is not None else ""


def would_pass(g: "GateResult", inconclusive: str) -> str:
    """What the policy's `inconclusive` does with an INCONCLUSIVE gate whose interval already lies inside the
    margin (it was planned underpowered, so the gate does not pass it); "" for any other gate. `inconclusive` is
    the record's setting: "fail" (the default) or "pass"."""
    if g.verdict != "INCONCLUSIVE" or g.finding != "underpowered_within":
        return ""
    return ("with `inconclusive: pass` this would PASS" if inconclusive == "fail"
            else "counted as a pass (`inconclusive: pass`)")


def qualifier(g: "GateResult", inconclusive: str | None = None) -> str:
    """What to say beside the verdict: the finding's words ("worse than the margin"), "" for a PASS (its verdict
    says it all) and for a record written before findings. With the record's `inconclusive`, an INCONCLUSIVE
    within the margin also says what that setting does with it."""
    w = "" if g.verdict in _PLAIN else words(g)
    note = would_pass(g, inconclusive) if inconclusive is not None else ""
    return "; ".join(x for x in (w, note) if x)


def label(g: "GateResult", inconclusive: str | None = None) -> str:
    """The verdict and the finding it rests on: "FAIL (worse than the margin)", "WARN (not shown within the
    margin)", "INCONCLUSIVE (within the margin, but ...; with `inconclusive: pass` this would PASS)", "PASS"."""
    q = qualifier(g, inconclusive)
    return f"{g.verdict} ({q})" if q else g.verdict
