"""interval: auto on skewed, heavy-tailed continuous differences: the skew, the bootstrap-t, the method choice,
and a gate that refuses where no interval keeps alpha (pure, seeded)."""

import math

import numpy as np
import pytest
from scipy import stats

from qeval.record.metrics import continuous
from qeval.stats import mean_delta, paired_bootstrap_t_ci
from qeval.stats.tails import TAIL_CUTOFFS, choose_interval, cutoffs_for, oriented_skew
from qeval.verdict.comparison import compare_metric
from qeval.verdict.gates import evaluate
from qeval.verdict.pairing import Paired
from qeval.verdict.policy import GatePolicy, GateRule


def test_skew_is_scipys():
    x = np.random.default_rng(3).lognormal(0, 1, 57)
    assert oriented_skew(x) == pytest.approx(stats.skew(x))
    assert oriented_skew(-x) == pytest.approx(-stats.skew(x))
    assert oriented_skew(np.ones(10)) == 0.0 and oriented_skew(np.array([1.0, 2.0])) == 0.0
    b = np.random.default_rng(1).random(100)
    assert oriented_skew((b + 0.01) - b) == 0.0  # a constant shift, up to rounding


def test_bootstrap_t_matches_a_reference_loop():
    """The vectorized resampling against one resample at a time, from the same index draws."""
    d = np.random.default_rng(5).lognormal(0, 1, 40)
    got = paired_bootstrap_t_ci(np.zeros(40), d, confidence=0.9, resamples=500, seed=11)
    idx = np.random.default_rng(11).integers(0, 40, size=(500, 40))
    se = d.std(ddof=1) / math.sqrt(40)
    ts = [(d[i].mean() - d.mean()) / (d[i].std(ddof=1) / math.sqrt(40)) for i in idx]
    q_lo, q_hi = np.quantile(ts, [0.05, 0.95])
    assert got.ci_low == pytest.approx(d.mean() - q_hi * se) and got.ci_high == pytest.approx(d.mean() - q_lo * se)
    assert got.se == pytest.approx(se) and got.method == "paired-bootstrap-t"


def test_bootstrap_t_follows_the_skew_and_is_equivariant():
    rng = np.random.default_rng(0)
    normal = rng.normal(0, 1, 200)
    bt, t = paired_bootstrap_t_ci(np.zeros(200), normal, 0.9, 4000), mean_delta(np.zeros(200), normal, 0.9)
    assert bt.ci_low == pytest.approx(t.ci_low, abs=0.03) and bt.ci_high == pytest.approx(t.ci_high, abs=0.03)
    losses = -rng.lognormal(0, 1.5, 60)  # a long tail of losses: the interval reaches further down than t's
    bt, t = paired_bootstrap_t_ci(np.zeros(60), losses, 0.9, 2000), mean_delta(np.zeros(60), losses, 0.9)
    assert bt.ci_low < t.ci_low
    shifted = paired_bootstrap_t_ci(np.zeros(60), 3 * losses + 1, 0.9, 2000)
    assert shifted.ci_low == pytest.approx(3 * bt.ci_low + 1) and shifted.ci_high == pytest.approx(3 * bt.ci_high + 1)


def test_choice_by_n_and_skew():
    table = {20: (0.5, 1.0), 100: (1.0, 2.0)}
    assert cutoffs_for(10, table) == (0.5, 1.0) and cutoffs_for(99, table) == (0.5, 1.0)
    assert cutoffs_for(100, table) == (1.0, 2.0) and cutoffs_for(5000, table) == (1.0, 2.0)
    rng = np.random.default_rng(1)
    gains = rng.lognormal(0, 1, 30)
    g = stats.skew(gains)
    assert g > 1
    assert choose_interval(gains, table=table).method == "paired-t"  # a gain tail errs on the safe side
    assert choose_interval(-gains, table=table).method is None
    refused = choose_interval(-gains, table=table)
    assert refused.reason == f"heavy tail: skew {-g:+.2f} at n = 30, no method keeps alpha"
    assert choose_interval(-gains, table={20: (0.5, 5.0)}).method == "paired-bootstrap-t"
    assert choose_interval(gains, two_sided=True, table=table).method is None  # equivalence reads both bounds


def test_cutoffs_bootstrap_t_reaches_no_less_than_t():
    rows = [TAIL_CUTOFFS[n] for n in sorted(TAIL_CUTOFFS)]
    assert all(s_b >= s_t >= 0 for s_t, s_b in rows)


def _paired(d: np.ndarray) -> Paired:
    n = len(d)
    base = np.full(n, 2.0)
    return Paired(ids=[str(i) for i in range(n)], groups=[None] * n, base={"m": base}, cand={"m": base + d},
                  unpaired_base=[], unpaired_cand=[])


def _gate(d: np.ndarray, margin: float = 0.05, higher: bool = True, mode: str = "noninferiority"):
    rule = GateRule(margin=margin, planning_sd=0.05, mode=mode)
    policy = GatePolicy(rules=[rule], bootstrap_resamples=999)
    c = compare_metric("v", "s", "m", True, _paired(d), rule, policy, spec=continuous(higher, "test"))
    [g] = evaluate(policy, [c], ["v"])
    return c, g


def test_gate_refuses_a_loss_tail_and_names_its_method():
    rng = np.random.default_rng(2)
    tail = -0.05 + 0.02 * (-(rng.lognormal(0, 1.5, 20)) + math.exp(1.125))  # mean -margin, long tail of losses
    c, g = _gate(tail)
    assert c.skew == pytest.approx(stats.skew(tail)) and c.skew < -2
    assert c.interval_refused and g.verdict == "INCONCLUSIVE" and g.reason.startswith("heavy tail: skew")
    assert g.finding == "refused_heavy_tail"
    assert g.method == "paired-t"
    # the same values for a lower-is-better metric (NLL, KL): its losses are the values going up
    c, g = _gate(-tail, higher=False)
    assert c.skew == pytest.approx(stats.skew(tail)) and g.verdict == "INCONCLUSIVE"
    # a clearly worse variant still FAILs: a missed loss tail only pulls the bounds up
    c, g = _gate(tail - 1.0)
    assert c.interval_refused and g.verdict == "FAIL" and g.upper_bound < -0.05
    # near-normal differences: the t interval, as before
    c, g = _gate(rng.normal(0.0, 0.05, 200))
    assert c.interval_refused is None and g.method == c.interval_method == "paired-t" and g.verdict == "PASS"


def test_gate_reads_the_bootstrap_t_where_the_envelope_says(monkeypatch):
    import qeval.stats.tails as tails

    monkeypatch.setattr(tails, "TAIL_CUTOFFS", {20: (0.0, 50.0)})
    d = -np.random.default_rng(4).lognormal(0, 1, 40) + 2
    c, g = _gate(d)
    want = paired_bootstrap_t_ci(np.full(40, 2.0), np.full(40, 2.0) + d, confidence=0.9, resamples=999, seed=0)
    assert g.method == "paired-bootstrap-t" and (c.ci_low, c.ci_high) == pytest.approx((want.ci_low, want.ci_high))


def _false_passes(draw, n: int, reps: int, margin: float = 0.05) -> tuple[float, float]:
    """The t bound's and the auto gate's PASS rates at true delta = -margin."""
    t_pass = auto_pass = 0
    for r in range(reps):
        d = -margin + draw(np.random.default_rng(r), n)
        c, g = _gate(d, margin)
        t_pass += c.t_ci_low > -margin
        auto_pass += g.verdict == "PASS"
    return t_pass / reps, auto_pass / reps


def test_auto_keeps_alpha_where_t_does_not():
    """Lognormal (sigma 1.5) losses at n = 50: the t interval passes the variant at the margin about four times
    too often; auto, choosing by the skew, keeps it within alpha (300 reps: Monte Carlo se 0.0126)."""
    s = 1.5
    mean, sd = math.exp(s * s / 2), math.sqrt((math.exp(s * s) - 1) * math.exp(s * s))
    t_rate, auto_rate = _false_passes(lambda rng, n: -0.05 * (rng.lognormal(0, s, n) - mean) / sd, 50, 300)
    assert t_rate > 0.1
    assert auto_rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 300)


def test_sequential_pass_held_on_a_loss_tail():
    from qeval.stats.sequential import Look, SequentialResult
    from qeval.verdict.sequential import heavy_tail_held

    rng = np.random.default_rng(6)
    passed = SequentialResult("gsd", 0.05, 0.05, 200, (Look(100, 0.0, -0.01, 0.01, "PASS", "shown_within"),), "PASS", "lower bound")
    calm, tail = rng.normal(0, 0.05, 200), -rng.lognormal(0, 1.5, 200) + 1
    assert heavy_tail_held(passed, calm[:150], 200) is passed
    held = heavy_tail_held(passed, tail[:150], 200)
    assert held.verdict == "UNDECIDED" and "the suite runs on" in held.reason
    done = heavy_tail_held(passed, tail, 200)
    assert done.verdict == "INCONCLUSIVE" and done.reason.startswith("heavy tail: skew")
    failed = SequentialResult("gsd", 0.05, 0.05, 200, (Look(100, -1.0, -1.1, -0.9, "FAIL", "shown_worse"),), "FAIL", "worse")
    assert heavy_tail_held(failed, tail, 200) is failed
