"""Paired tests of a variant against the baseline on the same items (arrays aligned by item id)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ._arrays import as_pair


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

    def rate_ci(self, confidence: float = 0.95) -> tuple[float, float]:
        """Clopper-Pearson interval of the flip rate."""
        k = self.base_only + self.cand_only
        ci = stats.binomtest(k, self.n).proportion_ci(confidence_level=confidence, method="exact")
        return float(ci.low), float(ci.high)


def is_binary(*arrays: np.ndarray) -> bool:
    return all(np.isin(np.asarray(a), (0, 1)).all() for a in arrays)


def flips(base: np.ndarray, cand: np.ndarray) -> Flips:
    """Count discordant pairs of binary (0/1) outcomes."""
    b, c = as_pair(base, cand)
    if not is_binary(b, c):
        raise ValueError("flips need binary scores (0 or 1)")
    b, c = b.astype(bool), c.astype(bool)
    return Flips(n=len(b), base_only=int((b & ~c).sum()), cand_only=int((~b & c).sum()),
                 both=int((b & c).sum()), neither=int((~b & ~c).sum()))


def effect_size_dz(base: np.ndarray, cand: np.ndarray) -> float | None:
    """Cohen's d_z of the paired differences (variant - baseline): their mean over their standard deviation
    (n - 1 in the denominator), the standardised effect MLflow's paired comparison reports as `effect_size`.
    None where it is undefined: fewer than two items, or differences that do not vary. Differences equal up
    to floating-point noise count as not varying: their sd is rounding error, and d_z would be its reciprocal."""
    b, c = as_pair(base, cand)
    d = c - b
    if len(d) < 2 or np.allclose(d, d[0], rtol=1e-9, atol=1e-12):
        return None
    return float(d.mean() / d.std(ddof=1))


@dataclass(frozen=True)
class TestResult:
    method: str
    n: int
    statistic: float
    p_value: float  # two-sided


def mcnemar_exact(f: Flips) -> TestResult:
    """Exact McNemar: a two-sided binomial test of b successes in b + c trials at p = 1/2."""
    n = f.base_only + f.cand_only
    p = 1.0 if n == 0 else float(stats.binomtest(f.base_only, n, 0.5).pvalue)
    return TestResult(method="mcnemar-exact", n=f.n, statistic=float(f.base_only), p_value=p)


def mcnemar_chi2(f: Flips, correction: bool = True) -> TestResult:
    """The chi-square form (with continuity correction by default), only where asked for."""
    b, c = f.base_only, f.cand_only
    if b + c == 0:
        return TestResult(method="mcnemar-chi2", n=f.n, statistic=0.0, p_value=1.0)
    stat = (abs(b - c) - (1 if correction else 0)) ** 2 / (b + c)
    return TestResult(method="mcnemar-chi2", n=f.n, statistic=float(stat), p_value=float(stats.chi2.sf(stat, 1)))


def wilcoxon(base: np.ndarray, cand: np.ndarray) -> TestResult:
    """Wilcoxon signed-rank on the paired differences (zero differences dropped, as Wilcoxon did)."""
    b, c = as_pair(base, cand)
    d = c - b
    if not np.any(d):
        return TestResult(method="wilcoxon-signed-rank", n=len(d), statistic=0.0, p_value=1.0)
    r = stats.wilcoxon(d, zero_method="wilcox")
    return TestResult(method="wilcoxon-signed-rank", n=len(d), statistic=float(r.statistic), p_value=float(r.pvalue))


def sign_flip_permutation(base: np.ndarray, cand: np.ndarray, resamples: int = 10000, seed: int = 0,
                          exact_up_to: int = 16) -> TestResult:
    """Paired permutation test of the mean difference: each item's sign flipped at random.

    Exact enumeration of all 2^n sign patterns for n <= exact_up_to, else seeded Monte Carlo with
    the (k + 1) / (B + 1) correction. Hand-written: scipy's permutation_test does the same but
    without chunking and is slower for large n.
    """
    b, c = as_pair(base, cand)
    d = c - b
    n = len(d)
    observed = abs(d.mean())
    if not np.any(d):
        return TestResult(method="sign-flip-permutation", n=n, statistic=0.0, p_value=1.0)
    tol = 1e-12 * max(1.0, observed)
    if n <= exact_up_to:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        means = np.abs(signs @ d / n)
        p = float(np.mean(means >= observed - tol))
        return TestResult(method="sign-flip-permutation-exact", n=n, statistic=float(d.mean()), p_value=p)
    rng = np.random.default_rng(seed)
    hits = 0
    chunk = max(1, min(resamples, 20_000_000 // n))
    for start in range(0, resamples, chunk):
        k = min(chunk, resamples - start)
        signs = rng.choice((-1.0, 1.0), size=(k, n))
        hits += int(np.count_nonzero(np.abs(signs @ d / n) >= observed - tol))
    return TestResult(method="sign-flip-permutation", n=n, statistic=float(d.mean()),
                      p_value=(hits + 1) / (resamples + 1))
