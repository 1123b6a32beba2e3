"""The exact unconditional non-inferiority test for paired 0/1 scores, against brute force: scipy's
optimizer for the restricted likelihood, the whole trinomial enumerated for the tail, and the test's
size summed exactly over every outcome."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, stats

from qeval.record.run import Comparison
from qeval.stats import paired_proportion_ci
from qeval.stats.exact import _tail, noninferiority_exact, restricted_loss_rate, score
from qeval.verdict.gates import evaluate
from qeval.verdict.policy import GatePolicy, GateRule


def test_restricted_likelihood_is_maximal():
    rng = np.random.default_rng(0)
    for _ in range(100):
        n, m = int(rng.integers(5, 300)), float(rng.uniform(0.0, 0.3))
        g = int(rng.integers(0, n // 2))
        l = int(rng.integers(0, n - g + 1))

        def nll(x):
            return -(g * np.log(max(x - m, 1e-300)) + l * np.log(max(x, 1e-300))
                     + (n - g - l) * np.log(max(1 - 2 * x + m, 1e-300)))

        ref = optimize.minimize_scalar(nll, bounds=(m + 1e-12, (1 + m) / 2 - 1e-12), method="bounded",
                                       options={"xatol": 1e-12})
        x = restricted_loss_rate(np.array([g]), np.array([l]), n, m)[0]
        assert m - 1e-12 <= x <= (1 + m) / 2 + 1e-12
        assert nll(x) <= ref.fun + 1e-7


def _outcomes(n: int, m: float):
    g, l = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    ok = g + l <= n
    return g[ok], l[ok], score(g[ok], l[ok], n, m)


def _trinomial(g, l, n, p_g, p_l):
    return stats.multinomial.pmf(np.stack([g, l, n - g - l], -1), n, [p_g, p_l, 1 - p_g - p_l])


@pytest.mark.parametrize("gains, losses", [(6, 3), (2, 2), (0, 0), (10, 4)])
def test_tail_matches_the_enumerated_trinomial(gains, losses):
    n, m = 40, 0.1
    g, l, s = _outcomes(n, m)
    z = score(np.array([gains]), np.array([losses]), n, m)[0]
    for p_l in (0.1, 0.2, 0.35, 0.5, 0.54):
        brute = _trinomial(g, l, n, p_l - m, p_l)[s >= z * (1 - 1e-12)].sum()
        assert _tail(n, m, z, np.array([p_l]))[0] == pytest.approx(brute, abs=1e-12)


def test_p_value_is_the_supremum_and_the_test_keeps_its_level():
    n, m, alpha = 30, 0.1, 0.05
    g, l, s = _outcomes(n, m)
    p = np.array([noninferiority_exact(int(a), int(b), n, m).p_value for a, b in zip(g, l)])
    dense = np.linspace(m, (1 + m) / 2 - 1e-9, 400)
    for k in np.flatnonzero(s > 0)[::25]:  # the p-value is at least the tail at any nuisance value
        tails = [_trinomial(g, l, n, q - m, q)[s >= s[k] * (1 - 1e-12)].sum() for q in dense]
        assert p[k] >= max(tails) - 1e-6
    reject = p <= alpha
    for q in dense[::20]:  # at delta = -margin, whatever the flip rate: at most alpha
        assert _trinomial(g, l, n, q - m, q)[reject].sum() <= alpha + 1e-9
    assert reject.any()


def _comparison(gains: int, losses: int, n: int, both_right: int) -> Comparison:
    base = np.array([1] * both_right + [0] * gains + [1] * losses + [0] * (n - both_right - gains - losses), float)
    cand = np.array([1] * both_right + [1] * gains + [0] * losses + [0] * (n - both_right - gains - losses), float)
    ci = paired_proportion_ci(base, cand, confidence=0.9)
    return Comparison(variant="v", suite="s", metric="acc", primary=True, n_paired=n, unpaired_base=0,
                      unpaired_variant=0, base_mean=float(base.mean()), variant_mean=float(cand.mean()),
                      delta=ci.delta, ci_low=ci.ci_low, ci_high=ci.ci_high, interval_method=ci.method,
                      confidence=0.9, t_ci_low=ci.ci_low, t_ci_high=ci.ci_high, binary=True, higher_is_better=True, mde=0.03,
                      flips_base_only=losses, flips_variant_only=gains)


def test_a_pass_the_exact_test_does_not_confirm_fails():
    policy = GatePolicy(rules=[GateRule(margin=0.05, alpha=0.05)])
    # found by search at n = 286: Newcombe's bound clears -0.05 (-0.0492), the exact test does not
    c = _comparison(gains=2, losses=10, n=286, both_right=161)
    assert c.ci_low > -0.05
    [g] = evaluate(policy, [c], ["v"])
    assert g.verdict == "FAIL" and g.p_exact == pytest.approx(0.0672, abs=1e-4)
    assert "exact test does not confirm" in g.reason and g.finding == "exact_test_not_confirmed"
    [ok] = evaluate(policy, [_comparison(gains=10, losses=10, n=286, both_right=161)], ["v"])
    assert ok.verdict == "PASS" and ok.p_exact < 0.05 and "exact test p =" in ok.reason
    assert ok.finding == "shown_within"


def test_exact_edges():
    assert noninferiority_exact(0, 5, 5, 0.1).p_value == 1.0  # all losses: no evidence
    assert noninferiority_exact(3, 0, 10, 1.0).p_value == 0.0  # a proportion cannot fall by 1
    with pytest.raises(ValueError):
        noninferiority_exact(6, 6, 10, 0.1)
