"""Paired comparisons of a variant against the baseline on the same items.

Every function takes the two score arrays already aligned by item id; `align` in the compare step
does that and reports the unpaired items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats


def _as_pair(base: np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    b, c = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    if b.shape != c.shape or b.ndim != 1:
        raise ValueError(f"paired arrays must be 1-D and the same length, got {b.shape} and {c.shape}")
    if not (np.isfinite(b).all() and np.isfinite(c).all()):
        raise ValueError("scores must be finite (NaN or inf found)")
    return b, c


@dataclass(frozen=True)
class Flips:
    n: int
    base_only: int  # b: baseline right, variant wrong
    cand_only: int  # c: baseline wrong, variant right
    both: int
    neither: int

    @property
    def rate(self) -> float:
        return (self.base_only + self.cand_only) / self.n if self.n else 0.0


def flips(base: np.ndarray, cand: np.ndarray) -> Flips:
    """Count discordant pairs of binary (0/1) outcomes."""
    b, c = _as_pair(base, cand)
    if not (np.isin(b, (0, 1)).all() and np.isin(c, (0, 1)).all()):
        raise ValueError("flips need binary scores (0 or 1)")
    b, c = b.astype(bool), c.astype(bool)
    return Flips(n=len(b), base_only=int((b & ~c).sum()), cand_only=int((~b & c).sum()),
                 both=int((b & c).sum()), neither=int((~b & ~c).sum()))


@dataclass(frozen=True)
class McNemar:
    method: str
    b: int
    c: int
    p_value: float  # two-sided


def mcnemar_exact(f: Flips) -> McNemar:
    """Exact McNemar: a two-sided binomial test of b successes in b + c trials at p = 1/2."""
    n = f.base_only + f.cand_only
    p = 1.0 if n == 0 else float(stats.binomtest(f.base_only, n, 0.5).pvalue)
    return McNemar(method="mcnemar-exact", b=f.base_only, c=f.cand_only, p_value=p)


@dataclass(frozen=True)
class MeanDelta:
    method: str
    n: int
    base_mean: float
    cand_mean: float
    delta: float  # candidate - baseline
    se: float
    ci_low: float
    ci_high: float
    confidence: float


def mean_delta(base: np.ndarray, cand: np.ndarray, confidence: float = 0.95) -> MeanDelta:
    """The paired closed-form (t) interval of the mean of per-item differences, two-sided."""
    b, c = _as_pair(base, cand)
    d = c - b
    n = len(d)
    se = float(d.std(ddof=1) / np.sqrt(n)) if n > 1 else float("inf")
    t = float(stats.t.ppf(0.5 + confidence / 2, df=max(n - 1, 1)))
    half = t * se if se > 0 else 0.0
    return MeanDelta(method="paired-t", n=n, base_mean=float(b.mean()), cand_mean=float(c.mean()),
                     delta=float(d.mean()), se=se, ci_low=float(d.mean() - half), ci_high=float(d.mean() + half),
                     confidence=confidence)


@dataclass(frozen=True)
class BootstrapCI:
    method: str
    n: int
    delta: float
    ci_low: float
    ci_high: float
    confidence: float
    resamples: int
    seed: int


def paired_bootstrap_ci(base: np.ndarray, cand: np.ndarray, confidence: float = 0.95, resamples: int = 10000,
                        seed: int = 0, chunk: int = 2000) -> BootstrapCI:
    """Percentile bootstrap of the mean paired difference: items resampled together, seeded, vectorized.

    Hand-written: scipy.stats.bootstrap resamples the same way but holds the whole resample matrix in
    memory; chunking keeps n x resamples bounded for large suites.
    """
    b, c = _as_pair(base, cand)
    d = c - b
    n = len(d)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    for start in range(0, resamples, chunk):
        k = min(chunk, resamples - start)
        idx = rng.integers(0, n, size=(k, n))
        means[start:start + k] = d[idx].mean(axis=1)
    alpha = 1 - confidence
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return BootstrapCI(method="paired-bootstrap-percentile", n=n, delta=float(d.mean()), ci_low=float(lo),
                       ci_high=float(hi), confidence=confidence, resamples=resamples, seed=seed)


Verdict = Literal["PASS", "FAIL", "INCONCLUSIVE"]


@dataclass(frozen=True)
class NonInferiority:
    method: str
    delta: float
    lower_bound: float  # one-sided (1 - alpha) lower confidence bound of delta
    margin: float  # absolute, in the metric's units: pass when lower_bound > -margin
    alpha: float
    verdict: Verdict


def noninferiority(base: np.ndarray, cand: np.ndarray, margin: float, alpha: float = 0.05,
                   resamples: int = 10000, seed: int = 0) -> NonInferiority:
    """Pass when the one-sided (1 - alpha) lower bound of delta = cand - base lies above -margin.

    The one-sided bound is the alpha quantile of the paired bootstrap, i.e. the lower end of a
    two-sided (1 - 2 alpha) interval.
    """
    if margin < 0:
        raise ValueError("margin must be >= 0")
    ci = paired_bootstrap_ci(base, cand, confidence=1 - 2 * alpha, resamples=resamples, seed=seed)
    verdict: Verdict = "PASS" if ci.ci_low > -margin else "FAIL"
    return NonInferiority(method="paired-bootstrap", delta=ci.delta, lower_bound=ci.ci_low, margin=margin,
                          alpha=alpha, verdict=verdict)
