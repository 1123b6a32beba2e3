"""Input checks shared by the statistics: paired 1-D finite arrays."""

from __future__ import annotations

import numpy as np


def as_pair(base: np.ndarray, cand: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    b, c = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    if b.shape != c.shape or b.ndim != 1:
        raise ValueError(f"paired arrays must be 1-D and the same length, got {b.shape} and {c.shape}")
    if len(b) == 0:
        raise ValueError("no paired items")
    if not (np.isfinite(b).all() and np.isfinite(c).all()):
        raise ValueError("scores must be finite (NaN or inf found)")
    return b, c
