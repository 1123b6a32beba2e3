"""Where real per-chunk KL stands against the heavy-tail cutoffs of `interval: auto`: for each variant of a
finished campaign's logprobs suites, the per-chunk mean KL(baseline || variant) and top-1 agreement as the
gates read them, their sample skew, and the interval `auto` would choose (qeval/stats/tails.py).

Run: .venv/bin/python benchmarks/kl_skew.py RUN_DIR [--baseline bf16]
(RUN_DIR: a campaign's run folder, holding results.sqlite; reads it, changes nothing)
"""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path

from scipy import stats

from qeval.record.store import ResultsStore
from qeval.stats.tails import choose_interval
from qeval.suites.logprobs import compare_chunks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--baseline", default="bf16")
    a = ap.parse_args()
    path = a.run_dir / "results.sqlite"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        rows = con.execute("SELECT DISTINCT variant, variant_key, suite, suite_key FROM records "
                           "WHERE suite LIKE 'logprobs/%' ORDER BY suite, variant").fetchall()
    store = ResultsStore(path)
    by_suite: dict[str, dict[str, list]] = {}
    for variant, vkey, suite, skey in rows:
        by_suite.setdefault(suite, {})[variant] = store.records(vkey, skey)
    print("| suite | variant | chunks | mean KL | KL skew | top-1 skew | `auto` reads |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for suite, recs in by_suite.items():
        base = recs.get(a.baseline)
        if base is None:
            continue
        for variant, cand in recs.items():
            if variant == a.baseline:
                continue
            cc = compare_chunks(base, cand)
            choice = choose_interval(-cc.kl)  # oriented: KL is lower-is-better, so a long tail of KL is of losses
            print(f"| {suite} | {variant} | {len(cc.kl)} | {cc.kl.mean():.4f} | {stats.skew(cc.kl):+.2f} | "
                  f"{stats.skew(cc.top1):+.2f} | {choice.method or 'refused'} |")


if __name__ == "__main__":
    main()
