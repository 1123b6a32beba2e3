"""An exact unconditional non-inferiority test for paired 0/1 scores.

Newcombe's interval, which the gate reads, is an approximation: at some n its one-sided level is a
little above alpha (5.12% false passes at n = 286 in benchmarks/simulate_gates.py). This test is the
guarantee beside it: its p-value is the largest probability, over every value of the nuisance
parameter (how often items flip), of a result at least as favourable as the one observed, so a gate
that also asks p <= alpha passes a variant whose true delta is -margin at most alpha of the time.

Only the flips carry information about delta: with g = items only the candidate gets right ("gains")
and l = items only the baseline gets right ("losses"), (g, l) is trinomial over the n items with
probabilities (p_g, p_l) and delta = p_g - p_l. Under H0, delta = -m, the nuisance is p_l alone. The
results are ordered by Tango's score statistic (Tango, Stat Med 1998;17:891), the usual choice for
this test (Chan, Tang, Tian & Tang; Sidik 2003). Neither scipy nor statsmodels has it (scipy's
barnard/boschloo tests are for two independent binomials), so it is written out here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

GRID = 200  # nuisance values searched, then refined around the largest


@dataclass(frozen=True)
class ExactTest:
    method: str
    p_value: float
    statistic: float
    nuisance: float  # the p_l at which the supremum was found


def restricted_loss_rate(gains: np.ndarray, losses: np.ndarray, n: int, m: float) -> np.ndarray:
    """The maximum-likelihood p_l under delta = -m (so p_g = p_l - m): the root of
    2n x^2 - (g (1 - m) + l (1 + m) + 2 m n) x + l m (1 + m) = 0 that lies in [m, (1 + m) / 2]."""
    b = gains * (1 - m) + losses * (1 + m) + 2 * m * n
    c = losses * m * (1 + m)
    return (b + np.sqrt(np.maximum(b * b - 8 * n * c, 0.0))) / (4 * n)


def score(gains: np.ndarray, losses: np.ndarray, n: int, m: float) -> np.ndarray:
    """Tango's statistic for H0: delta = -m: (delta_hat + m) over its standard error under H0.
    Large values favour non-inferiority."""
    gains, losses = np.asarray(gains, float), np.asarray(losses, float)
    x = restricted_loss_rate(gains, losses, n, m)
    var = (2 * x - m - m * m) / n
    num = (gains - losses) / n + m
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(var > 0, num / np.sqrt(np.where(var > 0, var, 1.0)), np.sign(num) * np.inf)
    return np.where(num == 0, 0.0, z)


def _tail(n: int, m: float, z_obs: float, p_l: np.ndarray) -> np.ndarray:
    """P(score >= z_obs) at each nuisance value p_l, for z_obs > 0: for each count of gains, the results
    at least as favourable are the loss counts up to a threshold (the score falls as losses rise while
    it is positive), found by bisection; then a binomial sum over the gains."""
    g = np.arange(n + 1)
    lo, hi = np.full(n + 1, -1), n - g + 1  # lo: favourable (or -1: none), hi: not
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        ok = score(g, np.maximum(mid, 0), n, m) >= z_obs * (1 - 1e-12)  # ties count as favourable
        live = hi - lo > 1
        lo, hi = np.where(live & ok, mid, lo), np.where(live & ~ok, mid, hi)
    p_g = p_l - m
    # only gain counts within 10 sd (+20) of each p_g's mean carry mass: the rest is below 1e-20
    sd = np.sqrt(n * p_g * (1 - p_g))
    half = int(np.ceil(10 * sd.max() + 20))
    start = np.clip(np.round(n * p_g).astype(int) - half, 0, max(n + 1 - (2 * half + 1), 0))
    gi = np.minimum(start[:, None] + np.arange(min(2 * half + 1, n + 1))[None, :], n)
    pg = stats.binom.pmf(gi, n, p_g[:, None])
    cond = np.clip(p_l / (1 - p_g), 0.0, 1.0)
    pl = stats.binom.cdf(lo[gi], n - gi, cond[:, None])  # cdf(-1) = 0
    return (pg * pl).sum(axis=1)


def noninferiority_exact(gains: int, losses: int, n: int, margin: float) -> ExactTest:
    """Exact unconditional p-value for H0: delta <= -margin, delta = P(candidate right) - P(baseline
    right) on the same items (margin >= 0). The supremum over the nuisance is searched on a grid of
    GRID values, then on a finer one around the largest."""
    if margin < 0 or not 0 <= gains + losses <= n or n < 1:
        raise ValueError("need 0 <= gains + losses <= n and margin >= 0")
    m = float(margin)
    if m >= 1:  # a proportion cannot fall by 1 or more: nothing to show
        return ExactTest("exact-unconditional-score", 0.0, float("inf"), float("nan"))
    z_obs = float(score(np.array([gains]), np.array([losses]), n, m)[0])
    if not z_obs > 0:  # no better than the margin itself: the tail holds at least about half the mass
        return ExactTest("exact-unconditional-score", 1.0, z_obs, float("nan"))
    top = (1 + m) / 2
    grid = np.linspace(m, top, GRID)
    p = _tail(n, m, z_obs, grid)
    k = int(np.argmax(p))
    fine = np.linspace(grid[max(k - 1, 0)], grid[min(k + 1, GRID - 1)], 41)
    pf = _tail(n, m, z_obs, fine)
    j = int(np.argmax(pf))
    best, where = (pf[j], fine[j]) if pf[j] >= p[k] else (p[k], grid[k])
    return ExactTest("exact-unconditional-score", float(min(1.0, best)), z_obs, float(where))
