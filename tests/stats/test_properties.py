"""Invariants that must hold for any input (hypothesis)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from qeval.stats import flips, mcnemar_exact, mean_delta, paired_bootstrap_ci, sign_flip_permutation, wilcoxon

binary_pairs = st.integers(2, 60).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 1), min_size=n, max_size=n), st.lists(st.integers(0, 1), min_size=n, max_size=n)))
real_pairs = st.integers(3, 40).flatmap(lambda n: st.tuples(
    st.lists(st.floats(-10, 10), min_size=n, max_size=n), st.lists(st.floats(-10, 10), min_size=n, max_size=n)))


@settings(max_examples=60, deadline=None)
@given(binary_pairs)
def test_binary_invariants(pair):
    b, c = (np.array(x, float) for x in pair)
    f = flips(b, c)
    p = mcnemar_exact(f).p_value
    assert 0 <= p <= 1
    # swapping baseline and variant swaps b and c and keeps the two-sided p
    g = flips(c, b)
    assert (g.base_only, g.cand_only) == (f.cand_only, f.base_only)
    assert abs(mcnemar_exact(g).p_value - p) < 1e-12
    # permuting items changes nothing
    perm = np.random.default_rng(0).permutation(len(b))
    assert flips(b[perm], c[perm]) == f


@settings(max_examples=60, deadline=None)
@given(real_pairs)
def test_interval_invariants(pair):
    b, c = (np.array(x, float) for x in pair)
    t = mean_delta(b, c, 0.9)
    assert t.ci_low <= t.delta + 1e-9 and t.delta <= t.ci_high + 1e-9
    s = mean_delta(c, b, 0.9)  # swapped: negated delta, mirrored interval
    assert np.isclose(s.delta, -t.delta) and np.isclose(s.ci_low, -t.ci_high) and np.isclose(s.ci_high, -t.ci_low)
    perm = np.random.default_rng(1).permutation(len(b))
    u = mean_delta(b[perm], c[perm], 0.9)
    assert np.isclose(u.ci_low, t.ci_low) and np.isclose(u.ci_high, t.ci_high)
    boot = paired_bootstrap_ci(b, c, 0.9, resamples=500, seed=3)
    assert boot.ci_low <= boot.delta + 1e-9 <= boot.ci_high + 2e-9
    mirrored = paired_bootstrap_ci(c, b, 0.9, resamples=500, seed=3)  # same draws, negated means
    assert np.isclose(mirrored.ci_low, -boot.ci_high) and np.isclose(mirrored.ci_high, -boot.ci_low)
    for p in (wilcoxon(b, c).p_value, sign_flip_permutation(b, c, resamples=300).p_value):
        assert 0 <= p <= 1
    assert np.isclose(wilcoxon(b[perm], c[perm]).p_value, wilcoxon(b, c).p_value)
