"""Bootstrap means of a paired difference, drawn fast: the engine behind paired_bootstrap_ci."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

MULTINOMIAL_MAX_VALUES = 256  # 10,000 multinomial draws over 256 values: ~0.3 s here
BLOCK_RESAMPLES = 64  # resamples per spawned generator: the draws depend on the seed alone, not on threads
DRAWS_PER_CALL = 1 << 17  # indices per draw-and-gather call: fewer calls, less time holding the GIL
THREADED_FROM = 1 << 22  # draws below which a thread pool costs more than it saves
EXACT_FROM = 1 << 17  # items above which indices are drawn with rejection: see _block_means


def resample_means(d: np.ndarray, resamples: int, seed: int, threads: int | None = None) -> np.ndarray:
    """The means of `resamples` bootstrap resamples of d (n items drawn with replacement), seeded."""
    n = len(d)
    values, first, counts = np.unique(d, return_index=True, return_counts=True)
    if len(values) <= MULTINOMIAL_MAX_VALUES:
        order = np.argsort(first)  # categories in order of first appearance: swapping the arms mirrors the draws
        values, counts = values[order], counts[order]
        # Few distinct differences (0/1 metrics give at most three): a resample's mean depends only on
        # how often each value is drawn, a multinomial count. Same distribution as drawing n indices,
        # at O(values) instead of O(n) per resample.
        draws = np.random.default_rng(seed).multinomial(n, counts / n, size=resamples)
        return draws @ values / n
    return index_resample_means(d, resamples, seed, threads)


def index_resample_means(d: np.ndarray, resamples: int, seed: int, threads: int | None = None) -> np.ndarray:
    """Resample by drawing n indices per resample; blocks of BLOCK_RESAMPLES run on threads.

    numpy releases the GIL while it fills random arrays, gathers and sums, so threads scale; each block
    has its own generator spawned from SeedSequence(seed), which makes the result independent of the
    thread count.
    """
    from . import _kernel  # noqa: F401  numba loads here, once (~0.5 s), only when a bootstrap needs it

    d = np.ascontiguousarray(d, dtype=np.float64)  # one compiled specialization
    sizes = [min(BLOCK_RESAMPLES, resamples - s) for s in range(0, resamples, BLOCK_RESAMPLES)]
    seeds = np.random.SeedSequence(seed).spawn(len(sizes))
    workers = min(len(sizes), threads or _usable_cpus())
    if workers <= 1 or resamples * len(d) < THREADED_FROM:
        return np.concatenate([_block_means(d, s, k) for s, k in zip(seeds, sizes)])
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return np.concatenate(list(pool.map(_block_means, [d] * len(sizes), seeds, sizes)))


def _usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def call_sizes(n: int) -> tuple[int, list[int]]:
    """How a block's draws are split into calls, a function of n alone: whole resamples per call when n
    fits in one (rows, [n]); else each resample in near-equal pieces (1, piece sizes)."""
    if n <= DRAWS_PER_CALL:
        return DRAWS_PER_CALL // n, [n]
    pieces = -(-n // DRAWS_PER_CALL)
    return 1, [n // pieces + (k < n % pieces) for k in range(pieces)]


def _block_means(d: np.ndarray, seed: np.random.SeedSequence, k: int) -> np.ndarray:
    """Each draw is an index (w * n) >> 32 from a 32-bit word w of the raw stream, two per 64-bit word.

    Plain multiply-shift gives some indices one more of the 2^32 values of w than others: each index's
    probability is off by less than n / 2^32 relative, which moves a resample mean's expectation by less
    than n^1.5 / 2^32 of its standard error even for adversarially ordered data (0.7% at n = 100,000; the
    Monte Carlo error of a 2.5% quantile of 10,000 resamples is ~3% of it). Above EXACT_FROM items
    that bound grows, so draws whose product's low 32 bits fall below 2^32 mod n are redrawn in order,
    one word each (Lemire's rejection), which makes every index exactly equally likely.
    """
    from ._kernel import draw_and_sum  # loaded once, by index_resample_means

    bits = np.random.SFC64(seed)  # the fastest of numpy's bit generators here: 1.7 times PCG64's rate
    n = len(d)
    threshold = np.uint64((1 << 32) % n if n > EXACT_FROM else 0)
    rows, pieces = call_sizes(n)
    rejected = np.empty(rows * max(pieces), np.int64)
    sums = np.zeros(k)
    for r0 in range(0, k, rows):
        r = min(rows, k - r0)
        for size in pieces:
            words = bits.random_raw((r * size + 1) // 2).view(np.uint32)[:r * size]
            for pos in rejected[:draw_and_sum(words, d, threshold, r, size, sums[r0:r0 + r], rejected)]:
                m = 0
                while m & 0xFFFFFFFF < threshold:
                    m = (int(bits.random_raw()) & 0xFFFFFFFF) * n
                sums[r0 + pos // size] += d[m >> 32]
    return sums / n
