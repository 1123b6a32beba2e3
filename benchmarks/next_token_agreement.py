"""Where qeval's next-token scoring of a lettered multiple-choice task agrees with lm-eval's loglikelihood: per
item (the same answer right or wrong), per variant (its accuracy and delta against the baseline under each
scoring) and in the rank of the variants; and how many items had a letter outside the top-k (the one case where
next-token scoring cannot rank the choices and counts the item wrong).

Run: qeval run benchmarks/configs/next-token-agreement.yaml
     .venv/bin/python benchmarks/next_token_agreement.py runs/next-token-agreement [--baseline bf16]
(reads the campaign's store, changes nothing)
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path

import numpy as np

SUFFIX = "/next_token"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--baseline", default="bf16")
    a = ap.parse_args()
    with sqlite3.connect(f"file:{a.run_dir / 'results.sqlite'}?mode=ro", uri=True) as con:
        rows = con.execute("SELECT variant, suite, item_id, scores, extra FROM records "
                           "WHERE suite LIKE 'lm_eval/%'").fetchall()
    ll: dict[tuple[str, str], dict[str, float]] = {}  # (variant, task) -> item -> acc
    nt: dict[tuple[str, str], dict[str, float]] = {}
    outside: dict[tuple[str, str], int] = {}
    for variant, suite, item, scores, extra in rows:
        s = json.loads(scores)
        if suite.endswith(SUFFIX):
            key = (variant, suite[:-len(SUFFIX)])
            nt.setdefault(key, {})[item] = s["acc_next_token"]
            outside[key] = outside.get(key, 0) + (json.loads(extra or "{}").get("outside_top_k", 0) > 0)
        elif "acc" in s:
            ll.setdefault((variant, suite), {})[item] = s["acc"]
    for task in sorted({t for _, t in nt}):
        variants = sorted({v for v, t in nt if t == task and (v, t) in ll}, key=lambda v: (v != a.baseline, v))
        if a.baseline not in variants:
            continue
        items = sorted(set.intersection(*(set(ll[v, task]) & set(nt[v, task]) for v in variants)))
        arr = {(v, k): np.array([src[v, task][i] for i in items]) for v in variants for k, src in (("ll", ll), ("nt", nt))}
        print(f"{task}: {len(items)} items paired in every variant and both scorings\n")
        print("| variant | acc (loglikelihood) | acc_next_token | delta (loglikelihood) | delta (next token) "
              "| items scored alike | a letter outside the top-k |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for v in variants:
            d_ll = arr[v, "ll"].mean() - arr[a.baseline, "ll"].mean()
            d_nt = arr[v, "nt"].mean() - arr[a.baseline, "nt"].mean()
            alike = float((arr[v, "ll"] == arr[v, "nt"]).mean())
            print(f"| {v} | {arr[v, 'll'].mean():.3f} | {arr[v, 'nt'].mean():.3f} | {d_ll:+.3f} | {d_nt:+.3f} | "
                  f"{alike:.1%} | {outside.get((v, task), 0)} |")
        print(f"\nrank by loglikelihood: {_rank(variants, lambda v: arr[v, 'll'].mean())}"
              f"\nrank by next token:    {_rank(variants, lambda v: arr[v, 'nt'].mean())}")


def _rank(variants: list[str], acc) -> str:
    """Best first, ties (the same accuracy on the same items) joined by '='."""
    ordered = sorted(variants, key=lambda v: -acc(v))
    out = ordered[0]
    for prev, v in zip(ordered, ordered[1:]):
        out += (" = " if np.isclose(acc(prev), acc(v)) else " > ") + v
    return out


if __name__ == "__main__":
    main()
