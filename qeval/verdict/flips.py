"""Flipped items: what changed between the baseline and a variant, item by item, for a reviewer to read.

A variant within 1% of the baseline's accuracy may still answer a quarter of the items differently (NVIDIA
Model Optimizer's fidelity check saw ~24%); the counts alone are in the comparisons (McNemar's b and c), the
items themselves are here. Pure: records in, rows out. For a 0/1 metric (declared so, never inferred):
`lost` = baseline right and variant wrong, `gained` = the reverse. For a logprobs suite: its chunks by KL,
largest first. The record keeps the first few of each (`SuiteFlips`, for the report); `flips.parquet` in the
run folder and the variant's MLflow table keep them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..record.measurements import FlipRow, SuiteFlips
from ..record.store import Record

KEEP = 10  # rows of each direction kept in the record (the report shows these)
FLIP_TEXT = 300  # characters of a response kept in the record


def _cut(text: str | None, n: int | None) -> str | None:
    return text if text is None or n is None or len(text) <= n else text[:n] + "…"


def item_flips(metric: str, base: Sequence[Record], cand: Sequence[Record], keep: int = KEEP,
               cut: int | None = FLIP_TEXT) -> tuple[SuiteFlips, list[FlipRow]]:
    """The items of a 0/1 metric whose result differs, paired by (item id, sample); ordered by item id."""
    by_key = {(r.item_id, r.sample): r for r in base if metric in r.scores}
    rows: list[FlipRow] = []
    n = 0
    for c in sorted(cand, key=lambda r: (r.item_id, r.sample)):
        b = by_key.get((c.item_id, c.sample))
        if b is None or metric not in c.scores:
            continue
        n += 1
        bs, cs = b.scores[metric], c.scores[metric]
        if bs == cs:
            continue
        rows.append(FlipRow(item_id=c.item_id, sample=c.sample, direction="lost" if bs > cs else "gained",
                            base_score=bs, variant_score=cs, base_response=b.response, variant_response=c.response,
                            target=b.extra.get("target") or c.extra.get("target")))
    lost = [r for r in rows if r.direction == "lost"]
    gained = [r for r in rows if r.direction == "gained"]
    shown = [r.model_copy(update={"base_response": _cut(r.base_response, cut),
                                  "variant_response": _cut(r.variant_response, cut)})
             for r in lost[:keep] + gained[:keep]]
    return SuiteFlips(metric=metric, n=n, lost=len(lost), gained=len(gained), rows=shown), rows


def chunk_flips(ids: Sequence[str], kl: Sequence[float], top1: Sequence[float] | None,
                keep: int = KEEP) -> tuple[SuiteFlips, list[FlipRow]]:
    """A logprobs suite's chunks, largest KL first (ties by chunk id)."""
    order = sorted(range(len(ids)), key=lambda i: (-float(kl[i]), ids[i]))
    rows = [FlipRow(item_id=ids[i], direction="kl", kl=float(kl[i]),
                    top1=None if top1 is None else float(top1[i])) for i in order]
    return SuiteFlips(metric="kl", kind="chunks", n=len(ids), rows=rows[:keep]), rows


def table(rows_by: dict[tuple[str, str], list[FlipRow]]) -> list[dict]:
    """Every flipped row of the campaign as flat dicts, (variant, suite) first: flips.parquet's rows."""
    return [{"variant": v, "suite": s, **r.model_dump()} for (v, s), rows in rows_by.items() for r in rows]


def write_parquet(rows: list[dict], path: Path) -> Path:
    """flips.parquet, written whole or not at all (pandas + pyarrow, which MLflow brings)."""
    import pandas as pd

    columns = ["variant", "suite", *FlipRow.model_fields]
    tmp = path.with_name(path.name + ".tmp")
    pd.DataFrame(rows, columns=columns).to_parquet(tmp, index=False)
    tmp.replace(path)
    return path
