"""The driver: plan -> the executor runs each variant -> compare -> gate -> record (publish: report, MLflow).

The only writer of `run.json` and of the campaign's store: variants report through the sink and their
outcomes, wherever the executor ran them. Every per-item record is stored as it arrives; a rerun redoes
only what is missing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from ..config import CampaignConfig, EngineSpec, VariantSpec
from ..errors import ConfigError
from ..executors.base import make_executor
from ..executors.outcome import VariantOutcome
from ..machine.hardware import DtypeChoice
from ..progress import PlainReporter, Reporter
from ..record.run import Measured, RunRecord, SettingDecision, VariantResult, prior_run
from ..settings import Settings
from ..record.store import ResultsStore
from ..verdict.decision import for_record as decisions
from .environment import environment
from .judge import Judgement, judge, load_probe, summarize
from .plan import (Plan, VariantPlan, campaign_dtype, engine_spec, plan, preflight, variant_key,
                   variant_plans)
from .publish import publish
from .resume import STILL_TO_RESUME, carry_over, describe_partial, earlier_variants, not_reached, with_earlier
from .sink import StoreSink
from .variant import grid_rows
from .worker import WORK


@dataclass
class CampaignResult:
    record: RunRecord
    run_dir: Path
    record_path: Path
    report_path: Path | None = None
    extras: dict[str, str] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return self.record.verdict

    def published(self, record: RunRecord, paths: dict[str, Path]) -> "CampaignResult":
        """This result with the record as published and the report's files (publish's answer)."""
        return dataclasses.replace(self, record=record, report_path=paths["report"],
                                   extras={**self.extras, **{k: str(v) for k, v in paths.items()}})


def judged(record: RunRecord, j: Judgement) -> RunRecord:
    """The record with a judgement written in: its comparisons, noise floor, gates and verdicts, and each
    variant's flips, distributions and planned items (per suite, over what the variant's entry said before).
    The one place a judgement enters a record; the record judged is left as it was."""
    def entry(r: VariantResult) -> VariantResult:
        suites = [s.model_copy(update={"planned": j.planned[(r.name, s.suite)]}) if (r.name, s.suite) in j.planned
                  else s for s in r.suites]
        changed = j.changes.get(r.name) if r.role == "variant" else None
        return r.model_copy(update={"suites": suites, "flips": {**r.flips, **j.flips.get(r.name, {})},
                                    "distribution": {**r.distribution, **j.distributions.get(r.name, {})},
                                    "strata": {**r.strata, **j.strata.get(r.name, {})},
                                    "changes": list(changed.changes) if changed else r.changes,
                                    "serving_diff": list(changed.serving_diff) if changed else r.serving_diff,
                                    "perf_not_applicable": dict(j.perf_not_applicable.get(r.name, {}))})

    out = record.model_copy(update={
        "variants": [entry(r) for r in record.variants], "comparisons": list(j.comparisons),
        "noise_floor": j.noise_floor, "multiplicity": j.multiplicity, "inconclusive": j.inconclusive,
        "gates": list(j.gates), "verdicts": dict(j.verdicts), "verdict": j.verdict})
    # a KV-cache or serving variant's decision reads its gates, changes and figures as just written
    decided = {d.variant: SettingDecision(outcome=d.outcome, text=d.text()) for d in decisions(out)}
    return out.model_copy(update={"variants": [v.model_copy(update={"decision": decided.get(v.name)})
                                               for v in out.variants]})


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


class Campaign:
    def __init__(self, cfg: CampaignConfig, settings: Settings, *, config_file: str = "",
                 reporter: Reporter | None = None, command: list[str] | None = None):
        self.cfg, self.settings = cfg, settings
        self.reporter = reporter or PlainReporter()
        self.log = self.reporter.log
        self.config_file = config_file
        self.command = command or []
        self.run_dir = cfg.output_dir / cfg.name
        self.record_path = self.run_dir / "run.json"
        self._dtype: DtypeChoice | None = None  # decided once, on first use

    # -- the plan ---------------------------------------------------------------------------
    def dtype(self) -> DtypeChoice:
        if self._dtype is None:
            self._dtype = campaign_dtype(self.cfg, self.settings, self.config_file)
        return self._dtype

    def engine_spec(self, v: VariantSpec) -> EngineSpec:
        return engine_spec(self.cfg, v, self.dtype().dtype)

    def plans(self, p: Plan) -> list[VariantPlan]:
        return variant_plans(self.cfg, self.settings, p, self.dtype())

    def plan_of(self, v: VariantSpec) -> VariantPlan:
        """The variant's plan, with no suites (what keys and grid rows need)."""
        p = Plan(suites=(), base_checkpoint=self.cfg.model.path or Path())
        return next(vp for vp in self.plans(p) if vp.name == v.name)

    def variant_key(self, v: VariantSpec, checkpoint_hash: str | None) -> str:
        return variant_key(v, self.engine_spec(v), self.settings, checkpoint_hash)

    def grid_rows(self, v: VariantSpec, checkpoint_hash: str | None) -> list:
        return grid_rows(self.plan_of(v), checkpoint_hash, self.run_dir)

    # -- the record -------------------------------------------------------------------------
    def _place(self, record: RunRecord, res: VariantResult) -> None:
        """Into the record, in the campaign's order, replacing what it said of that variant before."""
        order = [v.name for v in self.cfg.all_variants()]
        rest = [r for r in record.variants if r.name != res.name]
        record.variants = sorted(rest + [res], key=lambda r: order.index(r.name) if r.name in order else len(order))

    def _result(self, vp: VariantPlan, out: VariantOutcome, store: ResultsStore,
                earlier: dict[str, Measured]) -> VariantResult:
        """The variant's entry in the record, built from its outcome: what its run measured (with what an earlier
        run measured of the same key where this one did not), then the suites stored under its key and its probe."""
        served = out.status != "ok" or out.evaluated
        measured = with_earlier(out.measured, earlier.get(out.key), served)
        res = VariantResult.of(measured, name=out.name, method=vp.variant.method, role=vp.role, status=out.status,
                               error=out.error, grid=out.grid,
                               suites=summarize(store, out.key, vp.suites) if out.status == "ok" else [])
        if out.status == "ok":
            load_probe(res, self.run_dir / out.probe_path if out.probe_path else None)
        return res

    @contextmanager
    def _record_if_interrupted(self, record: RunRecord, store: ResultsStore, keys: dict[str, str],
                               plans: Sequence[VariantPlan]) -> Iterator[None]:
        """On Ctrl-C / SIGTERM (the engines already stopped on the way here): the variant being evaluated is
        partial (its finished suites compared, verdict NOT_EVALUATED), the ones not reached NOT_EVALUATED;
        what finished is gated and the record saved, unfinished (a rerun resumes); then the interrupt goes on."""
        try:
            yield
        except KeyboardInterrupt:
            self.log("interrupted: comparing what finished and saving the record")
            by_name = {vp.name: vp for vp in plans}
            for r in record.variants:
                if r.status == "partial" and r.key:
                    describe_partial(store, r, by_name[r.name], self.run_dir)
                    keys[r.name] = r.key
            listed = {r.name for r in record.variants}
            for vp in plans:
                if vp.name not in listed:
                    self._place(record, not_reached(vp, "not evaluated: the run was interrupted before it; "
                                                        + STILL_TO_RESUME))
            self._judge(record, store, keys, plans[0].suites).save(self.record_path)
            raise

    # -- the whole run ----------------------------------------------------------------------
    def run(self, max_seconds: float | None = None, only: Sequence[str] | None = None) -> CampaignResult:
        """Every variant, then the comparison. With `max_seconds`, no variant starts once that much time
        has passed: the ones left are reported as not evaluated (never PASS) and a rerun resumes them.
        With `only`, just those variants (and the baseline) are made and served; each other one keeps what
        an earlier record of this campaign shows where the store still holds it whole (carry_over)."""
        cfg = self.cfg
        p = plan(cfg, self.settings, self.config_file)  # all input validated before anything starts
        # what the suites need here (an lm-eval task whose data is not here is bad input now, not when lm-eval
        # first runs), checked while the variants are planned
        with preflight(p, self.settings, self.config_file, cfg.executor.kind == "local") as checks:
            plans = self.plans(p)  # a dtype an engine cannot serve is bad input, found before anything starts
            checked = checks.result()
        for line in checked.said:
            self.log(line)
        if checked.plan != p:  # e.g. sequential gates cut an lm-eval task over the docs its data has
            p = checked.plan
            plans = self.plans(p)
        selected = self._selected(only)
        executor = make_executor(cfg.executor, max_seconds)
        executor.check(plans)  # e.g. a variant no node of the cluster can hold: refused before anything is written
        self.run_dir.mkdir(parents=True, exist_ok=True)
        earlier = earlier_variants(self.record_path) if selected is not None else {}
        prior = prior_run(self.record_path)
        earlier_facts = prior["facts"] if prior else {}
        resuming = prior is not None and prior["finished_at"] is None and prior["config_hash"] == cfg.config_hash()
        record = RunRecord(run_id=prior["run_id"] if resuming else uuid.uuid4().hex, campaign=cfg.name,
                           config_hash=cfg.config_hash(), config=cfg.model_dump(mode="json"),
                           config_file=self.config_file, command=self.command,
                           started_at=prior["started_at"] if resuming else _now(),
                           environment=environment(self.settings))
        record.save(self.record_path)
        if resuming:
            self.log(f"resuming run {record.run_id} in {self.run_dir}")
        keys: dict[str, str] = {}
        by_name = {vp.name: vp for vp in plans}
        with ResultsStore(self.run_dir / "results.sqlite") as store, \
                self._record_if_interrupted(record, store, keys, plans):
            todo = []
            for vp in plans:
                if vp.role == "variant" and selected is not None and vp.name not in selected:
                    self._place(record, self._unselected(vp, earlier.get(vp.name), store, keys))
                    record.save(self.record_path)
                else:
                    todo.append(vp)

            def begun(started: VariantOutcome) -> None:
                self._place(record, self._result(by_name[started.name], started, store, earlier_facts))
                record.save(self.record_path)

            shared = self.settings.records if self.settings.share_records else None
            # the variants whose gates look while they run pair with the baseline's records: the sink hands them
            looks = todo[0] if todo and todo[0].role == "baseline" and any(p.gates is not None for p in todo[1:]) else None
            with StoreSink(store, begun, shared, baseline=looks) as sink:
                for out in executor.run(todo, WORK, self.run_dir, sink, self.reporter):
                    sink.settled(out)
                    if out.status == "ok":
                        keys[out.name] = out.key
                    self._place(record, self._result(by_name[out.name], out, store, earlier_facts))
                    record.save(self.record_path)
            record = self._judge(record, store, keys, p)
        if not any(v.status == "skipped" for v in record.variants):  # else unfinished: a rerun resumes it
            record = record.model_copy(update={"finished_at": _now()})
        record.save(self.record_path)
        return CampaignResult(record=record, run_dir=self.run_dir, record_path=self.record_path)

    def _judge(self, record: RunRecord, store: ResultsStore, keys: dict[str, str], p) -> RunRecord:
        """The record judged (compared and gated); every flipped item into flips.parquet beside it."""
        from ..verdict.flips import table, write_parquet

        judgement = judge(self.cfg, record, store, keys, p)
        if judgement.flipped:
            write_parquet(table(dict(judgement.flipped)), self.run_dir / "flips.parquet")
        return judged(record, judgement)

    def _unselected(self, vp: VariantPlan, earlier: dict | None, store: ResultsStore,
                    keys: dict[str, str]) -> VariantResult:
        carried = carry_over(vp, earlier, store, self.run_dir)
        if carried is not None:
            keys[vp.name] = carried.key
            self.log(f"[{vp.name}] not selected: kept from the earlier record (its suites are in the store)")
            return carried
        res = not_reached(vp, "not selected (--only), and no earlier result of it in the store; run without "
                              "--only to evaluate it")
        self.log(f"[{vp.name}] NOT EVALUATED: {res.error}")
        return res

    def _selected(self, only: Sequence[str] | None) -> set[str] | None:
        if only is None:
            return None
        names = [v.name for v in self.cfg.variants]
        for n in only:
            if n not in names:
                close = difflib.get_close_matches(n, names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f"; its variants are {names}"
                raise ConfigError(f"--only {n}: not a variant of this campaign{hint}", file=self.config_file)
        return set(only)

    def finish(self) -> CampaignResult:
        """Compare, gate and report what an interrupted run stored, serving nothing: the variants its
        record lists as done are compared; the others are NOT_EVALUATED (never PASS). The run stays
        unfinished, so the same `qeval run` still resumes it."""
        p = plan(self.cfg, self.settings, self.config_file)
        if not self.record_path.exists():
            raise ConfigError("no run to finish here (run.json is missing)", file=str(self.record_path))
        record = RunRecord.load(self.record_path)
        if record.config_hash != self.cfg.config_hash():
            raise ConfigError("this run was made from a different campaign file (config hash differs)",
                              file=self.config_file, where=str(self.record_path))
        # the pydoc corpus comes from the interpreter's stdlib: on another Python its key differs, so read
        # the logprobs suites under the keys the run itself recorded (the texts are not needed to compare)
        ran = {s.suite: s.key for v in record.variants for s in v.suites}
        p = dataclasses.replace(p, suites=tuple(s.rekeyed(ran) for s in p.suites))
        plans = self.plans(p)
        done = {v.name for v in record.variants}
        with ResultsStore(self.run_dir / "results.sqlite") as store:
            for vp in plans:
                if vp.name in done:
                    continue
                # cut before its record was saved (records from qeval before 'partial' existed): the store
                # names the variant; only keys this run wrote to count, the newest first
                found = store.keys_written_since(vp.name, dt.datetime.fromisoformat(record.started_at).timestamp())
                self._place(record, VariantResult(
                    name=vp.name, method=vp.variant.method, role=vp.role, key=found[0] if found else "",
                    status="partial" if found else "skipped",
                    error=None if found else "not reached before the run stopped; run it again to resume"))
            by_name = {vp.name: vp for vp in plans}
            for r in record.variants:
                if r.status == "partial":
                    describe_partial(store, r, by_name[r.name], self.run_dir)
            keys = {v.name: v.key for v in record.variants if v.status in ("ok", "partial") and v.key}
            record = self._judge(record, store, keys, p)
        record.save(self.record_path)
        return CampaignResult(record=record, run_dir=self.run_dir, record_path=self.record_path)


def run(cfg: CampaignConfig, settings: Settings | None = None, *, reporter: Reporter | None = None,
        **kwargs) -> CampaignResult:
    """The library entry point: what the CLI, the notebook and the tests call."""
    max_seconds, only = kwargs.pop("max_seconds", None), kwargs.pop("only", None)
    result = Campaign(cfg, settings or Settings.from_env(), reporter=reporter, **kwargs).run(max_seconds, only)
    return result.published(*publish(result.record, result.run_dir, result.record_path, cfg, reporter))


def finish(cfg: CampaignConfig, settings: Settings | None = None, *, reporter: Reporter | None = None,
           **kwargs) -> CampaignResult:
    """Verdict and report from what an interrupted run stored (see Campaign.finish)."""
    result = Campaign(cfg, settings or Settings.from_env(), reporter=reporter, **kwargs).finish()
    return result.published(*publish(result.record, result.run_dir, result.record_path, cfg, reporter))
