"""The bootstrap's inner loop, compiled with numba (imported only by the resampler that uses it)."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True)
def draw_and_sum(words, d, threshold, rows, size, sums, rejected):  # pragma: no cover - compiled
    """Adds to sums[r] the d[i] of row r's `size` draws, i = (w * n) >> 32 for each 32-bit word w
    (multiply-shift); draws whose product's low 32 bits fall below `threshold` are left out and their
    positions written to `rejected`, in order. Returns how many there were.

    Compiled (numba): fused, the draw, gather and sum cost one pass over the words; numpy needs five
    (multiply, shift, take, sum, and the words themselves), which is what the 1 s target could not take."""
    n = np.uint64(len(d))
    k = 0
    nrej = 0
    for r in range(rows):
        a0 = a1 = 0.0  # two accumulators: the adds overlap instead of waiting on each other
        for j in range(0, size - 1, 2):
            p0, p1 = np.uint64(words[k]) * n, np.uint64(words[k + 1]) * n
            if (p0 & np.uint64(0xFFFFFFFF)) < threshold:
                rejected[nrej] = k
                nrej += 1
            else:
                a0 += d[p0 >> np.uint64(32)]
            if (p1 & np.uint64(0xFFFFFFFF)) < threshold:
                rejected[nrej] = k + 1
                nrej += 1
            else:
                a1 += d[p1 >> np.uint64(32)]
            k += 2
        if size % 2:
            p0 = np.uint64(words[k]) * n
            if (p0 & np.uint64(0xFFFFFFFF)) < threshold:
                rejected[nrej] = k
                nrej += 1
            else:
                a0 += d[p0 >> np.uint64(32)]
            k += 1
        sums[r] += a0 + a1
    return nrej
