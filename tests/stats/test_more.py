"""BCa, clustered errors, permutation, Wilcoxon, power and multiplicity against independent code."""

import itertools
import math

import numpy as np
import pytest
import statsmodels.api as sm
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import NormalIndPower

from qeval.stats import (adjust, clustered_mean_delta, discordance_upper, flips, mcnemar_chi2, mde, n_required,
                         observed_power, paired_bootstrap_ci, sign_flip_permutation, wilcoxon)


def pair(n, seed, shift=-0.03, noise=0.1):
    rng = np.random.default_rng(seed)
    base = rng.normal(0.6, 0.2, n)
    return base, base + rng.normal(shift, noise, n)


def test_bca_agrees_with_scipy():
    base, cand = pair(120, 1)
    d = cand - base
    ours = paired_bootstrap_ci(base, cand, confidence=0.9, resamples=40000, seed=3, method="bca")
    ref = sps.bootstrap((d,), np.mean, confidence_level=0.9, n_resamples=40000, method="BCa",
                        random_state=4).confidence_interval
    assert ours.method == "paired-bootstrap-bca"
    assert ours.ci_low == pytest.approx(ref.low, abs=0.002) and ours.ci_high == pytest.approx(ref.high, abs=0.002)


@pytest.mark.parametrize("seed", range(4))
def test_clustered_se_matches_statsmodels(seed):
    base, cand = pair(90, seed)
    groups = np.repeat([f"g{k}" for k in range(15)], 6)
    ours = clustered_mean_delta(base, cand, groups, confidence=0.9, adjustment="CR1")
    codes = np.unique(groups, return_inverse=True)[1]
    fit = sm.OLS(cand - base, np.ones(90)).fit(cov_type="cluster", cov_kwds={"groups": codes}, use_t=True)
    assert ours.se == pytest.approx(float(fit.bse[0]), rel=1e-9)
    lo, hi = fit.conf_int(alpha=0.1)[0]
    assert (ours.ci_low, ours.ci_high) == (pytest.approx(lo, rel=1e-6), pytest.approx(hi, rel=1e-6))


def inv_sqrt(m):
    w, v = np.linalg.eigh(m)
    return v @ np.diag(w ** -0.5) @ v.T


def cr2_brute_force(d, codes):
    """CR2 and Imbens-Kolesar's BM df from the matrices themselves: n x n hat matrix, general formulas."""
    n = len(d)
    x = np.ones((n, 1))
    bread = np.linalg.inv(x.T @ x)
    h = x @ bread @ x.T
    e = d - (h @ d)
    meat, cols = np.zeros((1, 1)), []
    for g in np.unique(codes):
        rows = np.flatnonzero(codes == g)
        a = inv_sqrt(np.eye(len(rows)) - h[np.ix_(rows, rows)])
        u = x[rows].T @ a @ e[rows]
        meat += np.outer(u, u)
        cols.append((np.eye(n) - h)[rows].T @ a @ x[rows] @ bread @ np.ones(1))  # G_g for the contrast l = 1
    var = (bread @ meat @ bread)[0, 0]
    gm = np.column_stack(cols)
    lam = np.linalg.eigvalsh(gm.T @ gm)
    return var, lam.sum() ** 2 / (lam ** 2).sum()


@pytest.mark.parametrize("seed", range(4))
def test_clustered_cr2_matches_brute_force_matrices(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 12, size=9)  # unbalanced, single-item clusters included by chance
    sizes[0] = 1
    codes = np.repeat(np.arange(len(sizes)), sizes)
    n = len(codes)
    base = rng.normal(0.6, 0.2, n)
    cand = base + rng.normal(-0.03, 0.1, n) + rng.normal(0, 0.1, len(sizes))[codes]
    perm = rng.permutation(n)  # groups need not be contiguous
    base, cand, codes = base[perm], cand[perm], codes[perm]
    ours = clustered_mean_delta(base, cand, [f"g{k}" for k in codes], confidence=0.9)
    var, df = cr2_brute_force(cand - base, codes)
    assert ours.se == pytest.approx(math.sqrt(var), rel=1e-9)
    assert ours.df == pytest.approx(df, rel=1e-9)
    half = sps.t.ppf(0.95, df) * math.sqrt(var)
    assert (ours.ci_low, ours.ci_high) == (pytest.approx(ours.delta - half, rel=1e-9),
                                           pytest.approx(ours.delta + half, rel=1e-9))
    assert ours.method == f"clustered-cr2 (9 groups, BM df {df:.1f})"
    assert 1 <= ours.df <= 8


def test_clustered_cr2_equals_cr1_when_balanced():
    """Equal cluster sizes: CR2's 1 / (1 - 1/G) is CR1's G / (G - 1), and the BM df is G - 1."""
    base, cand = pair(90, 5)
    groups = np.repeat([f"g{k}" for k in range(15)], 6)
    cr2 = clustered_mean_delta(base, cand, groups, confidence=0.9)
    cr1 = clustered_mean_delta(base, cand, groups, confidence=0.9, adjustment="CR1")
    assert cr2.se == pytest.approx(cr1.se, rel=1e-12) and cr2.df == pytest.approx(14, rel=1e-12)
    assert (cr2.ci_low, cr2.ci_high) == (pytest.approx(cr1.ci_low, rel=1e-9), pytest.approx(cr1.ci_high, rel=1e-9))


def test_permutation_exact_matches_brute_force_enumeration():
    base, cand = pair(10, 7, shift=-0.1)
    d = cand - base
    obs = abs(d.mean())
    count = sum(abs(np.mean(np.array(s) * d)) >= obs - 1e-12 for s in itertools.product((1, -1), repeat=10))
    assert sign_flip_permutation(base, cand).p_value == pytest.approx(count / 2 ** 10)


def test_permutation_monte_carlo_agrees_with_scipy():
    base, cand = pair(60, 8, shift=-0.03)
    ours = sign_flip_permutation(base, cand, resamples=20000, seed=1).p_value
    ref = sps.permutation_test((cand - base,), np.mean, permutation_type="samples", n_resamples=20000,
                               random_state=2).pvalue
    assert ours == pytest.approx(ref, abs=0.015)


def test_wilcoxon_matches_scipy():
    base, cand = pair(50, 9)
    assert wilcoxon(base, cand).p_value == pytest.approx(sps.wilcoxon(cand - base).pvalue)


def test_mcnemar_chi2_matches_statsmodels():
    from statsmodels.stats.contingency_tables import mcnemar

    rng = np.random.default_rng(2)
    base = (rng.random(200) < 0.6).astype(float)
    cand = np.where(rng.random(200) < 0.2, 1 - base, base)
    f = flips(base, cand)
    ref = mcnemar([[f.both, f.base_only], [f.cand_only, f.neither]], exact=False, correction=True)
    assert mcnemar_chi2(f).p_value == pytest.approx(ref.pvalue)
    lo, hi = f.rate_ci()
    assert lo <= f.rate <= hi


@pytest.mark.parametrize("n, sigma", [(50, 0.4), (400, 0.7), (1000, 0.2)])
def test_mde_matches_statsmodels_power(n, sigma):
    got = mde(n, sigma, alpha=0.05, beta=0.2)
    es = NormalIndPower().solve_power(effect_size=None, nobs1=n, alpha=0.05, power=0.8, ratio=0,
                                      alternative="larger")
    assert got.mde == pytest.approx(es * sigma, rel=1e-4)  # statsmodels solves numerically
    from statsmodels.stats.power import TTestPower

    exact = TTestPower().solve_power(effect_size=got.mde / sigma, alpha=0.05, power=0.8, alternative="larger")
    assert n_required(got.mde, sigma) == math.ceil(exact)  # the t test's own n
    for margin, sd in ((0.05, 0.15), (0.02, 0.3), (0.2, 0.1)):
        n = TTestPower().solve_power(effect_size=margin / sd, alpha=0.05, power=0.8, alternative="larger")
        assert n_required(margin, sd) == math.ceil(n)


def test_discordance_upper_is_clopper_pearson():
    assert discordance_upper(0, 20) == pytest.approx(1 - 0.05 ** (1 / 20))
    ref = sps.binomtest(3, 50).proportion_ci(confidence_level=0.9, method="exact").high
    assert discordance_upper(3, 50, alpha=0.05) == pytest.approx(ref)


def test_observed_power_does_not_claim_power_from_zero_flips():
    x = np.ones(20)
    p = observed_power(x, x.copy(), binary=True)
    assert p.mde > 0.2  # 20 items with no flips still allow a 14% flip rate
    big = np.ones(2000)
    assert observed_power(big, big.copy(), binary=True).mde < 0.05


@pytest.mark.parametrize("method, sm_name", [("holm", "holm"), ("bh", "fdr_bh")])
def test_adjust_matches_statsmodels(method, sm_name):
    p = np.random.default_rng(0).random(12) ** 2
    assert np.allclose(adjust(p, method), multipletests(p, method=sm_name)[1])
    assert np.allclose(adjust(p, "none"), p)


def test_holm_is_statsmodels_holm_to_the_bit():
    rng = np.random.default_rng(1)
    cases = [rng.random(n) ** k for n in (1, 2, 7, 40) for k in (1, 3)]
    cases += [np.array([0.01, 0.01, 0.04, 0.04, 0.5]), np.array([0.3, 0.9, 1.0, 0.6]), np.array([0.02, np.nan, 0.01])]
    for p in cases:
        assert np.array_equal(adjust(p, "holm"), multipletests(p, method="holm")[1], equal_nan=True), p


def _table(e, f, g, h):
    """Arrays for a paired 2x2 table: e both right, f only the candidate, g only the baseline, h neither."""
    base = np.array([1] * e + [0] * f + [1] * g + [0] * h, float)
    cand = np.array([1] * e + [1] * f + [0] * g + [0] * h, float)
    return base, cand


@pytest.mark.parametrize("n, p_disc, margin", [(248, 0.10, 0.05), (120, 0.20, 0.10), (400, 0.05, 0.03)])
def test_newcombe_false_pass_rate_by_exact_enumeration(n, p_disc, margin):
    """At a true delta of exactly -margin the one-sided bound clears -margin about alpha of the time:
    summed exactly over every (gain, loss) count, not simulated. Measured: 4.96% (248, 10%, 0.05),
    5.37% at the most skewed case here (4% losses vs 1% gains); a Wald or bootstrap bound gives 6.0%
    for the first."""
    from qeval.stats import paired_proportion_ci

    gain, loss = (p_disc - margin) / 2, (p_disc + margin) / 2
    false_pass = 0.0
    for f in range(0, n + 1):
        pf = sps.binom.pmf(f, n, gain)
        if pf < 1e-12:
            continue
        for g in range(0, n - f + 1):
            pr = pf * sps.binom.pmf(g, n - f, loss / (1 - gain))
            if pr < 1e-12:
                continue
            e = int(0.6 * n) - g
            if e < 0 or e + f + g > n:
                continue
            base, cand = _table(e, f, g, n - e - f - g)
            false_pass += pr * (paired_proportion_ci(base, cand, confidence=0.9).ci_low > -margin)
    assert false_pass <= 0.055, false_pass


def test_newcombe_is_not_degenerate_without_flips_and_mirrors():
    from qeval.stats import paired_proportion_ci

    base, cand = _table(40, 0, 0, 13)
    ci = paired_proportion_ci(base, cand, 0.9)
    assert ci.delta == 0 and ci.ci_low < -0.01 and ci.ci_high > 0.01
    base, cand = _table(30, 7, 2, 11)
    a, b = paired_proportion_ci(base, cand, 0.9), paired_proportion_ci(cand, base, 0.9)
    assert a.ci_low == pytest.approx(-b.ci_high) and a.ci_high == pytest.approx(-b.ci_low)


def test_clustered_power_is_the_cluster_robust_t_mde_and_never_gains_from_groups():
    from qeval.stats import clustered, clustered_mean_delta, design_effect, mean_delta, observed_power

    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(30), 4)
    shared = rng.normal(0, 0.2, 30)[groups]  # a within-group effect: positive intra-group correlation
    base = rng.normal(0.5, 0.1, 120)
    cand = base + shared + rng.normal(0, 0.1, 120)
    t, cr = mean_delta(base, cand), clustered_mean_delta(base, cand, groups.astype(str))
    iid = observed_power(base, cand, False)
    seen = clustered(iid, (cr.se / t.se) ** 2, cr.df, 30)
    want = (sps.t.ppf(0.95, cr.df) + sps.t.ppf(0.8, cr.df)) * cr.se  # independently: the t-based MDE
    assert seen.mde == pytest.approx(want, rel=1e-12) and "design effect" in seen.method
    assert seen.mde > iid.mde  # 4 correlated items are worth less than 4 independent ones
    assert clustered(iid, 0.25, 119, 30).mde >= iid.mde  # a design effect below 1 claims no power
    # the design effect of the plan: 1 + (m - 1) icc for equal groups; size-weighted for unequal ones
    assert design_effect(np.full(30, 4), 0.5) == pytest.approx(2.5)
    assert design_effect(np.array([1, 1, 10]), 0.2) == pytest.approx(1 + (102 / 12 - 1) * 0.2)


def test_n_required_clustered_against_statsmodels_on_group_means():
    from statsmodels.stats.power import TTestPower

    from qeval.stats import n_required, n_required_clustered

    assert n_required_clustered(0.05, 0.15, 1, 0.0) == n_required(0.05, 0.15)  # one item per group: the iid plan
    for m, icc in ((3, 0.5), (5, 0.2), (10, 0.05)):
        sigma_g = 0.15 * math.sqrt((1 + (m - 1) * icc) / m)
        groups = TTestPower().solve_power(effect_size=0.05 / sigma_g, alpha=0.05, power=0.8, alternative="larger")
        n = n_required_clustered(0.05, 0.15, m, icc)
        assert n % m == 0 and n // m == math.ceil(groups)
