"""Is the gate honest? Simulated campaigns with a known true delta.

- true delta = -margin exactly: the gate must PASS at most alpha of the time (false-pass rate);
- true delta = 0 at the planned n: it must PASS at least 1 - beta of the time (power).
Binary and continuous metrics, with and without clustering (items sharing a group).

Run: .venv/bin/python benchmarks/simulate_gates.py [--reps 2000]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from qeval.compare import Paired, compare_metric
from qeval.config import GatePolicy, GateRule
from qeval.gates import evaluate
from qeval.stats import n_required


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


def gate_pass_rate(make, reps: int, margin: float, groups=None, sd: float | None = None) -> tuple[float, float]:
    rule = GateRule(margin=margin, alpha=0.05, beta=0.2, planning_flip_rate=0.1, planning_sd=sd)
    policy = GatePolicy(rules=[rule], bootstrap_resamples=2000)
    passed = inconclusive = 0
    for r in range(reps):
        b, c = make(np.random.default_rng(r))
        n = len(b)
        gl = [f"g{x}" for x in groups] if groups is not None else [None] * n
        p = Paired(ids=[str(i) for i in range(n)], groups=gl, base={"m": b}, cand={"m": c}, unpaired_base=[],
                   unpaired_cand=[])
        comp = compare_metric("v", "s", "m", True, p, rule, policy)
        [g] = evaluate(policy, [comp], ["v"])
        passed += g.verdict == "PASS"
        inconclusive += g.verdict == "INCONCLUSIVE"
    return passed / reps, inconclusive / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=1000)
    args = ap.parse_args()
    margin, p_disc = 0.05, 0.10
    n_bin = n_required(margin, math.sqrt(p_disc), binary=True)
    sd = 0.15
    n_cont = n_required(margin, sd)
    print(f"reps={args.reps}, margin={margin}, alpha=0.05, beta=0.2")
    print(f"binary: flip rate {p_disc}, planned n = {n_bin}")
    fp, _ = gate_pass_rate(lambda g: binary_pair(g, n_bin, 0.6, p_disc, -margin), args.reps, margin)
    pw, inc = gate_pass_rate(lambda g: binary_pair(g, n_bin, 0.6, p_disc, 0.0), args.reps, margin)
    print(f"  true delta = -margin: false-pass rate {fp:.3f} (must be <= 0.05)")
    print(f"  true delta = 0:       pass rate (power) {pw:.3f} (target >= 0.80); inconclusive {inc:.3f}")
    print(f"continuous: sd(d) {sd}, planned n = {n_cont}")
    fp, _ = gate_pass_rate(lambda g: continuous_pair(g, n_cont, -margin, sd), args.reps, margin, sd=sd)
    pw, inc = gate_pass_rate(lambda g: continuous_pair(g, n_cont, 0.0, sd), args.reps, margin, sd=sd)
    print(f"  true delta = -margin: false-pass rate {fp:.3f} (must be <= 0.05)")
    print(f"  true delta = 0:       pass rate (power) {pw:.3f} (target >= 0.80); inconclusive {inc:.3f}")
    n_groups = 40
    n_cl = n_cont * 2
    groups = np.repeat(np.arange(n_groups), math.ceil(n_cl / n_groups))[:n_cl]
    print(f"continuous, clustered: {n_groups} groups, n = {n_cl} (clustered-t interval)")
    fp, _ = gate_pass_rate(lambda g: continuous_pair(g, n_cl, -margin, sd, groups), args.reps, margin, groups, sd)
    pw, inc = gate_pass_rate(lambda g: continuous_pair(g, n_cl, 0.0, sd, groups), args.reps, margin, groups, sd)
    print(f"  true delta = -margin: false-pass rate {fp:.3f} (must be <= 0.05)")
    print(f"  true delta = 0:       pass rate {pw:.3f}; inconclusive {inc:.3f}")


if __name__ == "__main__":
    main()
