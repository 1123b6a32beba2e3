"""Where two runs' records differ, is it the scores or only the floats? Per (variant, suite), over the records
both runs hold under the same keys: how many differ at all (response or scores), and how many differ in a 0/1
score: e.g. what a GPU engine's batch shape moves (a serial run against a packed one).

    python scripts/compare-scores.py RUN_A/results.sqlite RUN_B/results.sqlite [--by-name]

--by-name matches variants by name instead of by key: for two qeval versions whose variant keys differ.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections import defaultdict


def records(path: str, by_name: bool = False) -> dict[tuple, tuple[str, str, dict]]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    return {(v if by_name else vk, sk, item, s): (v, resp, json.loads(scores))
            for vk, sk, item, s, v, resp, scores in db.execute(
                "SELECT variant_key, suite_key, item_id, sample, variant, response, scores FROM records")}


def binary(scores: dict) -> dict:
    return {m: x for m, x in scores.items() if isinstance(x, (bool, int, float)) and x in (0, 1)}


def main(a: str, b: str, by_name: bool = False) -> None:
    ra, rb = records(a, by_name), records(b, by_name)
    agg: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for k in ra.keys() & rb.keys():
        (v, resp_a, sa), (_, resp_b, sb) = ra[k], rb[k]
        n = agg[(v, k[1].split(":")[1])]
        n[0] += 1
        n[1] += resp_a != resp_b or sa != sb
        n[2] += binary(sa) != binary(sb)
    print(f"{'variant':14} {'suite':26} {'both':>5} {'differ':>6} {'0/1 differ':>10}")
    for (v, s), (n, d, f) in sorted(agg.items()):
        print(f"{v:14} {s:26} {n:5} {d:6} {f:10}")
    print(f"only in A: {len(ra.keys() - rb.keys())}, only in B: {len(rb.keys() - ra.keys())}")


if __name__ == "__main__":
    main(*sys.argv[1:3], by_name="--by-name" in sys.argv[3:])
