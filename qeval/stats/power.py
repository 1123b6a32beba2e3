"""Power: the smallest true drop a paired suite of n items detects, and the n a margin needs.

One-sided test at level alpha with power 1 - beta on the mean paired difference (normal
approximation): MDE = (z_{1-alpha} + z_{1-beta}) * sigma_d / sqrt(n).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

# Planning variance of a 0/1 paired difference with no pilot: two independent Bernoulli(1/2) arms.
# Positive correlation between baseline and variant (the usual case) only lowers it.
BINARY_PLANNING_VAR = 0.5


@dataclass(frozen=True)
class Power:
    method: str
    n: int
    alpha: float
    beta: float
    sigma: float  # the standard deviation of the per-item difference that was assumed
    mde: float  # minimum detectable effect, in the metric's units

    def supports(self, margin: float) -> bool:
        return self.mde <= margin


def _z(alpha: float, beta: float) -> float:
    return float(stats.norm.ppf(1 - alpha) + stats.norm.ppf(1 - beta))


def mde(n: int, sigma: float, alpha: float = 0.05, beta: float = 0.2, method: str = "normal") -> Power:
    if n <= 0:
        return Power(method=method, n=n, alpha=alpha, beta=beta, sigma=sigma, mde=math.inf)
    return Power(method=method, n=n, alpha=alpha, beta=beta, sigma=sigma, mde=_z(alpha, beta) * sigma / math.sqrt(n))


def n_required(margin: float, sigma: float, alpha: float = 0.05, beta: float = 0.2, binary: bool = False) -> int:
    """Items needed so that MDE <= margin; for 0/1 metrics with Fleiss' continuity correction (their
    gate interval is continuity-corrected too), otherwise the exact n of the one-sided t test the gate
    uses (noncentral t; statsmodels' TTestPower rounded up)."""
    if margin <= 0:
        return math.inf  # type: ignore[return-value]
    if binary:
        n = (_z(alpha, beta) * sigma / margin) ** 2
        n = n / 4 * (1 + math.sqrt(1 + 4 / (n * margin))) ** 2
        return max(2, math.ceil(n))
    return _t_units(margin / sigma, alpha, beta)


def _t_units(effect: float, alpha: float, beta: float) -> int:
    """The fewest independent units whose one-sided t test at alpha detects `effect` (in sd units) with
    power 1 - beta, exactly (noncentral t), searched from Guenther's approximation (z^2 / effect^2 plus
    z_alpha^2 / 2), which is within a unit or two of it (one short at 57 for margin 0.05, sd 0.15:
    power 0.7999)."""
    def power(k: int) -> float:
        return float(stats.nct.sf(stats.t.ppf(1 - alpha, k - 1), k - 1, effect * math.sqrt(k)))

    k = max(2, math.ceil((_z(alpha, beta) / effect) ** 2 + float(stats.norm.ppf(1 - alpha)) ** 2 / 2))
    while k > 2 and power(k - 1) >= 1 - beta:
        k -= 1
    while power(k) < 1 - beta:
        k += 1
    return k


def clustered(power: Power, design_effect: float, df: float, n_groups: int) -> Power:
    """A power figure for items that share groups: the iid MDE scaled by the design effect (the variance
    of the mean over the iid one; below 1 is not believed: grouping may not claim power) and by t
    quantiles at the interval's degrees of freedom in place of z."""
    deff = max(1.0, design_effect)
    t_over_z = _t(power.alpha, power.beta, df) / _z(power.alpha, power.beta)
    return Power(method=f"{power.method}, clustered ({n_groups} groups, design effect {deff:.2f}, df {df:.1f})",
                 n=power.n, alpha=power.alpha, beta=power.beta, sigma=power.sigma * math.sqrt(deff),
                 mde=power.mde * math.sqrt(deff) * t_over_z)


def design_effect(group_sizes: np.ndarray, icc: float) -> float:
    """1 + (m_w - 1) icc, m_w the size-weighted mean group size (sum m^2 / n): the variance of the mean
    of grouped items over that of as many independent ones, at intra-group correlation icc."""
    m = np.asarray(group_sizes, float)
    return float(1 + ((m ** 2).sum() / m.sum() - 1) * icc)


def _t(alpha: float, beta: float, df: float) -> float:
    return float(stats.t.ppf(1 - alpha, df) + stats.t.ppf(1 - beta, df))


def n_required_clustered(margin: float, sigma: float, group_size: int, icc: float, alpha: float = 0.05,
                         beta: float = 0.2) -> int:
    """Items needed when they come in groups of `group_size` with intra-group correlation `icc`: the
    groups' mean differences are the independent units (variance sigma^2 (1 + (m - 1) icc) / m), and the
    cluster-robust t test has G - 1 df, so the t test's exact n is counted in groups."""
    m = max(1, group_size)
    return n_required(margin, sigma * math.sqrt((1 + (m - 1) * icc) / m), alpha, beta) * m  # in groups


def discordance_upper(discordant: int, n: int, alpha: float = 0.05) -> float:
    """Clopper-Pearson one-sided (1 - alpha) upper bound of the discordant-pair rate."""
    if n == 0:
        return 1.0
    if discordant >= n:
        return 1.0
    return float(stats.beta.ppf(1 - alpha, discordant + 1, n - discordant))


def observed_power(base: np.ndarray, cand: np.ndarray, binary: bool, alpha: float = 0.05,
                   beta: float = 0.2) -> Power:
    """Power after a run, from the observed paired variance.

    For 0/1 scores the variance of d is at most the discordance rate; using its Clopper-Pearson
    upper bound keeps a suite with few or no flips from claiming power it does not have (zero flips
    in 20 items still allows a 14% discordance rate).
    """
    d = np.asarray(cand, float) - np.asarray(base, float)
    n = len(d)
    if binary:
        disc = int(np.count_nonzero(d))
        sigma = max(float(d.std(ddof=1)) if n > 1 else 0.0, math.sqrt(discordance_upper(disc, n, alpha)))
        return mde(n, sigma, alpha, beta, method="binary-discordance-bound")
    sigma = float(d.std(ddof=1)) if n > 1 else math.inf
    return mde(n, sigma, alpha, beta, method="observed-sd")


def planned_power(n: int, binary: bool, alpha: float, beta: float, flip_rate: float, sd: float | None,
                  observed_sd: float | None = None) -> Power:
    """The design's power: from the planning flip rate (0/1 metrics) or planning sd, not from this run's
    noise; falls back to the observed sd for a continuous metric with no planning sd."""
    if binary:
        return mde(n, math.sqrt(flip_rate), alpha, beta, method=f"planned (flip rate {flip_rate:g})")
    if sd is not None:
        return mde(n, sd, alpha, beta, method=f"planned (sd {sd:g})")
    return mde(n, observed_sd if observed_sd is not None else math.inf, alpha, beta, method="observed sd")
