"""The compare and verdict stages: stored per-item records -> paired comparisons -> gates -> verdicts.

Reads the campaign's store and the record's variant list; serves nothing, so `qeval finish` runs it too.
"""

from __future__ import annotations

from pathlib import Path

from ..config import CampaignConfig, GateRule
from ..metrics import UNDECLARED
from ..record import RunRecord, SuiteSummary, VariantResult
from ..record_models import BaselineDistribution, Distribution, Probe
from ..store import Record, ResultsStore
from .plan import Plan

# the comparison's statistics (compare, gates: scipy.stats) take about a second to import; they are
# imported where a comparison is made, so a run that is cut before comparing never loads them


def summarize(store: ResultsStore, vkey: str, p: Plan, complete_only: bool = False) -> list[SuiteSummary]:
    out = []
    for name, key, primary, _ in p.suite_keys():
        recs = store.records(vkey, key)
        if not recs or (complete_only and not store.is_complete(vkey, key)):
            continue
        metrics = sorted(recs[0].scores)
        means = {m: sum(r.scores.get(m, 0.0) for r in recs) / len(recs) for m in metrics}
        out.append(SuiteSummary(suite=name, key=key, n=len(recs), primary=primary or metrics[0], means=means))
    return out


def load_probe(res: VariantResult, path: Path | None) -> bool:
    """The stored latency probe at `path` into the result, where it is there."""
    if path is None or not path.exists():
        return False
    res.probe = Probe.model_validate_json(path.read_text())
    res.probe_requests = str(path.with_suffix(".parquet"))
    return True


def distribution(cfg: CampaignConfig, record: RunRecord, store: ResultsStore, base_records: dict[str, list[Record]],
                 name: str, vkey: str, p: Plan, complete_only: bool = False) -> list:
    """KL divergence and top-1 agreement per chunk against the baseline, as paired comparisons
    (the baseline's own KL is 0 and its agreement 1), plus a per-token summary in the record."""
    import numpy as np

    from ..compare import Paired, compare_metric
    from ..gates import rule_for
    from ..stats.distribution import summarize as summarize_positions
    from ..suites.logprobs import compare_chunks, perplexity

    out = []
    res = next(r for r in record.variants if r.name == name)
    base_res = next(r for r in record.variants if r.name == cfg.baseline.name)
    for lp in p.logprobs:
        if complete_only and not store.is_complete(vkey, lp.key):
            continue
        base_recs, cand_recs = base_records[lp.key], store.records(vkey, lp.key)
        if not base_recs or not cand_recs:
            continue
        cc = compare_chunks(base_recs, cand_recs)
        summ = summarize_positions(cc.positions)
        figures = {**summ.__dict__, "perplexity": perplexity(cand_recs),
                   "mismatched_chunks": len(cc.mismatched), "chunks": len(cc.ids),
                   "method": f"top-{lp.top_k} + tail bucket (approximation, a near lower bound)"}
        if not cc.alternatives:  # a TGI side: no alternatives per prompt token, so no top-1 figures
            figures.update(
                top1_agreement=None, **{k: None for k in figures if k.startswith("delta_p_")},
                method="actual token + tail bucket (TGI lists no alternatives for prompt tokens: a looser "
                       "lower bound; no top-1 agreement)")
        res.distribution[lp.suite] = Distribution.model_validate(figures)
        base_res.distribution[lp.suite] = BaselineDistribution(perplexity=perplexity(base_recs), chunks=len(base_recs))
        if not cc.ids:
            continue
        n = len(cc.ids)
        paired = Paired(ids=cc.ids, groups=[None] * n, base={"kl": np.zeros(n), "top1": np.ones(n)},
                        cand={"kl": cc.kl, "top1": cc.top1}, unpaired_base=[], unpaired_cand=[])
        for m in ("kl", "top1") if cc.alternatives else ("kl",):
            rule = rule_for(cfg.gates, lp.suite, m) or GateRule()
            out.append(compare_metric(name, lp.suite, m, m == "kl", paired, rule, cfg.gates,
                                      spec=lp.metrics()[m]))
    return out


def compare_and_gate(cfg: CampaignConfig, record: RunRecord, store: ResultsStore, keys: dict[str, str],
                     p: Plan) -> None:
    """Every variant with a key against the baseline, gated; verdicts into the record."""
    from ..compare import adjust_all, align, compare_metric
    from ..gates import evaluate, evaluate_performance, overall_verdict, rule_for, variant_verdict

    partial = {r.name for r in record.variants if r.status == "partial"}
    base_key = keys.get(cfg.baseline.name) if cfg.baseline.name not in partial else None
    comparisons = []
    if base_key is not None:
        # the baseline's records are read once, not once per variant
        base_records = {k.key: store.records(base_key, k.key) for k in p.suite_keys()}
        for v in cfg.variants:
            if v.name not in keys:
                continue
            for suite, skey, primary, declared in p.suite_keys():
                if v.name in partial and not store.is_complete(keys[v.name], skey):
                    continue
                paired = align(suite, base_records[skey], store.records(keys[v.name], skey))
                metrics = sorted(paired.base)
                for m in metrics:
                    # logprobs suites are gated on KL (below), their nll is reported
                    is_primary = m == (primary or metrics[0]) and not suite.startswith("logprobs/")
                    rule = rule_for(cfg.gates, suite, m) or GateRule()
                    comparisons.append(compare_metric(v.name, suite, m, is_primary, paired, rule, cfg.gates,
                                                      spec=declared.get(m, UNDECLARED)))
            comparisons += distribution(cfg, record, store, base_records, v.name, keys[v.name], p,
                                        complete_only=v.name in partial)
    record.comparisons = adjust_all(comparisons, cfg.gates.correction)
    record.multiplicity, record.inconclusive = cfg.gates.correction, cfg.gates.inconclusive
    record.gates = evaluate(cfg.gates, record.comparisons, [v.name for v in cfg.variants if v.name in keys])
    base_res = next((r for r in record.variants if r.name == cfg.baseline.name and r.status == "ok"), None)
    if base_res is not None:
        for r in record.variants:
            if r.role == "variant" and r.status == "ok":
                record.gates += evaluate_performance(cfg.gates, r.name, base_res.perf(), r.perf())
    for v in cfg.variants:
        evaluated = base_key is not None and v.name in keys and v.name not in partial
        record.verdicts[v.name] = variant_verdict([g for g in record.gates if g.variant == v.name], evaluated)
    record.verdict = overall_verdict(record.verdicts)
