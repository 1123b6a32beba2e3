"""Which fixed-n interval keeps its alpha on a continuous metric's skewed, heavy-tailed differences.

The t interval's one-sided error in coverage is O(1/sqrt(n)) and grows with the skew: where the differences
have a long tail on the losing side (a variant with rare large losses: NLL or KL of a few chunks), the sample
mostly misses the tail, its mean sits above the true one with a small sd, and the lower bound passes a variant
at the margin too often. A long tail on the gaining side errs the other way (fewer false passes), so the skew
is read with the gate's orientation: negative is a loss tail. The bootstrap-t follows the skew (O(1/n)); past
where it too fails, no interval qeval has keeps alpha and the gate refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
from scipy import stats

# n -> (s_t, s_b): from n items up (the next row's n excluded), the t interval keeps alpha when the oriented
# sample skew is >= -s_t, the bootstrap-t when it is >= -s_b; below -s_b neither does. Measured with
# benchmarks/simulate_gates.py --tails (docs/evidence/heavy-tails.md) at alpha 0.05: the widest cutoff at which
# every simulated shape's false-pass rate stays within alpha plus one Monte Carlo se, searched on seed 0
# (4,000 reps a cell: 0.6, 1.25, 1.2 and 0.3 at n = 20, 50, 100, 300) and checked on seed 1. Not monotone in
# n: with more items the sample skew of a moderate loss tail settles where t still passes 6% of the time, so
# only a near-symmetric sample keeps t. Between two measured n a row takes the smaller of the two cutoffs,
# past the last its own. The bootstrap-t reached no further than t on any row (its own rate on the loss tails
# is 6.6-16%), so s_b = s_t: past t's reach the gate refuses. Fewer items than the first row read the first row.
TAIL_CUTOFFS: dict[int, tuple[float, float]] = {20: (0.6, 0.6), 50: (1.2, 1.2), 100: (0.3, 0.3), 300: (0.3, 0.3)}


@dataclass(frozen=True)
class TailChoice:
    method: str | None  # "paired-t" or "paired-bootstrap-t"; None: no method keeps alpha, the gate refuses
    skew: float  # the oriented sample skew (scipy.stats.skew); negative: the long tail is on the losing side
    n: int
    reason: str


def oriented_skew(d: np.ndarray) -> float:
    """The sample skewness (scipy.stats.skew, the biased g1) of the oriented differences; 0 where they are
    fewer than three or constant up to rounding (b + 0.01 - b is not exactly 0.01: that noise has no tail)."""
    x = np.asarray(d, float)
    if len(x) < 3 or np.ptp(x) <= 1e-9 * max(float(np.abs(x).max()), np.finfo(float).tiny):
        return 0.0
    return float(stats.skew(x))


def cutoffs_for(n: int, table: Mapping[int, tuple[float, float]] | None = None) -> tuple[float, float]:
    """The row of the largest tabulated n at or below this n (the first row below it); TAIL_CUTOFFS unless given."""
    table = TAIL_CUTOFFS if table is None else table
    rows = sorted(table)
    return table[max([r for r in rows if r <= n], default=rows[0])]


def choose_interval(d: np.ndarray, two_sided: bool = False,
                    table: Mapping[int, tuple[float, float]] | None = None) -> TailChoice:
    """`interval: auto` on a continuous metric's oriented differences (positive is better): t where it kept
    alpha at this n and skew, else the bootstrap-t where that did, else none (the gate refuses).
    `two_sided`: both bounds decide (equivalence), so a long tail on either side counts as a loss tail."""
    x = np.asarray(d, float)
    n, g = len(x), oriented_skew(x)
    s_t, s_b = cutoffs_for(n, table)
    if two_sided:
        g = -abs(g)
    if g >= -s_t:
        return TailChoice("paired-t", g, n, f"skew {g:+.2f} at n = {n}: the t interval keeps alpha")
    if g >= -s_b:
        return TailChoice("paired-bootstrap-t", g, n,
                          f"skew {g:+.2f} at n = {n}: past the t interval's reach, the bootstrap-t keeps alpha")
    return TailChoice(None, g, n, f"heavy tail: skew {g:+.2f} at n = {n}, no method keeps alpha")
