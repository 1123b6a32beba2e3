"""Non-inferiority, equivalence (TOST) and superiority decisions from confidence bounds.

All three use the same interval: the two-sided (1 - 2 alpha) interval of delta = variant -
baseline, whose ends are the one-sided (1 - alpha) bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["noninferiority", "equivalence", "superiority"]
Verdict = Literal["PASS", "FAIL", "INCONCLUSIVE"]


@dataclass(frozen=True)
class Decision:
    mode: Mode
    verdict: Verdict
    reason: str


def decide(mode: Mode, ci_low: float, ci_high: float, margin: float, mde: float | None = None) -> Decision:
    """PASS when the bound(s) clear the margin; FAIL on clear evidence or an adequately powered miss;
    INCONCLUSIVE when the suite could not have detected the margin (mde > margin)."""
    if margin < 0:
        raise ValueError("margin must be >= 0")
    underpowered = mde is not None and mde > margin
    if mode == "noninferiority":
        if ci_high < -margin:
            return Decision(mode, "FAIL", f"upper bound {ci_high:+.4f} < -margin: clearly worse")
        if underpowered:
            return Decision(mode, "INCONCLUSIVE", f"suite detects only drops >= {mde:.4f} > margin {margin:.4f}")
        if ci_low > -margin:
            return Decision(mode, "PASS", f"lower bound {ci_low:+.4f} > -margin {-margin:+.4f}")
        return Decision(mode, "FAIL", f"lower bound {ci_low:+.4f} <= -margin {-margin:+.4f}")
    if mode == "equivalence":  # TOST: both one-sided tests must reject
        if ci_high < -margin or ci_low > margin:
            return Decision(mode, "FAIL", "interval lies outside the equivalence band")
        if underpowered:
            return Decision(mode, "INCONCLUSIVE", f"suite detects only differences >= {mde:.4f} > margin")
        if -margin < ci_low and ci_high < margin:
            return Decision(mode, "PASS", f"interval [{ci_low:+.4f}, {ci_high:+.4f}] inside +-{margin:.4f}")
        return Decision(mode, "FAIL", f"interval [{ci_low:+.4f}, {ci_high:+.4f}] not inside +-{margin:.4f}")
    if mode == "superiority":  # variant better than baseline by more than margin
        if ci_low > margin:
            return Decision(mode, "PASS", f"lower bound {ci_low:+.4f} > margin {margin:+.4f}")
        if underpowered:
            return Decision(mode, "INCONCLUSIVE", f"suite detects only gains >= {mde:.4f}")
        return Decision(mode, "FAIL", f"lower bound {ci_low:+.4f} <= margin {margin:+.4f}")
    raise ValueError(f"unknown mode {mode!r}")
