"""The compare and verdict stages: stored per-item records -> paired comparisons -> gates -> verdicts.

Reads the campaign's store and the record's variant list and returns a frozen Judgement, which the campaign
writes into its record; serves nothing, so `qeval finish` runs it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from ..config import CampaignConfig
from ..record.run import Comparison, GateResult, GateVerdict, NoiseFloor, RunRecord, SuiteSummary, VariantResult
from ..record.measurements import BaselineDistribution, Distribution, FlipRow, Probe, Strata, SuiteFlips
from ..record.store import Record, ResultsStore
from ..verdict.policy import GatePolicy
from .changes import Changes, Served, changes
from .plan import Plan, engine_spec

if TYPE_CHECKING:
    from ..suites.base import Part, View
    from ..verdict.sequential import SuiteLook

# the comparison's statistics (verdict: comparison, gates: scipy.stats) take about a second to import; they
# are imported where a comparison is made, so a run that is cut before comparing never loads them


def summarize(store: ResultsStore, vkey: str, p: Plan, complete_only: bool = False) -> list[SuiteSummary]:
    out = []
    for part in p.parts():
        recs = store.records(vkey, part.key)
        if not recs or (complete_only and not store.is_complete(vkey, part.key)):
            continue
        metrics = sorted(recs[0].scores)
        means = {m: sum(r.scores.get(m, 0.0) for r in recs) / len(recs) for m in metrics}
        out.append(SuiteSummary(suite=part.suite, key=part.key, n=len(recs), primary=part.primary or metrics[0],
                                means=means))
    return out


def load_probe(res: VariantResult, path: Path | None) -> bool:
    """The stored latency probe at `path` into the result, where it is there."""
    if path is None or not path.exists():
        return False
    res.probe = Probe.model_validate_json(path.read_text())
    res.probe_requests = str(path.with_suffix(".parquet"))
    return True


def judge_view(policy: GatePolicy, seed: int, name: str, part: "Part", view: "View") -> tuple[list, dict, "SuiteLook | None"]:
    """One view of a part of one variant against the baseline (verdict.suite.judge_suite): its comparisons,
    the results of its gates that look while the suite runs (keyed (variant, suite, metric)), and the look
    they came from. A view without a primary comparison, or without looks, is compared for the report only."""
    from ..verdict.suite import judge_suite

    looks = view.looks
    j = judge_suite(policy, seed, name, part.suite, part.key, view.primary, part.metrics, view.paired,
                    planned_ids=looks.ids if looks else (), planned_groups=looks.groups if looks else (),
                    base_means=looks.base_means if looks else {}, compared=view.metrics,
                    gated=view.primary is not None and looks is not None)
    comparisons = [c.model_copy(update={"insufficient": view.insufficient[c.metric]})
                   if c.metric in view.insufficient else c for c in j.comparisons]
    return comparisons, j.keyed, j.look


@dataclass(frozen=True)
class Judgement:
    """What judging a campaign's stored records found: the record's comparisons, noise floor, gates and verdicts,
    and, per variant, what its entry gains (its flipped items and next-token distributions per suite, and the
    items planned for a suite its sequential gates stopped early). The campaign writes it into its record once
    (pipeline/campaign.py judged)."""

    comparisons: tuple[Comparison, ...]
    noise_floor: NoiseFloor | None
    multiplicity: str
    inconclusive: str
    gates: tuple[GateResult, ...]
    verdicts: Mapping[str, GateVerdict]  # per variant of the campaign
    verdict: GateVerdict
    flips: Mapping[str, Mapping[str, SuiteFlips]]  # variant -> suite -> the first flipped items, for the report
    distributions: Mapping[str, Mapping[str, Distribution | BaselineDistribution]]  # variant -> logprobs suite
    planned: Mapping[tuple[str, str], int]  # (variant, suite) -> its items, where sequential gates stopped it sooner
    flipped: Mapping[tuple[str, str], list[FlipRow]]  # (variant, suite) -> every flipped row, for flips.parquet
    # per variant: what it changes against the baseline, and the performance rules that therefore do not gate it
    changes: Mapping[str, Changes] = field(default_factory=dict)
    perf_not_applicable: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    strata: Mapping[str, Mapping[str, Strata]] = field(default_factory=dict)  # variant -> suite -> per depth


@dataclass
class _Found:
    """What the variants' parts add to their entries, gathered while judging."""

    flips: dict[str, dict[str, SuiteFlips]] = field(default_factory=dict)
    distributions: dict[str, dict[str, Distribution | BaselineDistribution]] = field(default_factory=dict)
    flipped: dict[tuple[str, str], list[FlipRow]] = field(default_factory=dict)
    strata: dict[str, dict[str, Strata]] = field(default_factory=dict)


def judge(cfg: CampaignConfig, record: RunRecord, store: ResultsStore, keys: dict[str, str], p: Plan) -> Judgement:
    """Every variant with a key against the baseline, gated. Reads the record (its variants, their status and
    facts) and the store; changes neither."""
    from ..verdict.comparison import adjust_all
    from ..verdict.gates import (Unjudged, evaluate, evaluate_performance, overall_verdict, perf_not_applicable,
                                 performance_not_evaluated, variant_verdict)

    found = _Found()
    partial = {r.name for r in record.variants if r.status == "partial"}
    base_key = keys.get(cfg.baseline.name) if cfg.baseline.name not in partial else None
    comparisons = []
    sequential: dict = {}  # (variant, suite, metric) -> the result of a gate that looked while its suite ran
    not_run: dict[str, dict[str, tuple[str, str]]] = {}
    unjudged: list[Unjudged] = []
    planned: dict[tuple[str, str], int] = {}
    base_records: dict[str, list[Record]] = {}
    base_res = next((r for r in record.variants if r.name == cfg.baseline.name), None)
    if base_key is not None:
        # the baseline's records are read once, not once per variant
        base_records = {k.key: store.records(base_key, k.key) for k in p.parts()}
        for v in cfg.variants:
            if v.name not in keys:
                continue
            res = next((r for r in record.variants if r.name == v.name), None)
            lacks = res.imported.missing if res is not None and res.imported is not None else {}
            for part in p.parts():
                if v.name in partial and not store.is_complete(keys[v.name], part.key):
                    continue
                if part.suite in lacks:  # imported results without the task: nothing to pair
                    recs = base_records[part.key]
                    unjudged.append(Unjudged(v.name, part.suite, tuple(sorted(recs[0].scores)) if recs else (),
                                             part.gate_metric or part.primary, lacks[part.suite]))
                    continue
                comps, seq = _part(cfg, p, v.name, part, base_records[part.key],
                                   store.records(keys[v.name], part.key), res, base_res, found)
                comparisons += comps
                sequential.update(seq)
            for suite, why in (res.not_run if res is not None else {}).items():
                part = next(k for k in p.parts() if k.suite == suite)
                base_metrics = sorted(base_records[part.key][0].scores) if base_records[part.key] else []
                metric = part.gate_metric or (base_metrics or ["score"])[0]
                not_run.setdefault(v.name, {})[suite] = (metric, why)
            planned |= _planned(res, sequential, v.name)
    adjusted = adjust_all(comparisons, cfg.gates.correction)
    floor = noise_floor(cfg, record, store, keys, p, base_records, adjusted, found) if base_key else None
    gates = evaluate(cfg.gates, adjusted, [v.name for v in cfg.variants if v.name in keys], sequential, not_run,
                     unjudged)
    changed = variant_changes(cfg, record)
    not_applicable = {name: perf_not_applicable(cfg.gates, c.changes) for name, c in changed.items()}
    if base_res is not None and base_res.status == "ok":  # performance gates need the baseline's own figures
        for r in record.variants:
            if r.role == "variant" and r.status == "ok" and r.imported is not None:
                gates += performance_not_evaluated(cfg.gates, r.name, "no performance figures: imported results")
            elif r.role == "variant" and r.status == "ok":
                c = changed.get(r.name)
                gates += evaluate_performance(cfg.gates, r.name, base_res.perf(), r.perf(), r.simulated,
                                              c.changes if c is not None else None)
    verdicts = {}
    for v in cfg.variants:
        evaluated = base_key is not None and v.name in keys and v.name not in partial
        verdicts[v.name] = variant_verdict([g for g in gates if g.variant == v.name], evaluated)
    return Judgement(comparisons=tuple(adjusted), noise_floor=floor, multiplicity=cfg.gates.correction,
                     inconclusive=cfg.gates.inconclusive, gates=tuple(gates), verdicts=verdicts,
                     verdict=overall_verdict(verdicts), flips=found.flips, distributions=found.distributions,
                     planned=planned, flipped=found.flipped, changes=changed,
                     perf_not_applicable={n: x for n, x in not_applicable.items() if x}, strata=found.strata)


def variant_changes(cfg: CampaignConfig, record: RunRecord) -> dict[str, Changes]:
    """What each variant of the campaign changes against the baseline (pipeline/changes.py), with what the
    record read of each checkpoint's config (a made checkpoint's kv_cache_scheme is known once it is made)."""
    if cfg.model is None:  # every variant imported (method `results`): nothing served, no engine to compare
        return {}
    entries = {r.name: r for r in record.variants}

    def served(v) -> Served:
        res = entries.get(v.name)
        return Served(variant=v, engine=engine_spec(cfg, v), scheme=res.scheme if res is not None else {})

    base = served(cfg.baseline)
    return {v.name: changes(served(v), base) for v in cfg.variants}


def noise_floor(cfg: CampaignConfig, record: RunRecord, store: ResultsStore, keys: dict[str, str], p: Plan,
                base_records: dict[str, list[Record]], compared: list[Comparison], found: _Found) -> NoiseFloor | None:
    """The A/A evaluation against the baseline's (qeval/verdict/noise.py): its figures, never gated or corrected
    with the variants' p-values, and each variant's (suite, metric) of `compared` that sits within them."""
    from ..verdict.noise import floor_figures, within_floor
    from .plan import suite_concurrency

    name = cfg.aa_name
    res = next((r for r in record.variants if r.name == name), None)
    if name is None or name not in keys or res is None or res.status != "ok":
        return None
    base_res = next((r for r in record.variants if r.name == cfg.baseline.name), None)
    comparisons = []
    for part in p.parts():
        cand = store.records(keys[name], part.key)
        if cand and base_records[part.key]:
            # the A/A measures what gates read: a view with no primary comparison (a corpus's NLL) says nothing
            comparisons += _part(cfg, p, name, part, base_records[part.key], cand, res, base_res, found,
                                 gated_only=True)[0]
    figures = floor_figures(comparisons, {(part.suite, m): spec.floor_figure for part in p.parts()
                                          for m, spec in part.metrics.items()})
    within = within_floor([c for c in compared if c.variant != name], figures)
    if res.imported is not None:  # another evaluator's second run: no request qeval sent, no batch shape it chose
        return NoiseFloor(variant=name, concurrency=0, figures=figures, comparisons=comparisons, within=within)
    # the baseline's requests in flight as its record says them (a suite set to `auto`: as sized from its engine)
    concurrency = {**suite_concurrency(p), **(base_res.concurrency if base_res is not None else {})}
    return NoiseFloor(variant=name, concurrency=cfg.noise_floor.shape(list(concurrency.values())),
                      baseline_concurrency=concurrency, figures=figures, comparisons=comparisons,
                      within=within)


def _part(cfg: CampaignConfig, p: Plan, name: str, part: "Part", base: list[Record], cand: list[Record],
          res: VariantResult | None, base_res: VariantResult | None, found: _Found,
          gated_only: bool = False) -> tuple[list, dict]:
    """One part of `name` against the baseline: its comparisons and sequential results; its flipped items, and
    its per-token figures (where its suite has them) for its entry (`res`) and the baseline's, into `found`."""
    pairing = p.suite_of(part).pair(part, base, cand)
    comparisons: list = []
    sequential: dict = {}
    for view in pairing.views:
        if gated_only and view.primary is None:
            continue
        comps, seq, _ = judge_view(cfg.gates, cfg.seed, name, part, view)
        comparisons += comps
        sequential.update(seq)
    if res is not None and pairing.flips is not None:
        found.flips.setdefault(res.name, {})[part.suite], found.flipped[(name, part.suite)] = pairing.flips
    if res is not None and pairing.strata is not None:
        found.strata.setdefault(res.name, {})[part.suite] = pairing.strata
    if res is not None and pairing.distribution is not None:
        found.distributions.setdefault(res.name, {})[part.suite] = pairing.distribution[0]
        if base_res is not None:
            found.distributions.setdefault(base_res.name, {})[part.suite] = pairing.distribution[1]
    return comparisons, sequential


def _planned(res: VariantResult | None, sequential: dict, name: str) -> dict[tuple[str, str], int]:
    """A suite its sequential gates stopped says how many items it had planned."""
    out: dict[tuple[str, str], int] = {}
    for s in (res.suites if res is not None else []):
        planned = [r.n_planned for (v, suite, _), r in sequential.items() if v == name and suite == s.suite]
        if planned and s.n < max(planned):
            out[(name, s.suite)] = max(planned)
    return out
