"""Corrections across every (variant, task, metric) of a campaign (statsmodels' multipletests)."""

from __future__ import annotations

from typing import Literal, Sequence

import numpy as np
from statsmodels.stats.multitest import multipletests

Correction = Literal["holm", "bh", "none"]
_METHOD = {"holm": "holm", "bh": "fdr_bh"}


def adjust(p_values: Sequence[float], method: Correction = "holm") -> np.ndarray:
    p = np.asarray(p_values, dtype=float)
    if method == "none" or len(p) == 0:
        return p
    return multipletests(p, method=_METHOD[method])[1]
