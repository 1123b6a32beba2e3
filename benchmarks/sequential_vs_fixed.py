"""Sequential gates against fixed n on a real campaign: items evaluated, evaluation time, and verdicts.

Reads two run records of the same campaign (one with a fixed-n policy, one with sequential gates, e.g.
examples/demo.yaml and examples/demo-sequential.yaml) and prints, per variant, the items each evaluated,
the seconds its suites took (eval_seconds: the engine busy with suites; engine start and probe apart),
and each gate's verdict in both, so that every verdict that differs can be explained.

Run: .venv/bin/python benchmarks/sequential_vs_fixed.py runs/demo/run.json runs/demo-sequential/run.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _items(v: dict) -> int:
    return sum(s["n"] for s in v.get("suites", []))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("fixed", type=Path)
    ap.add_argument("sequential", type=Path)
    args = ap.parse_args()
    fixed, seq = (json.loads(p.read_text()) for p in (args.fixed, args.sequential))
    fv = {v["name"]: v for v in fixed["variants"]}
    print("| variant | items fixed | items sequential | saved | eval s fixed | eval s sequential | verdict fixed | "
          "verdict sequential | suites not run |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    tot_f = tot_s = sec_f = sec_s = 0.0
    for v in seq["variants"]:
        f = fv.get(v["name"])
        if f is None:
            continue
        a, b = _items(f), _items(v)
        tot_f, tot_s = tot_f + a, tot_s + b
        sec_f, sec_s = sec_f + (f.get("eval_seconds") or 0), sec_s + (v.get("eval_seconds") or 0)
        print(f"| {v['name']} | {a} | {b} | {1 - b / a:.0%} | {f.get('eval_seconds')} | {v.get('eval_seconds')} | "
              f"{fixed['verdicts'].get(v['name'], 'baseline')} | {seq['verdicts'].get(v['name'], 'baseline')} | "
              f"{', '.join(v.get('not_run', {})) or '-'} |")
    print(f"| all | {tot_f:.0f} | {tot_s:.0f} | {1 - tot_s / tot_f:.0%} | {sec_f:.0f} | {sec_s:.0f} | "
          f"{fixed['verdict']} | {seq['verdict']} | |")
    print("\n| variant | gate | fixed | sequential | items used / planned |")
    print("| --- | --- | --- | --- | --- |")
    fg = {(g["variant"], g["suite"], g["metric"]): g for g in fixed["gates"]}
    for g in seq["gates"]:
        f = fg.get((g["variant"], g["suite"], g["metric"]))
        used = f"{g['items_used']} / {g['items_planned']}" if g.get("items_used") is not None else "-"
        mark = "" if f is None or f["verdict"] == g["verdict"] else " (differs)"
        print(f"| {g['variant']} | {g['suite']}/{g['metric']} | {f['verdict'] if f else '-'} | {g['verdict']}{mark} | "
              f"{used} |")


if __name__ == "__main__":
    main()
