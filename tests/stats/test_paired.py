"""The paired statistics, checked against scipy / statsmodels and brute force."""

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar

from qeval.stats import decide, flips, mcnemar_exact, mean_delta, paired_bootstrap_ci
from qeval.stats._kernel import draw_and_sum
from qeval.stats._resample import BLOCK_RESAMPLES, DRAWS_PER_CALL, EXACT_FROM, call_sizes, index_resample_means


def binary_pair(n, p_base, p_flip, seed):
    rng = np.random.default_rng(seed)
    base = (rng.random(n) < p_base).astype(float)
    cand = np.where(rng.random(n) < p_flip, 1 - base, base)
    return base, cand


@pytest.mark.parametrize("seed", range(8))
def test_mcnemar_exact_matches_statsmodels(seed):
    base, cand = binary_pair(120, 0.6, 0.15, seed)
    f = flips(base, cand)
    table = [[f.both, f.base_only], [f.cand_only, f.neither]]
    want = mcnemar(table, exact=True).pvalue
    assert mcnemar_exact(f).p_value == pytest.approx(want, rel=1e-9)


def test_flips_count_by_brute_force():
    base, cand = binary_pair(200, 0.5, 0.3, 1)
    f = flips(base, cand)
    assert f.base_only == sum(1 for b, c in zip(base, cand) if b == 1 and c == 0)
    assert f.cand_only == sum(1 for b, c in zip(base, cand) if b == 0 and c == 1)
    assert f.base_only + f.cand_only + f.both + f.neither == 200
    assert f.rate == pytest.approx((f.base_only + f.cand_only) / 200)


def test_no_discordant_pairs_gives_p_one():
    x = np.array([1, 0, 1, 1.0])
    assert mcnemar_exact(flips(x, x)).p_value == 1.0


@pytest.mark.parametrize("conf", [0.9, 0.95])
def test_mean_delta_matches_scipy_ttest_rel(conf):
    rng = np.random.default_rng(3)
    base = rng.normal(0.5, 0.2, 80)
    cand = base + rng.normal(-0.02, 0.05, 80)
    got = mean_delta(base, cand, confidence=conf)
    ci = sps.ttest_rel(cand, base).confidence_interval(confidence_level=conf)
    assert (got.ci_low, got.ci_high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert got.delta == pytest.approx((cand - base).mean())


def test_bootstrap_agrees_with_scipy_percentile():
    rng = np.random.default_rng(5)
    base = rng.normal(0.6, 0.2, 150)
    cand = base + rng.normal(-0.03, 0.1, 150)
    ours = paired_bootstrap_ci(base, cand, confidence=0.9, resamples=20000, seed=1)
    ref = sps.bootstrap((cand - base,), np.mean, confidence_level=0.9, n_resamples=20000, method="percentile",
                        random_state=2).confidence_interval
    # two independent Monte Carlo estimates of the same quantiles: agree to Monte Carlo error
    assert ours.ci_low == pytest.approx(ref.low, abs=0.003)
    assert ours.ci_high == pytest.approx(ref.high, abs=0.003)


def test_bootstrap_is_seeded_and_threads_do_not_change_it():
    rng = np.random.default_rng(2)
    base, cand = rng.random(40_000), rng.random(40_000)  # enough draws for the thread pool, two pieces per resample
    a = paired_bootstrap_ci(base, cand, resamples=300, seed=7, threads=1)
    b = paired_bootstrap_ci(base, cand, resamples=300, seed=7, threads=3)
    c = paired_bootstrap_ci(base, cand, resamples=300, seed=7)
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high) == (c.ci_low, c.ci_high)
    assert paired_bootstrap_ci(base, cand, resamples=300, seed=8).ci_low != a.ci_low


def index_reference(bits, n, size, exact):
    """Scalar multiply-shift over the same raw words: two 32-bit draws a word (low half first); with
    exact, Lemire's rejection: a draw whose product has low 32 bits under 2^32 mod n is replaced, in
    order, by the low half of a fresh word."""
    words = [int(w) for w in bits.random_raw((size + 1) // 2)]
    draws = [half for w in words for half in (w & 0xFFFFFFFF, w >> 32)][:size]
    threshold = 2 ** 32 % n if exact else 0
    out = []
    for w in draws:
        while (w * n) % 2 ** 32 < threshold:
            w = int(bits.random_raw()) & 0xFFFFFFFF
        out.append(w * n // 2 ** 32)
    return out


@pytest.mark.parametrize("n, resamples", [(300, 2000), (max(DRAWS_PER_CALL, EXACT_FROM) + 3, 3)])
def test_bootstrap_matches_brute_force_loop(n, resamples):
    """The same random stream (an SFC64 generator per block of resamples, spawned from the seed; calls
    sized by n alone; scalar multiply-shift), then one plain mean per resample."""
    rng = np.random.default_rng(4)
    base, cand = rng.random(n), rng.random(n)  # > 256 distinct differences: the index-resampling path
    d = cand - base
    rows, pieces = call_sizes(n)
    means = []
    for child in np.random.SeedSequence(11).spawn(-(-resamples // BLOCK_RESAMPLES)):
        bits = np.random.SFC64(child)
        k = min(BLOCK_RESAMPLES, resamples - len(means))
        drawn = [[] for _ in range(k)]
        for r0 in range(0, k, rows):
            r = min(rows, k - r0)
            for size in pieces:
                idx = index_reference(bits, n, r * size, exact=n > EXACT_FROM)
                for j in range(r):
                    drawn[r0 + j] += idx[j * size:(j + 1) * size]
        means += [float(np.mean(d[row])) for row in drawn]
    assert index_resample_means(d, resamples, 11) == pytest.approx(means, abs=1e-12)
    got = paired_bootstrap_ci(base, cand, confidence=0.9, resamples=resamples, seed=11)
    assert got.ci_low == pytest.approx(np.quantile(means, 0.05), abs=1e-12)
    assert got.ci_high == pytest.approx(np.quantile(means, 0.95), abs=1e-12)


def test_decisions():
    assert decide("noninferiority", -0.02, 0.03, margin=0.05).verdict == "PASS"
    assert decide("noninferiority", -0.08, 0.03, margin=0.05).verdict == "FAIL"
    assert decide("noninferiority", -0.08, 0.03, margin=0.05, mde=0.2).verdict == "INCONCLUSIVE"
    assert decide("noninferiority", -0.3, -0.1, margin=0.05, mde=0.2).verdict == "FAIL"  # clearly worse
    assert decide("noninferiority", -0.02, 0.03, margin=0.05, mde=0.2).verdict == "INCONCLUSIVE"
    assert decide("equivalence", -0.02, 0.03, margin=0.05).verdict == "PASS"
    assert decide("equivalence", -0.02, 0.07, margin=0.05).verdict == "FAIL"
    assert decide("superiority", 0.06, 0.1, margin=0.05).verdict == "PASS"
    assert decide("superiority", 0.01, 0.1, margin=0.05).verdict == "FAIL"


def test_bad_input_is_rejected():
    with pytest.raises(ValueError):
        mean_delta(np.array([1.0, np.nan]), np.array([1.0, 0.0]))
    with pytest.raises(ValueError):
        flips(np.array([0.5]), np.array([1.0]))
    with pytest.raises(ValueError):
        paired_bootstrap_ci(np.ones(3), np.ones(4))


def test_multinomial_path_has_the_index_path_distribution():
    """For 0/1 metrics the bootstrap draws value counts instead of indices: same distribution."""
    base, cand = binary_pair(300, 0.6, 0.2, 6)
    fast = paired_bootstrap_ci(base, cand, confidence=0.9, resamples=40000, seed=1)
    d = cand - base
    rng = np.random.default_rng(2)
    slow = np.array([d[rng.integers(0, 300, 300)].mean() for _ in range(40000)])
    lo, hi = np.quantile(slow, [0.05, 0.95])
    assert fast.ci_low == pytest.approx(lo, abs=0.004) and fast.ci_high == pytest.approx(hi, abs=0.004)


def test_compiled_draws_leave_out_and_list_the_rejected_ones():
    """The compiled loop against a scalar one, with a threshold that rejects about half the draws and an
    odd row length (the unrolled loop's tail)."""
    words = np.random.SFC64(3).random_raw(500).view(np.uint32)[:999]
    d, threshold, rows, size = np.random.default_rng(0).normal(size=7), 2 ** 31, 3, 333
    sums, rejected = np.zeros(rows), np.zeros(999, np.int64)
    nrej = draw_and_sum(words, d, np.uint64(threshold), rows, size, sums, rejected)
    want_sums, want_rej = np.zeros(rows), []
    for k, w in enumerate(int(x) for x in words):
        if (w * 7) % 2 ** 32 < threshold:
            want_rej.append(k)
        else:
            want_sums[k // size] += d[w * 7 >> 32]
    assert rejected[:nrej].tolist() == want_rej and 300 < nrej < 700
    assert sums == pytest.approx(want_sums, abs=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_effect_size_dz_is_the_mean_difference_over_its_sd(seed):
    from qeval.stats import effect_size_dz

    rng = np.random.default_rng(seed)
    base = rng.normal(0.6, 0.2, 80)
    cand = base + rng.normal(-0.03, 0.1, 80)
    d = cand - base
    assert effect_size_dz(base, cand) == pytest.approx(np.mean(d) / np.std(d, ddof=1), rel=1e-12)
    b, c = binary_pair(150, 0.6, 0.2, seed)  # 0/1 scores: the same formula over differences in {-1, 0, 1}
    assert effect_size_dz(b, c) == pytest.approx(np.mean(c - b) / np.std(c - b, ddof=1), rel=1e-12)
    assert effect_size_dz(cand, base) == pytest.approx(-effect_size_dz(base, cand))  # variant - baseline


def test_effect_size_dz_is_none_where_undefined():
    from qeval.stats import effect_size_dz

    x = np.array([0.1, 0.7, 0.3])
    assert effect_size_dz(x, x) is None  # no difference at all
    assert effect_size_dz(x, x + 0.2) is None  # a constant shift: its sd is rounding noise, not a spread
    assert effect_size_dz(np.array([0.0]), np.array([1.0])) is None  # one item has no sd
    assert effect_size_dz(np.array([0.0, 0.0]), np.array([1.0, 0.0])) == pytest.approx(0.5 / np.std([1, 0], ddof=1))
