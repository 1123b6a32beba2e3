"""A comparison of results another evaluator already wrote (`qeval compare`, every variant `method: results`):
each variant imported (qeval/imports), checked against the baseline (the same task, the same items asked the same
way), stored under keys of its files' content, then judged, recorded and published as a campaign is. Nothing is
served: the record has no engine, memory or time figures, so a performance rule is NOT_EVALUATED, and a sequential
rule is judged at fixed n over the complete results, with a note.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field, replace
from typing import Sequence

from ..config import CampaignConfig, VariantSpec
from ..errors import ConfigError
from ..hashing import key_hash
from ..imports import IMPORTERS
from ..imports.base import Imported, ImportedTask
from ..imports.checks import SHOWN, check_comparable, check_declared, check_items
from ..imports.declarations import Declaration, check_partial, refuse_undeclared, resolve, undeclared_gated
from ..progress import PlainReporter, Reporter
from ..record.measurements import ImportedFile, ImportedSource, ImportedTaskFacts
from ..record.metrics import MetricSpec
from ..record.run import GateResult, RunRecord, VariantResult
from ..record.store import ResultsStore
from ..settings import Settings
from ..suites.base import Part
from ..suites.results import ResultsSuite
from ..verdict.policy import GatePolicy
from ..verdict.rules import rule_for
from .campaign import CampaignResult, judged
from .environment import environment
from .judge import judge, summarize
from .plan import Plan
from .publish import publish


def read_variant(spec: VariantSpec) -> Imported:
    """The variant's results, read by its format's importer (BadResults: the file and place it could not read)."""
    assert spec.results is not None
    kind = IMPORTERS.get(spec.results.format)
    importer = kind(tracking_uri=spec.results.tracking_uri) if spec.results.tracking_uri else kind()
    return importer.read(spec.results.path)


def variant_key(data: Imported) -> str:
    """A changed file is a new key; the same files read again, the same (a replay stores nothing twice)."""
    return "results:" + key_hash(sorted(f.sha256 for f in data.source.files))


def part_key(fmt: str, task: ImportedTask) -> str:
    return key_hash({"format": fmt, "suite": task.suite, "identity": task.identity})


@dataclass(frozen=True)
class ImportedVariant:
    spec: VariantSpec
    role: str
    data: Imported
    key: str
    facts: dict[str, ImportedTaskFacts]
    missing: dict[str, str] = field(default_factory=dict)  # the baseline's tasks it lacks: suite -> why


def _primary(task: ImportedTask) -> str | None:
    scored = {m for r in task.records for m in r.scores}
    return next((m for m in task.planned if m in scored), None)


def _chosen(cfg: CampaignConfig, base: Imported) -> list[ImportedTask]:
    """The baseline's tasks, those its `tasks:` names where it names some."""
    assert cfg.baseline.results is not None
    wanted = cfg.baseline.results.tasks
    if wanted is None:
        return list(base.tasks.values())
    by_name = {t.suite.split("/", 1)[-1]: t for t in base.tasks.values()}
    missing = [w for w in wanted if w not in by_name]
    if missing:
        raise ConfigError(f"tasks {missing} are not in the baseline's results (it has {sorted(by_name)})",
                          where=f"baseline {cfg.baseline.name}: results.tasks")
    return [by_name[w] for w in wanted]


FIXED_N = ("judged at fixed n: imported results are complete, so the rule's sequential looks (taken while a suite "
           "runs) are not taken")


def fixed_n(cfg: CampaignConfig) -> CampaignConfig:
    """The comparison with every gate at fixed n over all the items: a sequential rule looks while a suite runs, and
    imported results are read whole, so its looks would be peeks at data already complete."""
    policy = cfg.gates
    assert isinstance(policy, GatePolicy), "a policy file is read when the campaign is loaded"
    if not policy.sequential_in_use:
        return cfg
    return cfg.model_copy(update={"gates": policy.model_copy(update={
        "sequential": None, "rules": [r.model_copy(update={"sequential": None}) for r in policy.rules]})})


def noted(gates: Sequence[GateResult], policy: GatePolicy) -> tuple[GateResult, ...]:
    """Each gate whose rule is sequential, with the note that it was judged at fixed n."""
    out = []
    for g in gates:
        judged = g.suite != "perf" and g.verdict != "NOT_EVALUATED"
        rule = rule_for(policy, g.suite, g.metric) if judged else None
        seq = rule is not None and policy.sequential_of(rule) is not None
        out.append(g.model_copy(update={"reason": f"{FIXED_N}; {g.reason}"}) if seq else g)
    return tuple(out)


def declarations(cfg: CampaignConfig, config_file: str = "") -> list[Declaration]:
    """The comparison file's `metrics:` section."""
    where = config_file or "the comparison file"
    return [Declaration(match=d.match, binary=d.type == "binary", higher_is_better=d.higher_is_better,
                        source=f"metrics[{i}] in {where}") for i, d in enumerate(cfg.metrics)]


def _dropped(task: ImportedTask) -> dict[str, str]:
    return dict(list(task.dropped.items())[:SHOWN])


def import_all(cfg: CampaignConfig, config_file: str = "") -> tuple[list[ImportedVariant], Plan]:
    """Every variant read and checked against the baseline, task by task; each metric's declaration resolved (a
    gated one undeclared is refused); the plan of the baseline's tasks, each a part under a key of its format and
    identity."""
    base_data = read_variant(cfg.baseline)
    tasks = _chosen(cfg, base_data)
    fmt = base_data.source.format
    declared: dict[str, dict[str, MetricSpec]] = {t.suite: dict(t.declared) for t in tasks}
    out = []
    base_facts = {t.suite: ImportedTaskFacts(identity_hash=t.identity_hash,
                                             dropped={"baseline": _dropped(t)} if t.dropped else {}) for t in tasks}
    cands: dict[str, list[ImportedTask]] = {t.suite: [t] for t in tasks}
    others = [(spec, "variant") for spec in cfg.variants] + ([(cfg.noise, "noise")] if cfg.noise is not None else [])
    for spec, role in others:
        data = read_variant(spec)
        if data.source.format != fmt:
            raise ConfigError(f"variant {spec.name} is {data.source.evaluator} output and the baseline "
                              f"{base_data.source.evaluator}'s: different evaluators are not compared",
                              where=f"variant {spec.name}: results")
        facts, missing = {}, {}
        for t in tasks:
            cand = data.tasks.get(t.suite)
            if cand is None:
                missing[t.suite] = (f"not evaluated: {role} {spec.name}'s results have no task {t.suite} (they "
                                    f"have {', '.join(sorted(data.tasks)) or 'none'})")
                continue
            advisory = check_comparable(t, cand, spec.name)
            declared[t.suite] = check_declared(t, cand, spec.name) | declared[t.suite]
            items = check_items(t, cand, spec.name)
            cands[t.suite].append(cand)
            unpaired = {k: list(v[:SHOWN]) for k, v in (("baseline", items.unpaired_base),
                                                        ("variant", items.unpaired_cand)) if v}
            facts[t.suite] = ImportedTaskFacts(
                identity_hash=cand.identity_hash, advisory=advisory, unpaired=unpaired,
                unpaired_reason="the item is in one run's results only (another limit or sample set, or the "
                "evaluator gave it no score: see dropped)" if unpaired else None,
                dropped={k: _dropped(x) for k, x in (("baseline", t), ("variant", cand)) if x.dropped})
        out.append(ImportedVariant(spec, role, data, variant_key(data), facts, missing))
    user = declarations(cfg, config_file)
    policy = cfg.gates
    assert isinstance(policy, GatePolicy), "a policy file is read when the campaign is loaded"
    missing = []
    for t in tasks:
        scored = sorted({m for x in cands[t.suite] for r in x.records for m in r.scores})
        declared[t.suite] = resolve(t.suite, scored, declared[t.suite], user, config_file)
        for x in cands[t.suite]:
            check_partial(x, declared[t.suite])
        missing += undeclared_gated(policy, t, declared[t.suite], _primary(t))
    refuse_undeclared(missing, config_file)
    parts = tuple(Part(suite=t.suite, key=part_key(fmt, t), metrics=declared[t.suite], primary=_primary(t),
                       planned=t.planned) for t in tasks)
    base = ImportedVariant(cfg.baseline, "baseline", base_data, variant_key(base_data), base_facts)
    return [base, *out], Plan(suites=(ResultsSuite(parts),) if parts else (), base_checkpoint=cfg.output_dir)


def _source(v: ImportedVariant) -> ImportedSource:
    s = v.data.source
    return ImportedSource(format=s.format, evaluator=s.evaluator, version=s.version, model=s.model,
                          files=[ImportedFile(path=f.path, sha256=f.sha256, lines=f.lines) for f in s.files],
                          tasks=v.facts, missing=v.missing)


def store_variant(v: ImportedVariant, p: Plan, store: ResultsStore) -> VariantResult:
    """The variant's records into the store under its key (complete), and its entry in the record."""
    for part in p.parts():
        if part.suite in v.missing:
            continue
        task = v.data.tasks[part.suite]
        store.put(v.key, part.key, v.spec.name, part.suite, task.records)
        store.mark_complete(v.key, part.key, len(task.records))
    return VariantResult(name=v.spec.name, method=v.spec.method, role=v.role, key=v.key, status="ok",
                         suites=summarize(store, v.key, p), imported=_source(v))


def compare(cfg: CampaignConfig, settings: Settings | None = None, *, config_file: str = "",
            reporter: Reporter | None = None, command: Sequence[str] = ()) -> CampaignResult:
    """Import, check, judge, record and publish a comparison: the same record, report, JUnit, exit codes and
    MLflow logging as a campaign."""
    from ..verdict.flips import table, write_parquet

    if not cfg.imported:
        raise ConfigError("qeval compare compares results another evaluator wrote: every variant, the baseline "
                          "too, must be `method: results` (a campaign that serves them runs with `qeval run`)",
                          file=config_file)
    settings = settings or Settings.from_env()
    log = (reporter or PlainReporter()).log
    variants, p = import_all(cfg, config_file)
    run_dir = cfg.output_dir / cfg.name
    run_dir.mkdir(parents=True, exist_ok=True)
    record_path = run_dir / "run.json"
    def now() -> str:
        return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")

    record = RunRecord(run_id=uuid.uuid4().hex, campaign=cfg.name, config_hash=cfg.config_hash(),
                       config=cfg.model_dump(mode="json"), config_file=config_file, command=list(command),
                       started_at=now(), environment=environment(settings))
    with ResultsStore(run_dir / "results.sqlite") as store:
        for v in variants:
            res = store_variant(v, p, store)
            record.variants.append(res)
            log(f"[{v.spec.name}] imported {v.data.source.evaluator} results: "
                + ", ".join(f"{s.suite} ({s.n} items)" for s in res.suites))
        keys = {v.spec.name: v.key for v in variants}
        judgement = judge(fixed_n(cfg), record, store, keys, p)
    assert isinstance(cfg.gates, GatePolicy)
    judgement = replace(judgement, gates=noted(judgement.gates, cfg.gates))
    if judgement.flipped:
        write_parquet(table(dict(judgement.flipped)), run_dir / "flips.parquet")
    record = judged(record, judgement).model_copy(update={"finished_at": now()})
    record.save(record_path)
    result = CampaignResult(record=record, run_dir=run_dir, record_path=record_path)
    return result.published(*publish(result.record, result.run_dir, result.record_path, cfg, reporter))
