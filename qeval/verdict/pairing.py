"""Pair a variant's records with the baseline's by item id: the arrays every comparison of a suite reads."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import EXIT_USAGE, QevalError
from ..record.store import Record


class PairingError(QevalError):
    """The same item id was asked differently of two variants: their scores cannot be paired. Bad input (exit 2),
    not a fault of the machine: the prompts or documents themselves differ, and a rerun gives the same."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class Paired:
    ids: list[str]
    groups: list[str | None]
    base: dict[str, np.ndarray]  # metric -> scores in `ids` order
    cand: dict[str, np.ndarray]
    unpaired_base: list[str]
    unpaired_cand: list[str]


def align(suite: str, base: list[Record], cand: list[Record]) -> Paired:
    """Inner join on item id (sample 0). A differing prompt or document hash is an error, not noise."""
    b = {r.item_id: r for r in base if r.sample == 0}
    c = {r.item_id: r for r in cand if r.sample == 0}
    ids = sorted(b.keys() & c.keys())
    for i in ids:
        for field in ("prompt_hash", "doc_hash"):
            hb, hc = getattr(b[i], field), getattr(c[i], field)
            if hb and hc and hb != hc:
                raise PairingError(f"suite {suite}: item {i!r} has a different {field} for the baseline "
                                   f"({hb[:12]}) and the variant ({hc[:12]}): the prompts are not the same")
    metrics = sorted(set.intersection(*(set(b[i].scores) & set(c[i].scores) for i in ids))) if ids else []
    return Paired(ids=ids, groups=[b[i].group for i in ids],
                  base={m: np.array([b[i].scores[m] for i in ids]) for m in metrics},
                  cand={m: np.array([c[i].scores[m] for i in ids]) for m in metrics},
                  unpaired_base=sorted(b.keys() - c.keys()), unpaired_cand=sorted(c.keys() - b.keys()))
