"""Sequential gates against fixed n and against naive peeking, on simulated paired differences.

For each metric kind and true delta: how often the gate PASSes (at delta = -margin: the false-pass
rate, which must stay <= alpha; at delta = 0: the power) and how many items it used on average, for
- fixed n: the paired t bound at the planned n only (the design qeval's gates use today);
- peeking: the same fixed-n t bound read at every look, stopping at the first PASS or FAIL;
- gsd: qeval.stats.sequential.gsd_gate (O'Brien-Fleming spending, non-binding futility);
- betting: qeval.stats.sequential.betting_gate (Waudby-Smith & Ramdas confidence sequence).
Items in groups: gsd's clustered form (CR2 with Bell-McCaffrey df, looks between groups) against the
fixed-n CR2 bound and peeking at it; the betting gate refuses groups.

Run: nice -n 19 .venv/bin/python benchmarks/sequential_gates.py [--reps 10000] [--reps-clustered 2000]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import stats

from qeval.stats import clustered_mean_delta, n_required, n_required_clustered
from qeval.stats.sequential import betting_gate, cluster_looks, gsd_gate, look_schedule

ALPHA, BETA, LOOK_EVERY, MIN_ITEMS = 0.05, 0.2, 50, 100


def binary_d(rng: np.random.Generator, n: int, flip: float, delta: float) -> np.ndarray:
    # discordant pairs at rate `flip`, gains (+1) and losses (-1) split so that E d = delta
    u = rng.random(n)
    gain = (flip + delta) / 2
    return np.where(u < gain, 1.0, np.where(u < flip, -1.0, 0.0))


def continuous_d(rng: np.random.Generator, n: int, half_width: float, delta: float) -> np.ndarray:
    # bounded differences (a score in [0, 1] moved by a bounded amount): uniform around delta
    return delta + rng.uniform(-half_width, half_width, n)


def t_bound(d: np.ndarray, groups: list[str] | None) -> tuple[float, float]:
    """The fixed-n one-sided (1 - alpha) bounds: the paired t, or CR2 with Bell-McCaffrey df for groups."""
    if groups is not None:
        md = clustered_mean_delta(np.zeros(len(d)), d, groups, confidence=1 - 2 * ALPHA)
        return md.ci_low, md.ci_high
    half = stats.t.ppf(1 - ALPHA, len(d) - 1) * max(float(d.std(ddof=1)), 1e-12) / math.sqrt(len(d))
    return d.mean() - half, d.mean() + half


def peeking(d: np.ndarray, margin: float, looks: tuple[int, ...], groups: list[str] | None) -> tuple[bool, int]:
    """The fixed-n bound read at every look: what a user who watches a dashboard does."""
    for t in looks:
        lo, hi = t_bound(d[:t], None if groups is None else groups[:t])
        if lo > -margin:
            return True, t
        if hi < -margin or t == looks[-1]:
            return False, t
    raise AssertionError("the last look decides")


def row(label: str, make, n: int, margin: float, sd_plan: float, binary: bool, reps: int,
        groups: list[str] | None = None) -> list[str]:
    looks = look_schedule(n, LOOK_EVERY, MIN_ITEMS)
    if groups is not None:
        looks = cluster_looks(groups, looks)
    out = []
    for mult in (-1, 0, -2, -4):
        delta = mult * margin
        fixed = peek = g = b = 0
        items = {"peek": 0, "gsd": 0, "betting": 0}
        for r in range(reps):
            d = make(np.random.default_rng([r, mult + 10]), n, delta)
            fixed += t_bound(d, groups)[0] > -margin
            p, t = peeking(d, margin, looks, groups)
            peek += p
            items["peek"] += t
            rg = gsd_gate(d, n, margin, ALPHA, look_every=LOOK_EVERY, min_items=MIN_ITEMS, binary=binary,
                          planning_sd=sd_plan, groups=groups)
            g += rg.verdict == "PASS"
            items["gsd"] += rg.items_used
            if groups is None:
                rb = betting_gate(d, n, margin, ALPHA, look_every=LOOK_EVERY, min_items=MIN_ITEMS)
                b += rb.verdict == "PASS"
                items["betting"] += rb.items_used
        what = {-1: "false-pass", 0: "power", -2: "pass", -4: "pass"}[mult]
        bet = (f"{b / reps:.4f}", f"{items['betting'] / reps / n:.2f}") if groups is None else ("n/a", "n/a")
        out.append(f"| {label} | {mult:+d}m | {what} | {fixed / reps:.4f} | {peek / reps:.4f} | {g / reps:.4f} | "
                   f"{bet[0]} | {items['peek'] / reps / n:.2f} | {items['gsd'] / reps / n:.2f} | {bet[1]} |")
        print(out[-1], flush=True)
    return out


def grouped_d(rng: np.random.Generator, labels: np.ndarray, sd: float, delta: float) -> np.ndarray:
    # a shared shift per group, as large as the item noise: intra-group correlation 0.5
    shift = rng.normal(0, sd, labels.max() + 1)[labels]
    return delta + (rng.normal(0, sd, len(labels)) + shift) / math.sqrt(2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--reps-clustered", type=int, default=None, help="reps of the clustered rows (default: --reps)")
    args = ap.parse_args()
    t0 = time.time()
    flip, m_bin = 0.10, 0.02
    n_bin = n_required(m_bin, math.sqrt(flip), ALPHA, BETA, binary=True)
    half, m_cont = 0.25, 0.01
    sd_cont = half / math.sqrt(3)
    n_cont = n_required(m_cont, sd_cont, ALPHA, BETA)
    print(f"reps {args.reps}; alpha {ALPHA}, beta {BETA}; looks every {LOOK_EVERY} from {MIN_ITEMS} items and at n; "
          f"Monte Carlo se of a rate near 0.05: {math.sqrt(0.05 * 0.95 / args.reps):.4f}")
    print(f"binary: flip rate {flip}, margin {m_bin}, fixed n {n_bin}; continuous: d = delta + U(-{half}, {half}) "
          f"(sd {sd_cont:.3f}), margin {m_cont}, fixed n {n_cont}")
    print("| metric | true delta | rate | fixed n | peeking | gsd | betting | items/n peeking | items/n gsd | "
          "items/n betting |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    row(f"binary (n {n_bin})", lambda g, n, d: binary_d(g, n, flip, d), n_bin, m_bin, math.sqrt(flip), True, args.reps)
    row(f"continuous (n {n_cont})", lambda g, n, d: continuous_d(g, n, half, d), n_cont, m_cont, sd_cont, False,
        args.reps)
    # groups of 1 to 7 items (mean 4) with intra-group correlation 0.5; n from n_required_clustered at
    # the size-weighted mean group size (sum m^2 / n = 5 for these sizes)
    sd_g, m_g = 0.15, 0.02
    n_g = n_required_clustered(m_g, sd_g, 5, 0.5, ALPHA, BETA)
    sizes = np.random.default_rng(0).integers(1, 8, 10 * n_g)
    sizes = sizes[:int(np.searchsorted(np.cumsum(sizes), n_g)) + 1]
    labels = np.repeat(np.arange(len(sizes)), sizes)
    n_items = len(labels)
    deff = 1 + 0.5 * ((sizes ** 2).sum() / n_items - 1)
    print(f"clustered: {len(sizes)} groups of 1..7 items, {n_items} items, design effect {deff:.2f}, "
          f"margin {m_g}, item sd {sd_g}; reps {args.reps_clustered or args.reps}")
    row(f"clustered (n {n_items})", lambda g, n, d: grouped_d(g, labels, sd_g, d), n_items, m_g,
        sd_g * math.sqrt(deff), False, args.reps_clustered or args.reps, [f"g{x}" for x in labels])
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
