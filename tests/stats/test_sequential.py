"""Anytime-valid gates against independent computations: published group-sequential boundaries, the
multivariate normal's own integral, every outcome of 0/1 pairs summed exactly, the betting capital
written out from the paper, and seeded simulations of time-uniform coverage."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import signal, stats

from qeval.stats.exact import score
from qeval.stats.sequential import (betting_cs, betting_gate, capital, cluster_looks, design, gsd_gate, linear_spending,
                                    look_schedule, obf_spending)


def test_obrien_fleming_boundaries_match_the_published_table():
    # Lan-DeMets O'Brien-Fleming-type spending, one-sided 0.025, five equal looks (Jennison & Turnbull
    # 2000, table 7.6; the R package ldbounds gives the same)
    d = design((1, 2, 3, 4, 5), 0.025)
    assert d.efficacy == pytest.approx((4.8769, 3.3569, 2.6803, 2.2898, 2.0310), abs=2e-4)


def test_the_design_spends_what_the_multivariate_normal_says():
    looks = (30, 70, 100)
    taus = np.array(looks) / 100
    cov = np.sqrt(np.minimum.outer(taus, taus) / np.maximum.outer(taus, taus))  # corr(Z_i, Z_j) = sqrt(t_i / t_j)
    d = design(looks, 0.05, futility=0.1, drift=2.5)
    for k in range(3):  # P(cross efficacy by look k) at the null, ignoring the FAIL rule: alpha spent by then
        crossed = (1 - stats.multivariate_normal(np.zeros(k + 1), cov[:k + 1, :k + 1]).cdf(np.array(d.efficacy[:k + 1]))
                   if k else stats.norm.sf(d.efficacy[0]))
        assert crossed == pytest.approx(float(obf_spending(taus[k], 0.05)), abs=2e-5)
    # the FAIL boundary at look 2 under the alternative: P(b1 < Z1 < a1, Z2 < b2) is the power spent there
    mean = 2.5 * np.sqrt(taus[:2])
    alt = stats.multivariate_normal(mean, cov[:2, :2])
    p2 = alt.cdf(np.array([d.efficacy[0], d.failure[1]]), lower_limit=np.array([d.failure[0], -np.inf]))
    assert stats.norm.cdf(d.failure[0] - mean[0]) == pytest.approx(float(linear_spending(0.3, 0.1)), abs=2e-5)
    assert p2 == pytest.approx(float(linear_spending(0.7, 0.1) - linear_spending(0.3, 0.1)), abs=5e-5)
    assert d.failure[-1] == -math.inf  # the last look is decided by the efficacy boundary alone


def test_the_last_boundary_is_the_price_of_looking():
    d = design(look_schedule(1000, 50, 100), 0.05)
    assert list(d.efficacy) == sorted(d.efficacy, reverse=True)  # O'Brien-Fleming: strict early, lenient late
    assert stats.norm.ppf(0.95) < d.efficacy[-1] < stats.norm.ppf(0.95) + 0.25
    assert design((1000,), 0.05).efficacy[0] == pytest.approx(stats.norm.ppf(0.95), abs=1e-6)  # one look: fixed n


def test_look_schedule():
    assert look_schedule(260, 50, 100) == (100, 150, 200, 250, 260)
    assert look_schedule(250, 50, 100) == (100, 150, 200, 250)
    assert look_schedule(80, 50, 100) == (80,)


def _exact_false_pass(n: int, margin: float, flip: float, looks: tuple[int, ...], plan_sd: float,
                      futility: float) -> float:
    """P(PASS) at delta = -margin, summed over every (gains, losses) path: the count states at each look
    are convolved with the trinomial of the items in between; the decision is Tango's score against
    the design's boundaries."""
    des = design(looks, 0.05, futility, margin * math.sqrt(n) / plan_sd)
    p_gain, p_loss = (flip - margin) / 2, (flip + margin) / 2
    state, prev, passed = np.ones((1, 1)), 0, 0.0
    for k, t in enumerate(looks):
        step = t - prev
        g, l = np.meshgrid(np.arange(step + 1), np.arange(step + 1), indexing="ij")
        ok = g + l <= step
        inc = np.zeros((step + 1, step + 1))
        inc[ok] = stats.multinomial.pmf(np.stack([g[ok], l[ok], step - g[ok] - l[ok]], -1), step,
                                        [p_gain, p_loss, 1 - p_gain - p_loss])
        state = np.clip(signal.fftconvolve(state, inc), 0, None)
        gg, ll = np.meshgrid(np.arange(state.shape[0]), np.arange(state.shape[1]), indexing="ij")
        z = score(gg, ll, t, margin)
        win, lose = z >= des.efficacy[k], (z <= des.failure[k]) if t < n else z < des.efficacy[k]
        passed += state[win].sum()
        state, prev = np.where(win | lose, 0.0, state), t
    return passed


@pytest.mark.parametrize("n, margin", [(300, 0.05), (600, 0.05), (420, 0.1)])
def test_the_exact_false_pass_rate_of_0_1_pairs_stays_at_alpha(n, margin):
    looks = look_schedule(n, 50, 100)
    for f in np.linspace(margin, 0.6, 6):
        bare = _exact_false_pass(n, margin, f, looks, math.sqrt(0.1), futility=0.0)
        # at alpha up to the score's normal approximation (0.0503 at most in this grid), and not by refusing
        assert 0.03 < bare <= 0.051, (f, bare)
        # the FAIL rule is non-binding: stopping early to FAIL can only lower the false-pass rate
        gate = _exact_false_pass(n, margin, f, looks, math.sqrt(0.1), futility=0.05)
        assert gate <= min(bare + 1e-12, 0.05)


def test_the_gate_decides_as_the_score_against_the_boundaries():
    # ties the exact sum above to the code a campaign runs: the same decisions on random 0/1 paths
    rng = np.random.default_rng(1)
    n, m = 300, 0.05
    looks = look_schedule(n, 50, 100)
    des = design(looks, 0.05, 0.05, m * math.sqrt(n) / math.sqrt(0.1))
    for _ in range(200):
        flip = rng.uniform(0.06, 0.4)
        d = rng.choice([1.0, -1.0, 0.0], n, p=[(flip - m) / 2, (flip + m) / 2, 1 - flip])
        r = gsd_gate(d, n, m, 0.05, look_every=50, min_items=100, binary=True, planning_sd=math.sqrt(0.1))
        expect = "FAIL"
        for k, t in enumerate(looks):
            z = score(np.array([(d[:t] > 0).sum()]), np.array([(d[:t] < 0).sum()]), t, m)[0]
            if z >= des.efficacy[k]:
                expect = "PASS"
                break
            if t < n and z <= des.failure[k] or t == n:
                break
        assert (r.verdict, r.items_used) == (expect, t)


def test_peeking_at_the_fixed_n_bound_inflates_what_the_design_does_not():
    rng = np.random.default_rng(2)
    n, m, reps = 600, 0.02, 300
    looks = look_schedule(n, 50, 100)
    seq = peek = 0
    for _ in range(reps):
        d = -m + rng.uniform(-0.25, 0.25, n)
        seq += gsd_gate(d, n, m, 0.05, look_every=50, min_items=100, binary=False, planning_sd=0.144).verdict == "PASS"
        peek += any(d[:t].mean() - stats.t.ppf(0.95, t - 1) * d[:t].std(ddof=1) / math.sqrt(t) > -m for t in looks)
    assert seq / reps <= 0.05 + 2.5 * math.sqrt(0.05 * 0.95 / reps)
    assert peek / reps > 0.12  # 11 looks at a nominal 5%: the inflation the design exists to prevent


def _capital_by_the_paper(y: np.ndarray, m: float, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Waudby-Smith & Ramdas's predictable plug-in bets and capital, written out item by item."""
    up, down, k_up, k_down, s, ss = [], [], 1.0, 1.0, 0.0, 0.25
    for t, yt in enumerate(y, start=1):
        var_prev = ss / t  # sigma_hat^2_{t-1} = (1/4 + sum_{i<t} (y_i - mu_hat_i)^2) / t
        lam = math.sqrt(2 * math.log(1 / alpha) / (var_prev * t * math.log(1 + t)))
        k_up *= 1 + min(lam, 0.5 / m) * (yt - m)
        k_down *= 1 - min(lam, 0.5 / (1 - m)) * (yt - m)
        s += yt
        ss += (yt - (0.5 + s) / (t + 1)) ** 2
        up.append(k_up)
        down.append(k_down)
    return np.array(up), np.array(down)


def test_the_capital_is_the_papers():
    rng = np.random.default_rng(3)
    for m in (0.2, 0.475, 0.8):
        y = rng.random(60)
        up, down = _capital_by_the_paper(y, m, 0.05)
        np.testing.assert_allclose(capital(y, m, 0.05, "+"), up, rtol=1e-12)
        np.testing.assert_allclose(capital(y, m, 0.05, "-"), down, rtol=1e-12)


def test_every_path_of_eight_0_1_pairs_keeps_the_betting_gate_at_alpha():
    # Ville's inequality, checked by brute force: 3^8 paths of differences in {-1, 0, 1}, each with its
    # trinomial probability, at delta = -margin for several flip rates
    n, m = 8, 0.05
    paths = np.array(list(itertools.product((-1.0, 0.0, 1.0), repeat=n)))
    gains, losses = (paths > 0).sum(1), (paths < 0).sum(1)
    passed = np.array([betting_gate(p, n, m, 0.05, look_every=1, min_items=1).verdict == "PASS" for p in paths])
    for flip in (0.05, 0.2, 0.6, 1.0):
        pg, pl = (flip - m) / 2, (flip + m) / 2
        prob = pg ** gains * pl ** losses * (1 - flip) ** (n - gains - losses)
        assert prob.sum() == pytest.approx(1.0)
        assert prob[passed].sum() <= 0.05
    prob_good = 0.5 ** n * (gains + losses == n) * (gains == n)  # every item a gain: the gate must pass it
    assert prob_good[passed].sum() == prob_good.sum()


def test_the_betting_sequence_covers_at_every_time_at_once():
    rng = np.random.default_rng(4)
    reps, n, mu = 300, 200, 0.1
    seq_miss = naive_miss = 0
    for _ in range(reps):
        d = mu + rng.uniform(-0.5, 0.5, n)
        lo, hi = betting_cs(d, 0.05, grid=201)
        seq_miss += bool((lo > mu).any())  # one-sided: the lower sequence alone misses at most alpha
        t = np.arange(2, n + 1)
        means = np.cumsum(d)[1:] / t
        sds = np.sqrt((np.cumsum(d * d)[1:] - t * means ** 2) / (t - 1))
        naive_miss += bool((means - stats.t.ppf(0.95, t - 1) * sds / np.sqrt(t) > mu).any())
    assert seq_miss / reps <= 0.05
    assert naive_miss / reps > 0.2  # the fixed-n interval read at every item misses far more often


def test_more_items_narrow_the_sequences_on_average():
    rng = np.random.default_rng(5)
    w_bet, w_gsd = [], []
    looks = look_schedule(800, 50, 100)
    des = design(looks, 0.05)
    for _ in range(30):
        d = rng.uniform(-0.3, 0.3, 800)
        lo, hi = betting_cs(d, 0.05, grid=401)
        w_bet.append(hi[[99, 399, 799]] - lo[[99, 399, 799]])
        w_gsd.append([2 * des.efficacy[looks.index(t)] * d[:t].std(ddof=1) / math.sqrt(t) for t in (100, 400, 800)])
    for w in (np.mean(w_bet, 0), np.mean(w_gsd, 0)):
        assert w[0] > w[1] > w[2]


def test_decisions_at_the_looks():
    rng = np.random.default_rng(6)
    n, m = 1000, 0.02
    kw = dict(look_every=50, min_items=100, binary=False, planning_sd=0.144)
    crash = gsd_gate(-0.2 + rng.uniform(-0.25, 0.25, n), n, m, 0.05, **kw)
    assert (crash.verdict, crash.items_used) == ("FAIL", 100) and "upper bound" in crash.reason
    same = gsd_gate(np.zeros(n) + rng.uniform(-1e-3, 1e-3, n), n, m, 0.05, **kw)
    assert (same.verdict, same.items_used) == ("PASS", 100)
    part = gsd_gate(rng.uniform(-0.25, 0.25, 120), n, m, 0.05, **kw)
    assert part.verdict == "UNDECIDED" and part.items_used == 100
    weak = gsd_gate(np.zeros(n), n, m, 0.05, **kw, mde=0.05)  # underpowered: never PASS, INCONCLUSIVE at n
    assert (weak.verdict, weak.items_used) == ("INCONCLUSIVE", n)


def test_each_look_names_its_finding():
    """What a gsd gate's deciding look showed, beside its verdict: a FAIL on the futility bound is not a FAIL
    by an upper bound below -margin, and an underpowered gate at n says whether its bound cleared -margin."""
    rng = np.random.default_rng(6)
    n, m = 1000, 0.02
    kw = dict(look_every=50, min_items=100, binary=False, planning_sd=0.144)
    crash = gsd_gate(-0.2 + rng.uniform(-0.25, 0.25, n), n, m, 0.05, **kw)
    assert (crash.verdict, crash.finding) == ("FAIL", "shown_worse")
    same = gsd_gate(np.zeros(n) + rng.uniform(-1e-3, 1e-3, n), n, m, 0.05, **kw)
    assert (same.verdict, same.finding) == ("PASS", "shown_within")
    part = gsd_gate(rng.uniform(-0.25, 0.25, 120), n, m, 0.05, **kw)
    assert (part.verdict, part.finding) == ("UNDECIDED", "undecided")
    assert gsd_gate(np.zeros(50), n, m, 0.05, **kw).finding == "undecided"  # no look reached yet
    noise = np.tile([-1.0, 1.0], n // 2) * 0.1
    se = noise[:100].std(ddof=1) / 10
    futile = gsd_gate(-m - 2 * se + noise, n, m, 0.05, **kw)  # z = -2 at the first look: its upper bound is above
    assert (futile.verdict, futile.finding, futile.items_used) == ("FAIL", "futile", 100)
    assert futile.looks[-1].upper > -m
    within = gsd_gate(np.zeros(n), n, m, 0.05, **kw, mde=0.05)  # every bound clears -margin, but underpowered
    assert (within.verdict, within.finding) == ("INCONCLUSIVE", "underpowered_within")
    weak = gsd_gate(-m + noise, n, m, 0.05, **kw, mde=0.05)  # straddles -margin at n, underpowered
    assert (weak.verdict, weak.finding) == ("INCONCLUSIVE", "underpowered")


def test_each_betting_look_names_its_finding():
    n, m = 200, 0.2
    kw = dict(look_every=20, min_items=20)
    edge = np.tile([-1.0, 1.0, -0.4, -0.4], n // 4)  # mean -margin: neither capital reaches 1/alpha by n
    for d, mde, verdict, finding in ((np.zeros(n), None, "PASS", "shown_within"),
                                     (-np.ones(n), None, "FAIL", "shown_worse"),
                                     (edge, None, "FAIL", "not_shown_within"),
                                     (edge, 0.5, "INCONCLUSIVE", "underpowered"),
                                     (np.zeros(n), 0.5, "INCONCLUSIVE", "underpowered_within"),
                                     (edge[:60], None, "UNDECIDED", "undecided")):
        r = betting_gate(d, n, m, 0.05, **kw, mde=mde)
        assert (r.verdict, r.finding) == (verdict, finding), (d[:4], mde)


def test_an_undecided_gate_at_n_is_read_against_the_last_boundary_not_a_fresh_fixed_n_test():
    n, m = 1000, 0.02
    looks = look_schedule(n, 50, 100)
    c = design(looks, 0.05).efficacy[-1]
    noise = np.tile([-1.0, 1.0], n // 2) * 0.1
    z_mid = (stats.norm.ppf(0.95) + c) / 2  # between the fixed-n and the sequential critical values
    d = -m + noise + z_mid * noise.std(ddof=1) / math.sqrt(n)
    assert d.mean() - stats.t.ppf(0.95, n - 1) * d.std(ddof=1) / math.sqrt(n) > -m  # fixed n would pass
    r = gsd_gate(d, n, m, 0.05, look_every=50, min_items=100, binary=False, planning_sd=0.1, futility=0.0)
    assert (r.verdict, r.items_used, r.finding) == ("FAIL", n, "not_shown_within")


def test_grouped_items_are_looked_at_between_groups():
    assert cluster_looks(list("aabbbc"), (1, 3, 6)) == (2, 5, 6)
    assert cluster_looks(list("aabbbc"), (2, 4)) == (2, 5)
    with pytest.raises(ValueError, match="contiguous"):
        cluster_looks(list("abab"), (2, 4))


def _grouped_pairs(rng: np.random.Generator, sizes: np.ndarray, delta: float) -> tuple[np.ndarray, list[str]]:
    labels = np.repeat(np.arange(len(sizes)), sizes)
    shift = rng.normal(0, 0.15, len(sizes))[labels]  # a shared shift per group: intra-group correlation 0.5
    return delta + (rng.normal(0, 0.15, len(labels)) + shift) / math.sqrt(2), [f"g{x}" for x in labels]


def test_the_clustered_gate_keeps_alpha_where_ignoring_the_groups_does_not():
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 8, 150)  # 150 groups of 1 to 7 items, ~600 items
    n, m, reps = int(sizes.sum()), 0.02, 300
    deff = 1 + 0.5 * ((sizes ** 2).sum() / n - 1)
    kw = dict(look_every=100, min_items=200, binary=False, planning_sd=0.15 * math.sqrt(deff))
    grouped = flat = 0
    for _ in range(reps):
        d, g = _grouped_pairs(rng, sizes, -m)
        r = gsd_gate(d, n, m, 0.05, groups=g, **kw)
        assert all(look.items in np.cumsum(sizes) for look in r.looks)  # never inside a group
        grouped += r.verdict == "PASS"
        flat += gsd_gate(d, n, m, 0.05, **kw).verdict == "PASS"
    mc = math.sqrt(0.05 * 0.95 / reps)
    assert grouped / reps <= 0.05 + 2.5 * mc
    assert flat / reps > 0.05 + 2.5 * mc  # items treated as independent: too many false passes


def test_unsupported_inputs_are_refused():
    d = np.zeros(200)
    with pytest.raises(ValueError, match="group labels for a design of 200"):
        gsd_gate(d, 200, 0.05, 0.05, look_every=50, min_items=100, binary=False, planning_sd=0.1,
                 groups=["a"] * 100)
    with pytest.raises(ValueError, match="groups"):
        betting_gate(d, 200, 0.05, 0.05, look_every=50, min_items=100, groups=["a"] * 200)
    with pytest.raises(ValueError, match="unbounded"):
        betting_gate(np.full(200, 3.0), 200, 0.05, 0.05, look_every=50, min_items=100)  # an NLL difference
    with pytest.raises(ValueError, match="-1, 0 or 1"):
        gsd_gate(np.full(200, 0.5), 200, 0.05, 0.05, look_every=50, min_items=100, binary=True, planning_sd=0.3)
    with pytest.raises(ValueError, match="design of 100"):
        gsd_gate(d, 100, 0.05, 0.05, look_every=50, min_items=100, binary=False, planning_sd=0.1)
