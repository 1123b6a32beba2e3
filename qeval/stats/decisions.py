"""Non-inferiority, equivalence (TOST) and superiority decisions from confidence bounds.

All three use the same interval: the two-sided (1 - 2 alpha) interval of delta = variant -
baseline, whose ends are the one-sided (1 - alpha) bounds.

A decision carries two words: its verdict (what the gate does: PASS, FAIL, INCONCLUSIVE) and its finding
(what the interval shows against the margin). One verdict can rest on different findings: a non-inferiority
FAIL is either "worse than the margin" (the upper bound below -margin) or "not shown within the margin" (the
interval straddles -margin), and a reader acts on them differently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["noninferiority", "equivalence", "superiority"]
Verdict = Literal["PASS", "FAIL", "INCONCLUSIVE"]
# what the interval shows, in the same words for every mode (the verdict is what the mode makes of it):
# shown_within: inside the margin (non-inferiority: lower bound > -margin; equivalence: inside +-margin);
# shown_worse: upper bound < -margin; shown_better: lower bound > +margin (superiority's PASS, equivalence's
# FAIL); not_shown_within: the interval straddles -margin (or, for equivalence, either end of the band);
# shown_not_better: upper bound <= +margin; not_shown_better: straddles +margin; underpowered: the suite
# detects only effects above the margin and the interval shows nothing either way; underpowered_within: the
# interval lies inside the margin, but the suite was underpowered, so the gate is INCONCLUSIVE
Finding = Literal["shown_within", "shown_worse", "shown_better", "not_shown_within", "shown_not_better",
                  "not_shown_better", "underpowered", "underpowered_within"]


@dataclass(frozen=True)
class Decision:
    mode: Mode
    verdict: Verdict
    reason: str
    finding: Finding


def decide(mode: Mode, ci_low: float, ci_high: float, margin: float, mde: float | None = None) -> Decision:
    """PASS when the bound(s) clear the margin; FAIL on clear evidence or an adequately powered miss;
    INCONCLUSIVE when the suite could not have detected the margin (mde > margin)."""
    if margin < 0:
        raise ValueError("margin must be >= 0")
    underpowered = mde is not None and mde > margin
    if mode == "noninferiority":
        if ci_high < -margin:
            return Decision(mode, "FAIL", f"upper bound {ci_high:+.4f} < -margin: clearly worse", "shown_worse")
        if underpowered:
            return Decision(mode, "INCONCLUSIVE", f"suite detects only drops >= {mde:.4f} > margin {margin:.4f}",
                            "underpowered_within" if ci_low > -margin else "underpowered")
        if ci_low > -margin:
            return Decision(mode, "PASS", f"lower bound {ci_low:+.4f} > -margin {-margin:+.4f}", "shown_within")
        return Decision(mode, "FAIL", f"lower bound {ci_low:+.4f} <= -margin {-margin:+.4f}", "not_shown_within")
    if mode == "equivalence":  # TOST: both one-sided tests must reject
        if ci_high < -margin or ci_low > margin:
            return Decision(mode, "FAIL", "interval lies outside the equivalence band",
                            "shown_worse" if ci_high < -margin else "shown_better")
        inside = -margin < ci_low and ci_high < margin
        if underpowered:
            return Decision(mode, "INCONCLUSIVE", f"suite detects only differences >= {mde:.4f} > margin",
                            "underpowered_within" if inside else "underpowered")
        if inside:
            return Decision(mode, "PASS", f"interval [{ci_low:+.4f}, {ci_high:+.4f}] inside +-{margin:.4f}",
                            "shown_within")
        return Decision(mode, "FAIL", f"interval [{ci_low:+.4f}, {ci_high:+.4f}] not inside +-{margin:.4f}",
                        "not_shown_within")
    if mode == "superiority":  # variant better than baseline by more than margin
        if ci_low > margin:
            return Decision(mode, "PASS", f"lower bound {ci_low:+.4f} > margin {margin:+.4f}", "shown_better")
        if underpowered:  # a PASS is read first, so the interval never lies above the margin here
            return Decision(mode, "INCONCLUSIVE", f"suite detects only gains >= {mde:.4f}", "underpowered")
        return Decision(mode, "FAIL", f"lower bound {ci_low:+.4f} <= margin {margin:+.4f}",
                        "shown_not_better" if ci_high <= margin else "not_shown_better")
    raise ValueError(f"unknown mode {mode!r}")
