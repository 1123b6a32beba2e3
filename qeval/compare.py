"""Pair each variant's records with the baseline's by item id, then run the paired statistics."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from .errors import QevalError
from .record import Comparison
from .stats import flips, mcnemar_exact, mean_delta, paired_bootstrap_ci
from .store import Record


class PairingError(QevalError):
    """The same item id was asked differently of two variants: their scores cannot be paired."""


@dataclass(frozen=True)
class Paired:
    ids: list[str]
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
    return Paired(ids=ids, base={m: np.array([b[i].scores[m] for i in ids]) for m in metrics},
                  cand={m: np.array([c[i].scores[m] for i in ids]) for m in metrics},
                  unpaired_base=sorted(b.keys() - c.keys()), unpaired_cand=sorted(c.keys() - b.keys()))


def compare_metric(variant: str, suite: str, metric: str, primary: bool, p: Paired, alpha: float,
                   resamples: int, seed: int) -> Comparison:
    base, cand = p.base[metric], p.cand[metric]
    conf = 1 - 2 * alpha  # two-sided interval whose lower end is the one-sided (1 - alpha) bound
    boot = paired_bootstrap_ci(base, cand, confidence=conf, resamples=resamples, seed=seed)
    t = mean_delta(base, cand, confidence=conf)
    binary = bool(np.isin(base, (0, 1)).all() and np.isin(cand, (0, 1)).all())
    extra: dict = {}
    if binary:
        f = flips(base, cand)
        mc = mcnemar_exact(f)
        extra = dict(flips_base_only=f.base_only, flips_variant_only=f.cand_only, flip_rate=f.rate,
                     p_value=mc.p_value, p_method=mc.method)
    else:
        d = cand - base
        p_w = 1.0 if not np.any(d) else float(sps.wilcoxon(cand, base, zero_method="wilcox").pvalue)
        extra = dict(p_value=p_w, p_method="wilcoxon-signed-rank")
    return Comparison(variant=variant, suite=suite, metric=metric, primary=primary, n_paired=len(p.ids),
                      unpaired_base=len(p.unpaired_base), unpaired_variant=len(p.unpaired_cand),
                      base_mean=t.base_mean, variant_mean=t.cand_mean, delta=t.delta, ci_low=boot.ci_low,
                      ci_high=boot.ci_high, t_ci_low=t.ci_low, t_ci_high=t.ci_high, confidence=conf,
                      binary=binary, **extra)


def adjust_holm(comparisons: list[Comparison]) -> list[Comparison]:
    """Holm-adjust the p-values of every comparison in the campaign (statsmodels' multipletests)."""
    idx = [k for k, c in enumerate(comparisons) if c.p_value is not None]
    if not idx:
        return comparisons
    adj = multipletests([comparisons[k].p_value for k in idx], method="holm")[1]
    out = list(comparisons)
    for k, a in zip(idx, adj):
        out[k] = out[k].model_copy(update={"p_adjusted": float(a)})
    return out
