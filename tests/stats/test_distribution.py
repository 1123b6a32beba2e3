"""Top-k KL divergence against the exact KL on full distributions, and the agreement figures."""

import math

import numpy as np
import pytest
from scipy.special import rel_entr

from qeval.stats.distribution import compare_positions, kl_topk, summarize


def topk(p: np.ndarray, k: int) -> dict[str, float]:
    idx = np.argsort(-p)[:k]
    return {f"t{i}": math.log(p[i]) for i in idx}


def test_full_support_equals_exact_kl():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(8)), rng.dirichlet(np.ones(8))
    assert kl_topk(topk(p, 8), topk(q, 8)) == pytest.approx(float(rel_entr(p, q).sum()), rel=1e-9)


def test_identical_is_zero_and_topk_is_close_for_peaked_distributions():
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 3, 5000)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    assert kl_topk(topk(p, 20), topk(p, 20)) == pytest.approx(0, abs=1e-12)
    q_logits = logits + rng.normal(0, 0.3, 5000)  # a slightly perturbed model
    q = np.exp(q_logits - q_logits.max())
    q /= q.sum()
    exact = float(rel_entr(p, q).sum())
    approx = kl_topk(topk(p, 20), topk(q, 20))
    assert 0.3 * exact < approx <= exact * 1.05  # coarse-graining lowers KL: a near lower bound


def test_position_stats():
    b = [{}, {"a": math.log(0.7), "b": math.log(0.2)}, {"x": math.log(0.9)}]
    c = [{}, {"b": math.log(0.6), "a": math.log(0.3)}, {"x": math.log(0.8)}]
    s = compare_positions(b, c)
    assert list(s.top1_agree) == [0.0, 1.0]
    assert s.delta_p == pytest.approx([0.3 - 0.7, 0.8 - 0.9])
    summ = summarize([s])
    assert summ.tokens == 2 and summ.top1_agreement == 0.5 and summ.kl_mean > 0
    dp = np.array([0.3 - 0.7, 0.8 - 0.9])  # numpy's linear-interpolation percentiles, independently
    assert (summ.delta_p_median, summ.delta_p_p01, summ.delta_p_p99) == pytest.approx(
        (dp.mean(), dp.min() + 0.01 * (dp.max() - dp.min()), dp.min() + 0.99 * (dp.max() - dp.min())))
