"""Is the gate honest? Simulated campaigns with a known true delta.

- true delta = -margin exactly: the gate must PASS at most alpha of the time (false-pass rate);
- true delta = 0 at the planned n: it must PASS at least 1 - beta of the time (power).
Binary and continuous metrics, with and without clustering (items sharing a group).

--tails: continuous differences that are skewed or heavy-tailed (lognormal, skew-normal, Lomax, t3) at a true
delta of exactly -margin, the long tail on the losing side (a variant with rare large losses) and on the
gaining side; n in {20, 50, 100, 300}; the false-pass rate of each fixed-n interval qeval has, of the sequential
gsd gate, and of `interval: auto`, which picks t, bootstrap-t or a refusal from the sample's skew.

Run: .venv/bin/python benchmarks/simulate_gates.py [--reps 2000] [--reps-clustered 10000]
     .venv/bin/python benchmarks/simulate_gates.py --tails [--reps 500] [--resamples 999] [--calibrate]
     .venv/bin/python benchmarks/simulate_gates.py --tails --check --seed 1 [--reps 2000]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import stats

from qeval.record.metrics import continuous, indicator
from qeval.stats import (clustered_mean_delta, mean_delta, n_required, n_required_clustered, paired_bootstrap_ci,
                         paired_bootstrap_t_ci)
from qeval.stats.exact import noninferiority_exact
from qeval.stats.sequential import gsd_gate
from qeval.stats.tails import TAIL_CUTOFFS, choose_interval
from qeval.verdict.comparison import compare_metric
from qeval.verdict.gates import evaluate
from qeval.verdict.pairing import Paired
from qeval.verdict.sequential import heavy_tail_held
from qeval.verdict.policy import GatePolicy, GateRule


def binary_pair(rng, n, p_base, p_disc, delta):
    # baseline correct with p_base; discordant pairs at rate p_disc, split so that E[cand - base] = delta
    b = (rng.random(n) < p_base).astype(float)
    # P(base right, cand wrong) = (p_disc - delta)/2, P(base wrong, cand right) = (p_disc + delta)/2
    lose, gain = (p_disc - delta) / 2, (p_disc + delta) / 2
    u = rng.random(n)
    c = b.copy()
    c[(b == 1) & (u < lose / p_base)] = 0
    c[(b == 0) & (u < gain / (1 - p_base))] = 1
    return b, c


def continuous_pair(rng, n, delta, sd, groups=None):
    b = rng.normal(0.6, 0.2, n)
    noise = rng.normal(0, sd, n)
    if groups is not None:  # a shared shift per group: items in a group are correlated
        g_shift = rng.normal(0, sd, groups.max() + 1)
        noise = (noise + g_shift[groups]) / math.sqrt(2)
    return b, b + delta + noise


def gate_pass_rate(make, reps: int, margin: float, groups=None, sd: float | None = None,
                   icc: float | None = None) -> tuple[float, float, float, float]:
    """Shares of PASS and INCONCLUSIVE verdicts, and how often the interval alone would pass (the gate's
    CR2 / t / Newcombe bound, and CR1's where items are grouped), INCONCLUSIVE aside."""
    rule = GateRule(margin=margin, alpha=0.05, beta=0.2, planning_flip_rate=0.1, planning_sd=sd, planning_icc=icc)
    policy = GatePolicy(rules=[rule], bootstrap_resamples=2000)
    spec = indicator("simulated 0/1") if sd is None else continuous(True, "simulated")  # binary_pair plans no sd
    passed = inconclusive = bound_passed = cr1_passed = 0
    for r in range(reps):
        b, c = make(np.random.default_rng(r))
        n = len(b)
        gl = [f"g{x}" for x in groups] if groups is not None else [None] * n
        p = Paired(ids=[str(i) for i in range(n)], groups=gl, base={"m": b}, cand={"m": c}, unpaired_base=[],
                   unpaired_cand=[])
        comp = compare_metric("v", "s", "m", True, p, rule, policy, spec=spec)
        [g] = evaluate(policy, [comp], ["v"])
        passed += g.verdict == "PASS"
        inconclusive += g.verdict == "INCONCLUSIVE"
        bound_passed += comp.ci_low > -margin
        if groups is not None:  # the same data through the CR1 interval the gate used before
            cr1_passed += clustered_mean_delta(b, c, gl, confidence=0.9, adjustment="CR1").ci_low > -margin
    return passed / reps, inconclusive / reps, bound_passed / reps, cr1_passed / reps


def exact_test_rates(n: int, gain: float, loss: float, margin: float, alpha: float = 0.05) -> float:
    """How often the exact test alone rejects (p <= alpha), summed over every (gains, losses) outcome with
    probability above 1e-12: at delta = -margin its size, which bounds the gate's false-pass rate (a PASS
    needs it), and at delta = 0 its power, which bounds the gate's."""
    total = 0.0
    for g in range(n + 1):
        pg = stats.binom.pmf(g, n, gain)
        if pg < 1e-12:
            continue
        for l in range(n - g + 1):
            pr = pg * stats.binom.pmf(l, n - g, loss / (1 - gain))
            if pr >= 1e-12 and noninferiority_exact(g, l, n, margin).p_value <= alpha:
                total += pr
    return total


def clustered_rows(label: str, groups: np.ndarray, reps: int, margin: float, sd: float) -> None:
    n = len(groups)
    sizes = np.bincount(groups)
    deff = 1 + 0.5 * ((sizes ** 2).sum() / n - 1)  # variance of the mean over the unclustered one, ICC 0.5
    print(f"continuous, clustered, {label}: {len(sizes)} groups of {sizes.min()}..{sizes.max()} items, n = {n}, "
          f"design effect {deff:.2f} (n planned by n_required_clustered for groups of 3, ICC 0.5; the gate "
          f"rule says planning_icc: 0.5)")
    fp, finc, fb, f1 = gate_pass_rate(lambda g: continuous_pair(g, n, -margin, sd, groups), reps, margin, groups, sd,
                                      icc=0.5)
    pw, inc, pb, p1 = gate_pass_rate(lambda g: continuous_pair(g, n, 0.0, sd, groups), reps, margin, groups, sd,
                                     icc=0.5)
    mc = math.sqrt(0.05 * 0.95 / reps)
    print(f"  true delta = -margin: false-pass rate {fp:.4f} (must be <= 0.05; Monte Carlo se {mc:.4f}); "
          f"inconclusive {finc:.4f}; the CR2 bound alone {fb:.4f}, CR1's {f1:.4f}")
    print(f"  true delta = 0:       pass rate {pw:.4f}; inconclusive {inc:.4f}; the CR2 bound alone {pb:.4f}, "
          f"CR1's {p1:.4f}")


def _centred(draw, mean: float, sd: float):
    """A draw of n values with mean 0 and sd 1 from a distribution of this mean and sd."""
    return lambda rng, n: (draw(rng, n) - mean) / sd


def tail_shapes() -> dict[str, object]:
    """Centred, unit-sd shapes; each skewed one enters twice, its long tail on the losing and the gaining side."""
    shapes = {"normal": lambda rng, n: rng.standard_normal(n)}
    base = {}
    for s in (0.5, 1.0, 1.5):
        m, v = math.exp(s * s / 2), (math.exp(s * s) - 1) * math.exp(s * s)
        base[f"lognormal sigma {s:g}"] = _centred(lambda rng, n, s=s: rng.lognormal(0.0, s, n), m, math.sqrt(v))
    sn = stats.skewnorm(10)
    base["skew-normal a 10"] = _centred(lambda rng, n: sn.rvs(n, random_state=rng), sn.mean(), sn.std())
    for c in (2.5, 4.0):
        lx = stats.lomax(c)
        base[f"Lomax shape {c:g}"] = _centred(lambda rng, n, c=c: rng.pareto(c, n), lx.mean(), lx.std())
    for name, f in base.items():
        shapes[f"{name}, loss tail"] = lambda rng, n, f=f: -f(rng, n)
        shapes[f"{name}, gain tail"] = f
    shapes["t3"] = _centred(lambda rng, n: rng.standard_t(3, n), 0.0, math.sqrt(3.0))
    return shapes


TAIL_METHODS = ("t", "percentile", "bca", "bootstrap-t", "gsd", "auto", "gsd auto")


def tails_cell(shape, n: int, reps: int, resamples: int, margin: float, sd: float, alpha: float = 0.05,
               seed: int = 0, check: bool = False) -> dict:
    """Per rep: whether each method PASSed at true delta = -margin, and the sample's oriented skew. `check`:
    only what `interval: auto` and gsd read (the bootstrap-t where auto picks it), the other columns left out."""
    conf = 1 - 2 * alpha
    out = {m: np.zeros(reps, bool) for m in TAIL_METHODS} | {"skew": np.zeros(reps), "refused": np.zeros(reps, bool)}
    zero = np.zeros(n)
    for r in range(reps):
        rng = np.random.default_rng([seed, n, r])
        d = -margin + sd * shape(rng, n)  # oriented: positive is better
        t = mean_delta(zero, d, conf)
        out["t"][r] = t.ci_low > -margin
        choice = choose_interval(d)
        if not check or choice.method == "paired-bootstrap-t":
            out["bootstrap-t"][r] = paired_bootstrap_t_ci(zero, d, conf, resamples=resamples, seed=r).ci_low > -margin
        for m in () if check else ("percentile", "bca"):
            out[m][r] = paired_bootstrap_ci(zero, d, conf, resamples=resamples, seed=r, method=m).ci_low > -margin
        seq = gsd_gate(d, n, margin, alpha, look_every=50, min_items=100, binary=False, planning_sd=sd)
        out["gsd"][r] = seq.verdict == "PASS"
        out["gsd auto"][r] = heavy_tail_held(seq, d, n).verdict == "PASS"
        out["skew"][r] = choice.skew
        out["refused"][r] = choice.method is None
        out["auto"][r] = (out["t"][r] if choice.method == "paired-t" else
                          out["bootstrap-t"][r] if choice.method == "paired-bootstrap-t" else False)
    return out


def calibrate(cells: dict, alpha: float, reps: int, check: bool) -> None:
    """The widest skew cutoffs per n (t from -s_t up, bootstrap-t from -s_b to -s_t, else refuse) whose rule
    keeps every shape's false-pass rate within alpha plus one Monte Carlo se (`check`: t's alone)."""
    tol = alpha + math.sqrt(alpha * (1 - alpha) / reps)
    grid = np.round(np.arange(0.0, 6.01, 0.05), 2)
    for n in sorted({n for _, n in cells}):
        rows = [c for (_, m), c in cells.items() if m == n]

        def worst(s_t: float, s_b: float) -> float:
            return max(float(np.mean((c["t"] & (c["skew"] >= -s_t)) |
                                     (c["bootstrap-t"] & (c["skew"] < -s_t) & (c["skew"] >= -s_b)))) for c in rows)

        def widest(ok, start: float) -> float | None:  # the cutoff grown from `start` until the first failure
            last = None
            for s in grid[grid >= start]:
                if not ok(s):
                    break
                last = s
            return last

        s_t = widest(lambda s: worst(s, s) <= tol, 0.0)
        if s_t is None:
            print(f"  n = {n}: t fails alpha even on the least skewed samples")
            continue
        s_b = s_t if check else widest(lambda s: worst(s_t, s) <= tol, s_t)
        print(f"  n = {n}: t for skew >= -{s_t:g}, bootstrap-t down to -{s_b:g} (worst shape {worst(s_t, s_b):.4f})")


def tails(reps: int, resamples: int, run_calibration: bool, seed: int, check: bool) -> None:
    margin, sd, alpha = 0.05, 0.15, 0.05
    mc = math.sqrt(alpha * (1 - alpha) / reps)
    print(f"tails: seed {seed}, reps={reps} per cell, bootstrap resamples={resamples}, alpha={alpha}, true delta = -margin; "
          f"Monte Carlo se at 5%: {mc:.4f}; a rate above {alpha + 2 * mc:.4f} exceeds alpha beyond MC error (2 se)")
    print(f"auto's cutoffs (qeval.stats.tails.TAIL_CUTOFFS): {TAIL_CUTOFFS}")
    cells = {}
    print("| shape | n | " + " | ".join(TAIL_METHODS) + " | auto refused | median skew |")
    print("| --- | --- | " + " | ".join("---" for _ in TAIL_METHODS) + " | --- | --- |")
    for name, shape in tail_shapes().items():
        for n in (20, 50, 100, 300):
            c = cells[name, n] = tails_cell(shape, n, reps, resamples, margin, sd, alpha, seed, check)
            rates = [float(c[m].mean()) for m in TAIL_METHODS]
            flag = ["-" if check and m in ("percentile", "bca", "bootstrap-t") else
                    "**%.3f**" % r if r > alpha + 2 * mc else "%.3f" % r for m, r in zip(TAIL_METHODS, rates)]
            print(f"| {name} | {n} | " + " | ".join(flag) + f" | {c['refused'].mean():.3f} | "
                  f"{np.median(c['skew']):+.2f} |", flush=True)
    if run_calibration:
        print("calibration (widest cutoffs keeping every shape within alpha + 1 MC se"
              + ("; the bootstrap-t's not searched" if check else "") + "):")
        calibrate(cells, alpha, reps, check)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--reps-clustered", type=int, default=None, help="reps for the clustered rows (default: --reps)")
    ap.add_argument("--tails", action="store_true", help="only the skewed and heavy-tailed continuous rows")
    ap.add_argument("--resamples", type=int, default=999, help="--tails: bootstrap resamples per interval")
    ap.add_argument("--calibrate", action="store_true", help="--tails: search the skew cutoffs of interval: auto")
    ap.add_argument("--check", action="store_true",
                    help="--tails: only t, gsd and what auto reads (fast: checks the committed cutoffs)")
    ap.add_argument("--seed", type=int, default=0, help="--tails: the simulation's seed (calibrate on one, check on another)")
    args = ap.parse_args()
    if args.tails:
        tails(args.reps, args.resamples, args.calibrate, args.seed, args.check)
        return
    margin, p_disc = 0.05, 0.10
    n_bin = n_required(margin, math.sqrt(p_disc), binary=True)
    sd = 0.15
    n_cont = n_required(margin, sd)
    print(f"reps={args.reps}, margin={margin}, alpha=0.05, beta=0.2")
    print(f"binary: flip rate {p_disc}, planned n = {n_bin}")
    fp, _, _, _ = gate_pass_rate(lambda g: binary_pair(g, n_bin, 0.6, p_disc, -margin), args.reps, margin)
    pw, inc, _, _ = gate_pass_rate(lambda g: binary_pair(g, n_bin, 0.6, p_disc, 0.0), args.reps, margin)
    print(f"  true delta = -margin: false-pass rate {fp:.4f} (must be <= 0.05)")
    print(f"  true delta = 0:       pass rate (power) {pw:.4f} (target >= 0.80); inconclusive {inc:.4f}")
    size = exact_test_rates(n_bin, (p_disc - margin) / 2, (p_disc + margin) / 2, margin)
    power = exact_test_rates(n_bin, p_disc / 2, p_disc / 2, margin)
    print(f"  the exact test a PASS must clear, summed over every outcome: size {size:.4f} (bounds the "
          f"false-pass rate), power {power:.4f}")
    print(f"continuous: sd(d) {sd}, planned n = {n_cont}")
    fp, _, _, _ = gate_pass_rate(lambda g: continuous_pair(g, n_cont, -margin, sd), args.reps, margin, sd=sd)
    pw, inc, _, _ = gate_pass_rate(lambda g: continuous_pair(g, n_cont, 0.0, sd), args.reps, margin, sd=sd)
    print(f"  true delta = -margin: false-pass rate {fp:.4f} (must be <= 0.05)")
    print(f"  true delta = 0:       pass rate (power) {pw:.4f} (target >= 0.80); inconclusive {inc:.4f}")
    t_crit = stats.t.ppf(0.95, n_cont - 1)  # normal differences: the t bound's rates are exact
    print(f"  exact (t and noncentral t): false-pass rate 0.0500, pass rate "
          f"{stats.nct.sf(t_crit, n_cont - 1, margin / sd * math.sqrt(n_cont)):.4f}")
    # intra-cluster correlation 1/2 in groups of 3: planned in groups (their means are the independent units)
    n_cl = n_required_clustered(margin, sd, 3, 0.5)
    reps_cl = args.reps_clustered or args.reps
    print(f"clustered rows: {reps_cl} reps, cluster-robust t (CR2, Bell-McCaffrey df); intra-cluster correlation 0.5")
    clustered_rows("balanced", np.arange(n_cl) // 3, reps_cl, margin, sd)
    # unequal groups, as benchmark subtasks are: group k holds about 1/(k+1) of the items (Zipf), 40 groups
    share = 1 / np.arange(1, 41)
    sizes = np.maximum(1, np.floor(share / share.sum() * n_cl)).astype(int)
    sizes[0] += n_cl - sizes.sum()
    clustered_rows("unequal (Zipf)", np.repeat(np.arange(40), sizes), reps_cl, margin, sd)


if __name__ == "__main__":
    main()
