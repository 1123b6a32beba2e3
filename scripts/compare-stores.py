"""Do two runs hold the same per-item records? One line per (variant key, suite key), then the verdict.

    python scripts/compare-stores.py RUN_A/results.sqlite RUN_B/results.sqlite

A record is its item, sample, response and scores (created_at and the run's own paths are not);
exit 0 when every record is in both and equal, 1 otherwise. Used to check that a refactor changed no result.
"""

from __future__ import annotations

import hashlib
import sqlite3
import sys
from collections import defaultdict


def records(path: str) -> dict[tuple[str, str], dict[tuple[str, int], str]]:
    out: dict[tuple[str, str], dict[tuple[str, int], str]] = defaultdict(dict)
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    for vkey, skey, item, sample, resp, scores, prompt, doc in db.execute(
            "SELECT variant_key, suite_key, item_id, sample, response, scores, prompt_hash, doc_hash FROM records"):
        out[(vkey, skey)][(item, sample)] = hashlib.sha256(repr((resp, scores, prompt, doc)).encode()).hexdigest()
    return out


def main(a: str, b: str) -> int:
    ra, rb = records(a), records(b)
    same = True
    for k in sorted(set(ra) | set(rb)):
        x, y = ra.get(k, {}), rb.get(k, {})
        diff = sum(1 for i in set(x) | set(y) if x.get(i) != y.get(i))
        same &= diff == 0
        print(f"{k[0][:24]:24} {k[1][:40]:40} {len(x):5} {len(y):5} {'same' if diff == 0 else f'{diff} differ'}")
    print("identical records" if same else "records differ")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
