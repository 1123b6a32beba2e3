"""Corrections across every (variant, task, metric) of a campaign: Holm's step-down, and statsmodels'
Benjamini-Hochberg."""

from __future__ import annotations

from typing import Literal, Sequence

import numpy as np

Correction = Literal["holm", "bh", "none"]


def _holm(p: np.ndarray) -> np.ndarray:
    """Holm: the i-th smallest of n p-values times n - i (from 0), kept non-decreasing, at most 1."""
    # not statsmodels' holm: it runs a full gc.collect() on every call, ~0.1 s in a process with a large heap
    order = np.argsort(p)
    stepped = np.maximum.accumulate(p[order] * np.arange(len(p), 0, -1))
    stepped[stepped > 1] = 1
    out = np.empty_like(stepped)
    out[order] = stepped
    return out


def adjust(p_values: Sequence[float], method: Correction = "holm") -> np.ndarray:
    p = np.asarray(p_values, dtype=float)
    if method == "none" or len(p) == 0:
        return p
    if method == "holm":
        return _holm(p)
    from statsmodels.stats.multitest import multipletests  # statsmodels loads pandas: only where BH is asked for

    return multipletests(p, method="fdr_bh")[1]
