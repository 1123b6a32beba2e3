"""Speed of the statistics (targets: a 10,000-resample paired bootstrap over 100,000 items in
<= 1 s; every statistic for 4 variants x 20 tasks x 1,000 items in <= 5 s).

Run: .venv/bin/python benchmarks/stats_speed.py
"""

from __future__ import annotations

import time

import numpy as np

from qeval.record.metrics import continuous, indicator
from qeval.stats import paired_bootstrap_ci
from qeval.verdict.comparison import adjust_all, compare_metric
from qeval.verdict.gates import evaluate
from qeval.verdict.pairing import Paired
from qeval.verdict.policy import GatePolicy, GateRule


def timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def floor_parts(d: np.ndarray) -> None:
    """What bounds the all-distinct case, per index on one core: the raw random bits (two draws per
    64-bit word), the gather from d, and memory bandwidth (a plain sum over the bytes one index moves)."""
    k = 10_000_000
    bits = np.random.SFC64(0)

    def raw_bits() -> None:
        for _ in range(k // 100_000):
            bits.random_raw(50_000)  # dropped at once: a list of them would time page faults, not bits

    t_raw = timed(raw_bits, repeat=5)
    idx = np.random.default_rng(0).integers(0, len(d), 100_000)
    buf = np.empty(100_000)
    t_take = timed(lambda: [np.take(d, idx, out=buf, mode="clip").sum() for _ in range(k // 100_000)], repeat=5)
    # bytes one index moves: raw 4, product 8 + 16 (the shift reads and writes it), value 8 + 8, d 8
    big = np.ones(k * 52 // 8)
    t_bw = timed(lambda: big.sum(), repeat=5)
    print(f"  per index, one core: raw bits {t_raw / k * 1e9:.2f} ns, gather + sum {t_take / k * 1e9:.2f} ns, "
          f"52 bytes at memory bandwidth {t_bw / k * 1e9:.2f} ns (so they stay in cache)")


def main() -> None:
    rng = np.random.default_rng(0)
    n = 100_000
    base = (rng.random(n) < 0.6).astype(float)
    cand = np.where(rng.random(n) < 0.1, 1 - base, base)
    t_bin = timed(lambda: paired_bootstrap_ci(base, cand, resamples=10_000, seed=0))
    print(f"bootstrap, 10,000 resamples x 100,000 items, 0/1 scores:      {t_bin:.3f} s (target <= 1 s)")
    lb, lc = rng.integers(0, 11, n) / 10, rng.integers(0, 11, n) / 10  # graded 0..1 in tenths: 21 distinct deltas
    t_lev = timed(lambda: paired_bootstrap_ci(lb, lc, resamples=10_000, seed=0))
    print(f"bootstrap, 10,000 resamples x 100,000 items, graded scores:   {t_lev:.3f} s (target <= 1 s)")
    cb, cc = rng.random(n), rng.random(n)
    t_first = timed(lambda: paired_bootstrap_ci(cb, cc, resamples=10_000, seed=0), repeat=1)
    t_cont = timed(lambda: paired_bootstrap_ci(cb, cc, resamples=10_000, seed=0), repeat=2)
    print(f"bootstrap, 10,000 resamples x 100,000 items, all distinct:    {t_cont:.3f} s (target <= 1 s; 1e9 draws)")
    print(f"  the first in a process (numba loads its compiled loop):       {t_first:.3f} s")
    t1 = timed(lambda: paired_bootstrap_ci(cb, cc, resamples=10_000, seed=0, threads=1), repeat=1)
    print(f"  the same on one thread:                                       {t1:.3f} s")
    floor_parts(cb - cc)

    rule = GateRule(margin=0.05)
    policy = GatePolicy(rules=[rule])

    def campaign() -> int:
        comparisons = []
        for v in range(4):
            for t in range(20):
                b = (rng.random(1000) < 0.6).astype(float)
                c = np.where(rng.random(1000) < 0.1, 1 - b, b)
                p = Paired(ids=[str(i) for i in range(1000)], groups=[None] * 1000, base={"acc": b}, cand={"acc": c},
                           unpaired_base=[], unpaired_cand=[])
                comparisons.append(compare_metric(f"v{v}", f"t{t}", "acc", True, p, rule, policy,
                                                  spec=indicator("simulated")))
        # and the gates: every PASS of a 0/1 metric also runs the exact test (the slow part)
        return sum(g.p_exact is not None for g in evaluate(policy, adjust_all(comparisons, "holm"),
                                                            [f"v{v}" for v in range(4)]))

    exact = campaign()
    t_all = timed(campaign, repeat=1)
    print(f"every statistic, 4 variants x 20 tasks x 1,000 items (0/1):   {t_all:.3f} s (target <= 5 s; gates "
          f"included, {exact} of 80 ran the exact test)")

    def campaign_continuous() -> None:
        for v in range(4):
            for t in range(20):
                b = rng.random(1000)
                c = b + rng.normal(0, 0.05, 1000)
                p = Paired(ids=[str(i) for i in range(1000)], groups=[None] * 1000, base={"f1": b}, cand={"f1": c},
                           unpaired_base=[], unpaired_cand=[])
                compare_metric(f"v{v}", f"t{t}", "f1", True, p, rule, policy, spec=continuous(True, "simulated"))

    t_cc = timed(campaign_continuous, repeat=1)
    print(f"every statistic, 4 variants x 20 tasks x 1,000 items (cont.): {t_cc:.3f} s (with a permutation test)")


if __name__ == "__main__":
    main()
