"""The compare and verdict stages: stored per-item records -> paired comparisons -> gates -> verdicts.

Reads the campaign's store and the record's variant list; serves nothing, so `qeval finish` runs it too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..config import CampaignConfig
from ..record import NoiseFloor, RunRecord, SuiteSummary, VariantResult
from ..record_models import BaselineDistribution, Distribution, Probe
from ..store import Record, ResultsStore
from ..verdict.policy import GatePolicy
from .plan import Plan, SuiteKey

if TYPE_CHECKING:
    from ..verdict.sequential import SuiteLook

# the comparison's statistics (verdict: comparison, gates: scipy.stats) take about a second to import; they
# are imported where a comparison is made, so a run that is cut before comparing never loads them


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


def itemwise_comparisons(policy: GatePolicy, seed: int, name: str, sk: SuiteKey, base_recs: list[Record],
                         cand_recs: list[Record]) -> tuple[list, dict, "SuiteLook | None"]:
    """A per-item suite of one variant against the baseline: its comparisons, the results of its gates
    that look while the suite runs (keyed (variant, suite, metric)), and the look they came from."""
    from ..verdict.pairing import align
    from ..verdict.suite import judge_suite

    paired = align(sk.suite, base_recs, cand_recs)
    # logprobs suites are gated on KL (chunk_comparisons), their nll is reported
    gated = not sk.suite.startswith("logprobs/")
    base = [r for r in base_recs if r.sample == 0]
    means = ({m: sum(r.scores[m] for r in base) / len(base) for m in sorted(paired.base)}
             if gated and policy.sequential_in_use else {})
    j = judge_suite(policy, seed, name, sk.suite, sk.key, sk.primary, sk.metrics, paired,
                    planned_ids=[r.item_id for r in base], planned_groups=[r.group for r in base],
                    base_means=means, gated=gated)
    return list(j.comparisons), j.keyed, j.look


def chunk_comparisons(policy: GatePolicy, seed: int, name: str, lp, base_recs: list[Record], cand_recs: list[Record],
                      cc=None) -> tuple[list, dict, "SuiteLook | None"]:
    """KL divergence and top-1 agreement per chunk of a logprobs suite, as paired comparisons (the
    baseline's own KL is 0 and its agreement 1), and the results of its sequential gates."""
    import numpy as np

    from ..suites.logprobs import compare_chunks
    from ..verdict.pairing import Paired
    from ..verdict.suite import judge_suite

    cc = cc if cc is not None else compare_chunks(base_recs, cand_recs)
    if not cc.ids:
        return [], {}, None
    n = len(cc.ids)
    paired = Paired(ids=cc.ids, groups=[None] * n, base={"kl": np.zeros(n), "top1": np.ones(n)},
                    cand={"kl": cc.kl, "top1": cc.top1}, unpaired_base=[], unpaired_cand=[])
    j = judge_suite(policy, seed, name, lp.suite, lp.key, "kl", lp.metrics(), paired,
                    planned_ids=[r.item_id for r in base_recs], planned_groups=[None] * len(base_recs),
                    base_means={"kl": 0.0, "top1": 1.0}, compared=("kl", "top1") if cc.alternatives else ("kl",))
    return list(j.comparisons), j.keyed, j.look


def distribution(cfg: CampaignConfig, record: RunRecord, store: ResultsStore, base_records: dict[str, list[Record]],
                 name: str, vkey: str, p: Plan, complete_only: bool = False, sequential: dict | None = None,
                 flipped: dict | None = None) -> list:
    """The logprobs suites' comparisons (chunk_comparisons), plus a per-token summary in the record."""
    from ..stats.distribution import summarize as summarize_positions
    from ..suites.logprobs import compare_chunks, perplexity
    from ..verdict.flips import chunk_flips

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
        if cc.ids:
            res.flips[lp.suite], rows = chunk_flips(cc.ids, cc.kl, cc.top1 if cc.alternatives else None)
            if flipped is not None:
                flipped[(name, lp.suite)] = rows
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
        comps, seq, _ = chunk_comparisons(cfg.gates, cfg.seed, name, lp, base_recs, cand_recs, cc)
        out += comps
        if sequential is not None:
            sequential.update(seq)
    return out


def compare_and_gate(cfg: CampaignConfig, record: RunRecord, store: ResultsStore, keys: dict[str, str],
                     p: Plan) -> dict[tuple[str, str], list]:
    """Every variant with a key against the baseline, gated; verdicts and the first flipped items into the
    record. Returns every flipped row per (variant, suite), for flips.parquet."""
    from ..verdict.comparison import adjust_all
    from ..verdict.gates import evaluate, evaluate_performance, overall_verdict, variant_verdict

    flipped: dict[tuple[str, str], list] = {}

    partial = {r.name for r in record.variants if r.status == "partial"}
    base_key = keys.get(cfg.baseline.name) if cfg.baseline.name not in partial else None
    comparisons = []
    sequential: dict = {}  # (variant, suite, metric) -> the result of a gate that looked while its suite ran
    not_run: dict[str, dict[str, tuple[str, str]]] = {}
    base_records: dict[str, list[Record]] = {}
    if base_key is not None:
        # the baseline's records are read once, not once per variant
        base_records = {k.key: store.records(base_key, k.key) for k in p.suite_keys()}
        for v in cfg.variants:
            if v.name not in keys:
                continue
            res = next((r for r in record.variants if r.name == v.name), None)
            for sk in p.suite_keys():
                if v.name in partial and not store.is_complete(keys[v.name], sk.key):
                    continue
                comps, seq = _suite(cfg, v.name, sk, base_records[sk.key], store.records(keys[v.name], sk.key),
                                    res, flipped)
                comparisons += comps
                sequential.update(seq)
            comparisons += distribution(cfg, record, store, base_records, v.name, keys[v.name], p,
                                        complete_only=v.name in partial, sequential=sequential, flipped=flipped)
            for suite, why in (res.not_run if res is not None else {}).items():
                sk = next(k for k in p.suite_keys() if k.suite == suite)
                base_metrics = sorted(base_records[sk.key][0].scores) if base_records[sk.key] else []
                metric = "kl" if suite.startswith("logprobs/") else sk.primary or (base_metrics or ["score"])[0]
                not_run.setdefault(v.name, {})[suite] = (metric, why)
            _planned(res, sequential, v.name)
    record.comparisons = adjust_all(comparisons, cfg.gates.correction)
    record.noise_floor = noise_floor(cfg, record, store, keys, p, base_records, flipped) if base_key else None
    record.multiplicity, record.inconclusive = cfg.gates.correction, cfg.gates.inconclusive
    record.gates = evaluate(cfg.gates, record.comparisons, [v.name for v in cfg.variants if v.name in keys],
                            sequential, not_run)
    base_res = next((r for r in record.variants if r.name == cfg.baseline.name and r.status == "ok"), None)
    if base_res is not None:
        for r in record.variants:
            if r.role == "variant" and r.status == "ok":
                record.gates += evaluate_performance(cfg.gates, r.name, base_res.perf(), r.perf(), r.simulated)
    for v in cfg.variants:
        evaluated = base_key is not None and v.name in keys and v.name not in partial
        record.verdicts[v.name] = variant_verdict([g for g in record.gates if g.variant == v.name], evaluated)
    record.verdict = overall_verdict(record.verdicts)
    return flipped


def noise_floor(cfg: CampaignConfig, record: RunRecord, store: ResultsStore, keys: dict[str, str], p: Plan,
                base_records: dict[str, list[Record]], flipped: dict) -> NoiseFloor | None:
    """The A/A evaluation against the baseline's (qeval/verdict/noise.py): its figures, never gated or corrected
    with the variants' p-values, and each variant's (suite, metric) that sits within them."""
    from ..verdict.noise import SUFFIX, floor_figures, within_floor
    from .plan import suite_concurrency

    name = cfg.baseline.name + SUFFIX
    res = next((r for r in record.variants if r.name == name), None)
    if not cfg.noise_floor.enabled or name not in keys or res is None or res.status != "ok":
        return None
    comparisons = []
    for sk in p.suite_keys():
        if sk.suite.startswith("logprobs/"):
            continue
        cand = store.records(keys[name], sk.key)
        if cand and base_records[sk.key]:
            comparisons += _suite(cfg, name, sk, base_records[sk.key], cand, res, flipped)[0]
    comparisons += distribution(cfg, record, store, base_records, name, keys[name], p, flipped=flipped)
    figures = floor_figures(comparisons)
    concurrency = suite_concurrency(p)
    return NoiseFloor(variant=name, concurrency=cfg.noise_floor.shape(list(concurrency.values())),
                      baseline_concurrency=concurrency, figures=figures, comparisons=comparisons,
                      within=within_floor([c for c in record.comparisons if c.variant != name], figures))


def _suite(cfg: CampaignConfig, name: str, sk: SuiteKey, base: list[Record], cand: list[Record],
           res: VariantResult | None, flipped: dict) -> tuple[list, dict]:
    """One per-item suite of `name` against the baseline: its comparisons and sequential results; its flipped
    items into `res` and `flipped`."""
    from ..verdict.flips import item_flips

    comps, seq, _ = itemwise_comparisons(cfg.gates, cfg.seed, name, sk, base, cand)
    metric = _flip_metric(sk, base)
    if res is not None and metric is not None and cand:
        res.flips[sk.suite], flipped[(name, sk.suite)] = item_flips(metric, base, cand)
    return comps, seq


def _flip_metric(sk: SuiteKey, base: list[Record]) -> str | None:
    """The suite's primary metric where it is declared 0/1: the one whose flips a reviewer reads."""
    if sk.suite.startswith("logprobs/") or not base:
        return None
    metric = sk.primary or sorted(base[0].scores)[0]
    spec = sk.metrics.get(metric)
    return metric if spec is not None and spec.binary else None


def _planned(res: VariantResult | None, sequential: dict, name: str) -> None:
    """A suite its sequential gates stopped says how many items it had planned."""
    if res is None:
        return
    for s in res.suites:
        planned = [r.n_planned for (v, suite, _), r in sequential.items() if v == name and suite == s.suite]
        if planned and s.n < max(planned):
            s.planned = max(planned)
