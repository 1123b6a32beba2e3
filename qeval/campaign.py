"""The pipeline: plan -> quantize -> serve -> evaluate -> compare -> gate -> record (-> track, report).

Every per-item record goes to the store as it arrives; a rerun redoes only what is missing.
"""

from __future__ import annotations

import dataclasses
import difflib
import datetime as dt
import json
import os
import platform
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
from pydantic import ValidationError

from .compare import Paired, adjust_all, align, compare_metric
from .config import CampaignConfig, CustomSuiteRef, EngineSpec, GateRule, VariantSpec
from .engines import build_engine, serve_dtypes
from .engines.process import INTERRUPT_GRACE_S
from .errors import ConfigError, EngineError, MissingEnvError, QuantizeError
from .gates import evaluate, evaluate_performance, overall_verdict, rule_for, variant_verdict
from .hardware import DtypeChoice, choose_dtype
from .hashing import stable_hash, tree_hash
from .metrics import UNDECLARED, MetricSpec
from .quantize import quantizer_for
from .quantize.base import DEFAULT_QUANTIZER
from .probe.grid import GridRow, assemble, cell_probe, metric_segment
from .probe.grid import settings as grid_settings
from .probe.grid_run import load_rows, run_row, save_row, serve_row
from .progress import PlainReporter, Reporter
from .record import RunRecord, SuiteSummary, VariantResult, prior_run
from .settings import Settings
from .store import Record, ResultsStore
from .suites.custom import CustomSuite, load_suite, run_custom
from .suites.lmeval import LmEvalTask, resolve_tasks, run_lmeval
from .suites.logprobs import (LogprobsSuite, compare_chunks, load_logprobs_suite, perplexity,
                              run_logprobs)
from .stats.distribution import summarize as summarize_positions


@dataclass
class Plan:
    """What a campaign will evaluate, resolved and validated before any engine starts."""

    custom: list[CustomSuite]
    lmeval: list[tuple[object, list[LmEvalTask]]]  # (LmEvalSuiteRef, tasks)
    base_checkpoint: Path
    logprobs: list[LogprobsSuite] = field(default_factory=list)
    concurrency: dict[str, int] = field(default_factory=dict)  # per custom suite key


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


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _weights_bytes(ckpt: Path | None) -> int | None:
    if ckpt is None or not ckpt.is_dir():
        return None
    return sum(p.stat().st_size for p in ckpt.glob("*.safetensors")) or None


def plan(cfg: CampaignConfig, settings: Settings, config_file: str = "") -> Plan:
    if cfg.model.builtin:
        base = settings.models / cfg.model.builtin
        if not (base / "config.json").is_file():
            hint = ("python scripts/make-random-llama.py " + str(base) + " --tokenizer " + str(settings.models / "smollm2-135m-instruct")
                    if cfg.model.builtin == "llama-3-8b-random" else "make setup")
            raise MissingEnvError(f"the embedded model {cfg.model.builtin!r}", str(base), hint)
    else:
        base = cfg.model.path
    for v in cfg.all_variants():
        if v.api_key_env and not os.environ.get(v.api_key_env):
            raise ConfigError(f"variant {v.name}: environment variable {v.api_key_env} (its API key) is not set",
                              file=config_file, where=f"variant {v.name}: api_key_env")
        if _engine_spec(cfg, v).kind == "tgi":
            if v.method != "external":
                raise ConfigError("qeval starts no TGI server; give a running one as method: external with its "
                                  "endpoint (and engine: {kind: tgi})", file=config_file,
                                  where=f"variant {v.name}: engine.kind")
            if any(s.kind == "lm_eval" for s in cfg.suites):
                raise ConfigError("lm-eval's local-completions sends token ids and asks /v1/completions for prompt "
                                  "logprobs; TGI serves neither (use custom and logprobs suites)", file=config_file,
                                  where=f"variant {v.name}: engine.kind")
    refs = [s for s in cfg.suites if isinstance(s, CustomSuiteRef)]
    custom = [load_suite(s.path) for s in refs]
    lmeval = [(s, resolve_tasks(s, settings.data, config_file)) for s in cfg.suites if s.kind == "lm_eval"]
    logprobs = [load_logprobs_suite(s, config_file) for s in cfg.suites if s.kind == "logprobs"]
    for v in cfg.all_variants():
        spec = _engine_spec(cfg, v)
        if spec.kind != "trtllm":
            continue
        where = f"variant {v.name}: engine.kind"
        # trtllm-serve's completions return logprobs of generated tokens only: these would be scored wrong
        wrong = [t.name for _, ts in lmeval for t in ts if t.needs_prompt_logprobs] + [s.suite for s in logprobs]
        if wrong:
            raise ConfigError(f"TensorRT-LLM's server returns no prompt logprobs, so {wrong} cannot be scored "
                              "against it; keep generate_until tasks and custom suites for this variant",
                              file=config_file, where=where)
        too_many = [c for c in cfg.probe.concurrency if spec.max_batch_size and c > spec.max_batch_size]
        if cfg.probe.enabled and too_many:
            raise ConfigError(f"probe concurrency {too_many} exceeds the engine's max_batch_size "
                              f"{spec.max_batch_size}, fixed when the engine was built", file=config_file,
                              where=f"variant {v.name}: probe.concurrency")
        if spec.backend == "tensorrt" and v.quantizer != "trtllm" and v.method != "checkpoint":
            raise ConfigError("backend tensorrt serves a built engine: use quantizer: trtllm (method fp8), or "
                              "method: checkpoint with an engine folder", file=config_file, where=where)
    return Plan(custom=custom, lmeval=lmeval, base_checkpoint=base, logprobs=logprobs,
                concurrency={s.key: r.concurrency for s, r in zip(custom, refs)})


@contextmanager
def _stopping(engine) -> Iterator[None]:
    try:
        yield
    except EngineError as e:
        if getattr(engine, "hung", None):  # the watchdog found it hung and ended it: say so, not the suite's symptom
            raise EngineError(engine.hung, variant=engine.name) from e
        e.engine_alive = engine.health()  # judged before the stop below: a restart only helps a dead engine
        raise
    except KeyboardInterrupt:
        engine.stop(INTERRUPT_GRACE_S)  # Ctrl-C / SIGTERM: someone is waiting, so a short grace
        raise
    finally:
        engine.stop()


def _engine_spec(cfg: CampaignConfig, v: VariantSpec, dtype: str | None = None) -> EngineSpec:
    """The variant's engine settings; `dtype` is the model's, resolved for this machine (Campaign.dtype)."""
    update = dict(v.engine)
    if dtype is not None:
        update["dtype"] = dtype
    if cfg.model.trust_remote_code:  # the model's own opt-in, passed to whatever loads it
        update["trust_remote_code"] = True
    if v.method == "fp8-online":  # the engine quantizes the base checkpoint as it loads it
        update.setdefault("quantization", "fp8")
    return EngineSpec.model_validate({**cfg.engine.model_dump(), **update}) if update else cfg.engine


def _earlier_variants(record_path: Path) -> dict[str, dict]:
    """Per variant name, what an earlier record says of it: its spec, its result, the campaign's dtype then
    (records before the dtype was recorded were made in the model's dtype, bfloat16 by default)."""
    try:
        data = json.loads(record_path.read_text())
        specs = {v["name"]: v for v in data["config"]["variants"]}
        dtype = data["config"]["model"].get("dtype", "bfloat16")
        return {r["name"]: {"spec": specs[r["name"]], "result": r, "dtype": dtype}
                for r in data["variants"] if r["name"] in specs}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _environment(settings: Settings) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    def ver(pkg: str) -> str:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return ""

    return {"python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine(),
            "cpus": str(os.cpu_count()), "qeval": ver("qeval"), "mlflow": ver("mlflow"), "numpy": ver("numpy"),
            "scipy": ver("scipy"), "vllm_env": settings.vllm.name, "llmcompressor_env": settings.llmc.name,
            "lm_eval": "0.4.13", "hostname": platform.node(), "cpu": settings.cpu.kind()}


class Campaign:
    def __init__(self, cfg: CampaignConfig, settings: Settings, *, config_file: str = "",
                 reporter: Reporter | None = None, command: list[str] | None = None):
        self.cfg, self.settings = cfg, settings
        self.reporter = reporter or PlainReporter()
        self.log = self.reporter.log
        self.config_file = config_file
        self.command = command or []
        self.run_dir = cfg.output_dir / cfg.name
        self.logs = self.run_dir / "logs"
        self._dtype: DtypeChoice | None = None  # decided once, on first use (Campaign.dtype)

    # -- variants ---------------------------------------------------------------------------
    def dtype(self) -> DtypeChoice:
        """The dtype every variant is served in (one, so that their scores pair) and quantizers compute in:
        the model's, `auto` decided by this machine and by what each variant's engine can serve."""
        if self._dtype is None:
            served = [v for v in self.cfg.all_variants() if v.method != "external"]
            specs = {v.name: _engine_spec(self.cfg, v) for v in served}
            limits = {v.name: ok for v in served
                      if (ok := serve_dtypes(specs[v.name].kind, v.method, specs[v.name].device, v.checkpoint))
                      is not None}
            choice = choose_dtype(self.cfg.model.dtype, {s.device for s in specs.values()} or {"cpu"},
                                  self.settings.cpu, limits)
            bad = sorted(n for n, ok in limits.items() if choice.dtype not in ok)
            if bad:
                raise ConfigError(f"{', '.join(bad)}: the engine serves this method in {sorted(limits[bad[0]])} "
                                  f"only, not {choice.dtype}", file=self.config_file, where="model.dtype")
            self._dtype = choice
        return self._dtype

    def engine_spec(self, v: VariantSpec) -> EngineSpec:
        return _engine_spec(self.cfg, v, self.dtype().dtype)

    def checkpoint_for(self, v: VariantSpec, base: Path, result: VariantResult) -> Path | None:
        # an external endpoint's checkpoint is only its tokenizer; any given checkpoint is served as is
        if v.method == "external" or v.checkpoint is not None:
            return v.checkpoint
        if v.method in ("bf16", "fp16", "fp8-online"):
            return base
        name = v.quantizer or DEFAULT_QUANTIZER[v.method]
        runtime = {"llmcompressor": self.settings.llmc, "modelopt": self.settings.modelopt,
                   "trtllm": self.settings.trtllm}[name]
        q = quantizer_for(v.method, name, runtime=runtime, engine=self.engine_spec(v),
                          dtype=self.dtype().quantize_dtype)
        key = q.cache_key(base, v)
        out = self.settings.variants / f"{base.name}-{v.method}-{key}"
        result.recipe = q.spec(base, v)
        if (out / "config.json").is_file():
            return out
        log = self.logs / f"quantize-{v.name}.log"
        t0 = time.monotonic()
        with self.reporter.step(f"[{v.name}] quantizing ({v.method}, {q.name}; log {log})"):
            ckpt = q.quantize(base, v, out, log)
        result.quantize_seconds = round(time.monotonic() - t0, 1)
        return ckpt

    def variant_key(self, v: VariantSpec, checkpoint_hash: str | None) -> str:
        if v.method == "external":
            return "ext:" + stable_hash({"endpoint": v.endpoint, "model": v.served_model})
        spec = self.engine_spec(v)
        # settings that change outputs are part of the key; ports, timeouts and the like are not
        key = {"checkpoint": checkpoint_hash, "dtype": spec.dtype, "engine": spec.kind,
               "env": self.settings.vllm.name, "max_model_len": spec.max_model_len}
        # only where set, so that stores written before these knobs existed still resume
        key |= {k: getattr(spec, k) for k in ("quantization", "max_num_seqs", "max_num_batched_tokens")
                if getattr(spec, k)}
        key |= {"device": spec.device} if spec.device != "cpu" else {}
        return "ckpt:" + stable_hash(key)

    # -- evaluation -------------------------------------------------------------------------
    def _todo(self, store: ResultsStore, vkey: str, p: Plan, grid: Sequence[GridRow] = ()) -> bool:
        keys = [s.key for s in p.custom] + [t.key for _, ts in p.lmeval for t in ts] + [s.key for s in p.logprobs]
        probe_missing = self.cfg.probe.enabled and not self._probe_path(vkey).exists()
        grid_missing = any(r.on_server and not r.path.exists() for r in grid)  # they need the evaluation's server
        return probe_missing or grid_missing or any(not store.is_complete(vkey, k) for k in keys)

    def evaluate_variant(self, v: VariantSpec, ckpt: Path | None, vkey: str, p: Plan, store: ResultsStore,
                         result: VariantResult) -> None:
        """Serve the variant and run what the store lacks. If the engine dies or stops answering
        mid-suite, it is restarted (at most engine.max_restarts times) and the suites resume from the
        last stored record; past the bound the EngineError stands and every record so far is kept."""
        spec = self.engine_spec(v)
        # an endpoint someone else runs is `external`, or `tgi` where the engine settings say TGI serves it
        kind = ("tgi" if spec.kind == "tgi" else "external") if v.method == "external" else spec.kind
        engine = build_engine(kind, v, ckpt, spec, self.settings, self.logs)
        for attempt in range(spec.max_restarts + 1):
            try:
                self._serve_and_evaluate(v, engine, kind, vkey, p, store, result)
                return
            except EngineError as e:
                if attempt == spec.max_restarts or v.method == "external":  # not ours to restart
                    raise
                if getattr(e, "engine_alive", False):  # it still answered: the fault is elsewhere (an lm-eval crash)
                    raise
                self.log(f"[{v.name}] engine failed ({str(e).splitlines()[0]}); restart {attempt + 1} of "
                         f"{spec.max_restarts}, resuming from the store")
                result.restarts += 1

    def _itemwise(self, v: VariantSpec, vkey: str, store: ResultsStore, suite: str, key: str, total: int,
                  run: Callable[[set[str], Callable[[list[Record]], None]], int], note: str = "") -> None:
        """Run one per-item suite: skip what is stored, store each record as it arrives, mark it done."""
        if store.is_complete(vkey, key):
            return
        done = store.done_ids(vkey, key)
        with self.reporter.step(f"[{v.name}] {suite}{note}", total=total) as advance:
            advance(len(done))

            def sink(recs: list[Record]) -> None:
                store.put(vkey, key, v.name, suite, recs)
                advance(len(recs))

            run(done, sink)
        store.mark_complete(vkey, key, total)

    def _serve_and_evaluate(self, v: VariantSpec, engine, kind: str, vkey: str, p: Plan, store: ResultsStore,
                            result: VariantResult) -> None:
        spec = self.engine_spec(v)
        t0 = time.monotonic()
        with self.reporter.step(f"[{v.name}] starting the {kind} engine"):
            endpoint = engine.start()
        with _stopping(engine):
            result.startup_seconds = round(getattr(engine, "startup_seconds", None) or time.monotonic() - t0, 1)
            result.engine, result.engine_version = endpoint.engine, endpoint.engine_version
            self.log(f"[{v.name}] engine up in {result.startup_seconds:.0f} s at {endpoint.base_url}")
            t_eval = time.monotonic()
            timeout = spec.request_timeout_s
            for suite in p.custom:
                self._itemwise(v, vkey, store, f"custom/{suite.name}", suite.key, len(suite.items),
                               lambda done, sink, s=suite: run_custom(s, endpoint, done, sink, timeout_s=timeout,
                                                                      concurrency=p.concurrency.get(s.key, 8)))
            for lp in p.logprobs:
                self._itemwise(v, vkey, store, lp.suite, lp.key, len(lp.chunks),
                               lambda done, sink, s=lp: run_logprobs(s, endpoint, done, sink, timeout_s=timeout),
                               note=" (prompt logprobs)")
            for ref, tasks in p.lmeval:
                todo = [t for t in tasks if not store.is_complete(vkey, t.key)]
                if not todo:
                    continue

                def task_sink(t: LmEvalTask, recs: list[Record]) -> None:
                    store.put(vkey, t.key, v.name, f"lm_eval/{t.name}", recs)
                    store.mark_complete(vkey, t.key, len(recs))

                with self.reporter.step(f"[{v.name}] lm-eval {', '.join(t.name for t in todo)}"):
                    run_lmeval(ref, todo, endpoint, self.settings.vllm, self.settings.data,
                               self.run_dir / "work" / v.name, task_sink, self.logs / f"lmeval-{v.name}.log")
            result.eval_seconds = round(time.monotonic() - t_eval, 1)
            mem = engine.memory()
            result.engine_rss_bytes, result.engine_gpu_bytes = mem.rss_bytes, mem.gpu_bytes
            result.model_memory_bytes = mem.model_bytes
            result.kv_cache_bytes, result.kv_cache_tokens = mem.kv_cache_bytes, mem.kv_cache_tokens
            if self.cfg.probe.enabled and not self._probe_path(vkey).exists():
                self.probe_variant(v, endpoint, vkey)
            for row in self.grid_rows(v, result.checkpoint_hash):
                if row.on_server and not row.path.exists():
                    self.grid_row(v, row, engine, endpoint)

    def _probe_path(self, vkey: str) -> Path:
        return self.run_dir / "probe" / f"{stable_hash([vkey, self.cfg.probe.key()])}.json"

    def probe_variant(self, v: VariantSpec, endpoint, vkey: str) -> None:
        """Latency sweep on the server that was just evaluated; written atomically, so a crash redoes it whole."""
        from .probe.latency import run_probe

        spec = self.cfg.probe
        with self.reporter.step(f"[{v.name}] latency probe (concurrency {spec.concurrency})",
                                total=len(spec.concurrency) + len(spec.rates)) as advance:
            res = run_probe(spec, endpoint, seed=self.cfg.seed, on_step=lambda s: advance(1))
        path = self._probe_path(vkey)
        path.parent.mkdir(parents=True, exist_ok=True)
        import pandas as pd

        pd.DataFrame(res.requests).to_parquet(path.with_suffix(".parquet"))
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(res.to_json()))
        tmp.replace(path)

    # -- batch size x concurrency -------------------------------------------------------------
    def grid_rows(self, v: VariantSpec, checkpoint_hash: str | None) -> list[GridRow]:
        """The variant's grid rows. A row is stored under the key of the variant served with its setting
        (and the cells' probe settings), so a resumed run, or another campaign, skips what is done."""
        if v not in self.cfg.grid_variants():
            return []
        g, spec = self.cfg.grid, self.engine_spec(v)
        cells = cell_probe(g, self.cfg.probe).model_dump(mode="json", exclude={"slo"})  # SLOs change no cell
        rows = []
        for setting in grid_settings(g.engine):
            key = self.variant_key(v.model_copy(update={"engine": {**v.engine, **setting}}), checkpoint_hash)
            row_spec = spec.model_copy(update=setting)
            rows.append(GridRow(setting=setting, spec=row_spec, on_server=row_spec == spec,
                                path=self.run_dir / "grid" / f"{stable_hash([key, cells])}.json"))
        return rows

    def grid_row(self, v: VariantSpec, row: GridRow, engine, endpoint=None) -> None:
        """One row's cells: on `endpoint` (the evaluation's server), else on a server of its own."""
        probe = cell_probe(self.cfg.grid, self.cfg.probe)
        where = "" if endpoint else f"; its own server (log {engine.log_path})"
        with self.reporter.step(f"[{v.name}] grid {row.label} x concurrency {probe.concurrency}{where}",
                                total=len(probe.concurrency)) as advance:
            if endpoint is not None:
                data = run_row(row, probe, endpoint, engine, self.cfg.seed, on_cell=lambda c: advance(1))
            else:
                data = serve_row(row, probe, engine, self.cfg.seed, on_cell=lambda c: advance(1))
        save_row(row.path, data)

    def grid_variant(self, v: VariantSpec, ckpt: Path | None, result: VariantResult) -> None:
        """The rows the evaluation's server did not have, one engine start each (after that server has
        stopped); then the whole grid into the record. A row whose engine fails is reported, not fatal."""
        rows = self.grid_rows(v, result.checkpoint_hash)
        if not rows:
            return
        errors: dict[str, str] = {}
        for row in rows:
            if row.path.exists():
                continue
            if row.on_server:  # it ran with the evaluation, unless that stopped early
                errors[row.label] = "not run: the evaluation's server stopped before it"
                continue
            engine = build_engine(row.spec.kind, v, ckpt, row.spec, self.settings,
                                  self.logs / "grid" / metric_segment(row.label))
            try:
                self.grid_row(v, row, engine)
            except EngineError as e:
                errors[row.label] = str(e).splitlines()[0]
                self.log(f"[{v.name}] grid row {row.label} has no cells: {errors[row.label]}")
        result.grid = assemble(self.cfg.grid, self.cfg.probe.slo, load_rows(rows), errors)

    def summarize(self, store: ResultsStore, vkey: str, p: Plan, complete_only: bool = False) -> list[SuiteSummary]:
        out = []
        for name, key, primary, _ in self._suite_keys(p):
            recs = store.records(vkey, key)
            if not recs or (complete_only and not store.is_complete(vkey, key)):
                continue
            metrics = sorted(recs[0].scores)
            means = {m: sum(r.scores.get(m, 0.0) for r in recs) / len(recs) for m in metrics}
            out.append(SuiteSummary(suite=name, key=key, n=len(recs), primary=primary or metrics[0], means=means))
        return out

    @staticmethod
    def _suite_keys(p: Plan) -> list[tuple[str, str, str | None, dict[str, MetricSpec]]]:
        """(suite, store key, primary metric, what each metric is as the suite declares it)."""
        return ([(f"custom/{s.name}", s.key, s.primary, s.metrics()) for s in p.custom]
                + [(f"lm_eval/{t.name}", t.key, None, t.metrics) for _, ts in p.lmeval for t in ts]
                + [(s.suite, s.key, "nll", s.metrics()) for s in p.logprobs])

    # -- the whole run ----------------------------------------------------------------------
    def run(self, max_seconds: float | None = None, only: Sequence[str] | None = None) -> CampaignResult:
        """Every variant, then the comparison. With `max_seconds`, no variant starts once that much time
        has passed: the ones left are reported as not evaluated (never PASS) and a rerun resumes them.
        With `only`, just those variants (and the baseline) are made and served; each other one keeps what
        an earlier record of this campaign shows where the store still holds it whole (_carry_over)."""
        cfg = self.cfg
        t_start = time.monotonic()
        p = plan(cfg, self.settings, self.config_file)  # all input validated before anything starts
        self.dtype()  # a dtype an engine cannot serve is bad input, found before anything starts
        selected = self._selected(only)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        record_path = self.run_dir / "run.json"
        earlier = _earlier_variants(record_path) if selected is not None else {}
        prior = prior_run(record_path)
        facts = prior["facts"] if prior else {}
        resuming = prior is not None and prior["finished_at"] is None and prior["config_hash"] == cfg.config_hash()
        record = RunRecord(run_id=prior["run_id"] if resuming else uuid.uuid4().hex, campaign=cfg.name,
                           config_hash=cfg.config_hash(), config=cfg.model_dump(mode="json"),
                           config_file=self.config_file, command=self.command,
                           started_at=prior["started_at"] if resuming else _now(),
                           environment=_environment(self.settings))
        record.save(record_path)
        if resuming:
            self.log(f"resuming run {record.run_id} in {self.run_dir}")
        keys: dict[str, str] = {}
        with ResultsStore(self.run_dir / "results.sqlite") as store, \
                self._record_if_interrupted(record, record_path, store, keys, p):
            for v in cfg.all_variants():
                role = "baseline" if v is cfg.baseline else "variant"
                res = VariantResult(name=v.name, method=v.method, role=role)
                if role == "variant" and max_seconds is not None and time.monotonic() - t_start > max_seconds:
                    res.status, res.error = "skipped", (f"not started: the run's time budget ({max_seconds:.0f} s) "
                                                        "was spent; run the same command again to resume")
                    self.log(f"[{v.name}] NOT EVALUATED: {res.error}")
                    record.variants.append(res)
                    continue
                if role == "variant" and selected is not None and v.name not in selected:
                    carried = self._carry_over(v, earlier.get(v.name), store, p)
                    if carried is not None:
                        res = carried
                        keys[v.name] = res.key
                        self.log(f"[{v.name}] not selected: kept from the earlier record (its suites are in the store)")
                    else:
                        res.status, res.error = "skipped", ("not selected (--only), and no earlier result of it in "
                                                            "the store; run without --only to evaluate it")
                        self.log(f"[{v.name}] NOT EVALUATED: {res.error}")
                    record.variants.append(res)
                    record.save(record_path)
                    continue
                try:
                    ckpt = self.checkpoint_for(v, p.base_checkpoint, res)
                    res.checkpoint = str(ckpt) if ckpt else None
                    res.checkpoint_hash = tree_hash(ckpt) if ckpt and v.method != "external" else None
                    res.weights_bytes = _weights_bytes(ckpt) if v.method != "external" else None
                    vkey = self.variant_key(v, res.checkpoint_hash)
                    res.key = vkey
                    if v.method != "external":  # an endpoint someone else runs serves in its own dtype
                        res.dtype, res.dtype_reason = self.dtype().dtype, self.dtype().reason
                    if res.quantize_seconds is None:  # the checkpoint was made by an earlier attempt
                        res.quantize_seconds = facts.get(vkey, {}).get("quantize_seconds")
                    if self._todo(store, vkey, p, self.grid_rows(v, res.checkpoint_hash)):
                        # on the record before it starts: a run cut here leaves it as partial, with the key
                        # under which `qeval finish` finds the suites it stored
                        res.status, res.error = "partial", "cut while being evaluated; run the same command again"
                        record.variants.append(res)
                        record.save(record_path)
                        self.evaluate_variant(v, ckpt, vkey, p, store, res)
                        res.status, res.error = "ok", None
                    else:
                        self.log(f"[{v.name}] every suite already in the store: nothing to run")
                        for f, val in facts.get(vkey, {}).items():  # measured when it was served
                            setattr(res, f, val)
                    keys[v.name] = vkey
                    res.suites = self.summarize(store, vkey, p)
                    self._load_probe(res, vkey)
                    self.grid_variant(v, ckpt, res)
                except (EngineError, QuantizeError, MissingEnvError) as e:
                    res.status, res.error = "error", str(e)
                    self.log(f"[{v.name}] NOT EVALUATED: {e}")
                if not any(r is res for r in record.variants):
                    record.variants.append(res)
                record.save(record_path)
            self.compare_and_gate(record, store, keys, p)
        if not any(v.status == "skipped" for v in record.variants):  # else unfinished: a rerun resumes it
            record.finished_at = _now()
        record.save(record_path)
        return CampaignResult(record=record, run_dir=self.run_dir, record_path=record_path)

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

    def _carry_over(self, v: VariantSpec, earlier: dict | None, store: ResultsStore, p: Plan) -> VariantResult | None:
        """A variant left out by `only` keeps an earlier record's result where that record shows the same
        spec served in today's dtype, and the store holds every suite of this campaign (and its probe) whole
        under the key it had: nothing is quantized to find out, and what is shown is summarized anew."""
        if earlier is None or earlier["result"].get("status") != "ok":
            return None
        try:  # read with today's defaults: a field added to VariantSpec since is not a difference
            same = VariantSpec.model_validate(earlier["spec"]).model_dump(mode="json") == v.model_dump(mode="json")
        except ValidationError:
            return None
        if not same:
            return None
        res = VariantResult.model_validate(earlier["result"])
        # an endpoint someone else runs has no dtype of ours; records before dtypes were kept: the model's
        if v.method != "external" and (res.dtype or earlier["dtype"]) != self.dtype().dtype or not res.key:
            return None
        if any(not store.is_complete(res.key, key) for _, key, *_ in self._suite_keys(p)):
            return None
        if not self._load_probe(res, res.key) and self.cfg.probe.enabled:
            return None
        res.suites = self.summarize(store, res.key, p)
        return res

    def _load_probe(self, res: VariantResult, vkey: str) -> bool:
        """The stored latency probe of this variant key into its result, where the campaign probes and it is there."""
        if not (self.cfg.probe.enabled and self._probe_path(vkey).exists()):
            return False
        res.probe = json.loads(self._probe_path(vkey).read_text())
        res.probe_requests = str(self._probe_path(vkey).with_suffix(".parquet"))
        return True

    @contextmanager
    def _record_if_interrupted(self, record: RunRecord, record_path: Path, store: ResultsStore,
                               keys: dict[str, str], p: Plan) -> Iterator[None]:
        """On Ctrl-C / SIGTERM (the engines already stopped on the way here): the variant being evaluated is
        partial (its finished suites compared, verdict NOT_EVALUATED), the ones not reached NOT_EVALUATED;
        what finished is gated and the record saved, unfinished (a rerun resumes); then the interrupt goes on."""
        try:
            yield
        except KeyboardInterrupt:
            self.log("interrupted: comparing what finished and saving the record")
            for r in record.variants:
                if r.status == "partial" and r.key:
                    self._partial(store, r, p)
                    keys[r.name] = r.key
            listed = {r.name for r in record.variants}
            for v in self.cfg.all_variants():
                if v.name not in listed:
                    record.variants.append(VariantResult(
                        name=v.name, method=v.method, role="baseline" if v is self.cfg.baseline else "variant",
                        status="skipped", error="not evaluated: the run was interrupted before it; run the same "
                                                "command again to resume"))
            self.compare_and_gate(record, store, keys, p)
            record.save(record_path)
            raise

    def finish(self) -> CampaignResult:
        """Compare, gate and report what an interrupted run stored, serving nothing: the variants its
        record lists as done are compared; the others are NOT_EVALUATED (never PASS). The run stays
        unfinished, so the same `qeval run` still resumes it."""
        p = plan(self.cfg, self.settings, self.config_file)
        record_path = self.run_dir / "run.json"
        if not record_path.exists():
            raise ConfigError("no run to finish here (run.json is missing)", file=str(record_path))
        record = RunRecord.load(record_path)
        if record.config_hash != self.cfg.config_hash():
            raise ConfigError("this run was made from a different campaign file (config hash differs)",
                              file=self.config_file, where=str(record_path))
        # the pydoc corpus comes from the interpreter's stdlib: on another Python its key differs, so read
        # the logprobs suites under the keys the run itself recorded (the texts are not needed to compare)
        ran = {s.suite: s.key for v in record.variants for s in v.suites}
        p.logprobs[:] = [dataclasses.replace(s, key=ran.get(s.suite, s.key)) for s in p.logprobs]
        done = {v.name for v in record.variants}
        with ResultsStore(self.run_dir / "results.sqlite") as store:
            for v in self.cfg.all_variants():
                if v.name in done:
                    continue
                # cut before its record was saved (records from qeval before 'partial' existed): the store
                # names the variant; only keys this run wrote to count, the newest first
                found = store.keys_written_since(v.name, dt.datetime.fromisoformat(record.started_at).timestamp())
                record.variants.append(VariantResult(
                    name=v.name, method=v.method, role="baseline" if v is self.cfg.baseline else "variant",
                    key=found[0] if found else "", status="partial" if found else "skipped",
                    error=None if found else "not reached before the run stopped; run it again to resume"))
            for r in record.variants:
                if r.status == "partial":
                    self._partial(store, r, p)
            keys = {v.name: v.key for v in record.variants if v.status in ("ok", "partial") and v.key}
            self.compare_and_gate(record, store, keys, p)
        record.save(record_path)
        return CampaignResult(record=record, run_dir=self.run_dir, record_path=record_path)

    def distribution(self, record: RunRecord, store: ResultsStore, base_records: dict[str, list[Record]], name: str,
                     vkey: str, p: Plan, complete_only: bool = False) -> list:
        """KL divergence and top-1 agreement per chunk against the baseline, as paired comparisons
        (the baseline's own KL is 0 and its agreement 1), plus a per-token summary in the record."""
        out = []
        res = next(r for r in record.variants if r.name == name)
        base_res = next(r for r in record.variants if r.name == self.cfg.baseline.name)
        for lp in p.logprobs:
            if complete_only and not store.is_complete(vkey, lp.key):
                continue
            base_recs, cand_recs = base_records[lp.key], store.records(vkey, lp.key)
            if not base_recs or not cand_recs:
                continue
            cc = compare_chunks(base_recs, cand_recs)
            summ = summarize_positions(cc.positions)
            res.distribution[lp.suite] = {**summ.__dict__, "perplexity": perplexity(cand_recs),
                                          "mismatched_chunks": len(cc.mismatched), "chunks": len(cc.ids),
                                          "method": f"top-{lp.top_k} + tail bucket (approximation, a near lower bound)"}
            if not cc.alternatives:  # a TGI side: no alternatives per prompt token, so no top-1 figures
                res.distribution[lp.suite].update(
                    top1_agreement=None, **{k: None for k in res.distribution[lp.suite] if k.startswith("delta_p_")},
                    method="actual token + tail bucket (TGI lists no alternatives for prompt tokens: a looser "
                           "lower bound; no top-1 agreement)")
            base_res.distribution[lp.suite] = {"perplexity": perplexity(base_recs), "chunks": len(base_recs)}
            if not cc.ids:
                continue
            n = len(cc.ids)
            paired = Paired(ids=cc.ids, groups=[None] * n, base={"kl": np.zeros(n), "top1": np.ones(n)},
                            cand={"kl": cc.kl, "top1": cc.top1}, unpaired_base=[], unpaired_cand=[])
            for m in ("kl", "top1") if cc.alternatives else ("kl",):
                rule = rule_for(self.cfg.gates, lp.suite, m) or GateRule()
                out.append(compare_metric(name, lp.suite, m, m == "kl", paired, rule, self.cfg.gates,
                                          spec=lp.metrics()[m]))
        return out

    def _partial(self, store: ResultsStore, res: VariantResult, p: Plan) -> None:
        """A variant cut while being evaluated: what it finished, for the comparison, and what it lacks."""
        res.suites = self.summarize(store, res.key, p, complete_only=True)
        self._load_probe(res, res.key)
        done = {s.suite for s in res.suites}
        missing = [name for name, *_ in self._suite_keys(p) if name not in done]
        missing += ["latency probe"] if self.cfg.probe.enabled and res.probe is None else []
        res.error = (f"cut while being evaluated: {len(done)} finished suite(s) compared, verdict NOT_EVALUATED; "
                     f"missing: {', '.join(missing) or 'nothing'}; run the same command again to resume")

    def compare_and_gate(self, record: RunRecord, store: ResultsStore, keys: dict[str, str], p: Plan) -> None:
        cfg = self.cfg
        partial = {r.name for r in record.variants if r.status == "partial"}
        base_key = keys.get(cfg.baseline.name) if cfg.baseline.name not in partial else None
        comparisons = []
        if base_key is not None:
            # the baseline's records are read once, not once per variant
            base_records = {skey: store.records(base_key, skey) for _, skey, *_ in self._suite_keys(p)}
            for v in cfg.variants:
                if v.name not in keys:
                    continue
                for suite, skey, primary, declared in self._suite_keys(p):
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
                comparisons += self.distribution(record, store, base_records, v.name, keys[v.name], p,
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


def publish(result: CampaignResult, cfg: CampaignConfig, reporter: Reporter | None = None) -> CampaignResult:
    """Write the report, then log the record to MLflow. A tracking failure keeps the record local."""
    from .report import write_all
    from .tracking.mlflow import default_tracking_uri, log_record

    log = (reporter or PlainReporter()).log
    record = result.record
    paths = write_all(record, result.run_dir)
    result.report_path = paths["report"]
    result.extras.update({k: str(v) for k, v in paths.items()})
    if cfg.mlflow.enabled:
        uri = cfg.mlflow.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(cfg.output_dir)
        use_server = cfg.mlflow.server and not cfg.mlflow.tracking_uri and not os.environ.get("MLFLOW_TRACKING_URI")
        register_as = cfg.mlflow.registered_name(cfg.name)
        try:
            if use_server:
                from .tracking.server import MlflowServer

                with MlflowServer(cfg.output_dir) as url:
                    log(f"MLflow server up at {url} (store {cfg.output_dir / 'mlflow.db'})")
                    record.tracking = log_record(record, result.run_dir, url, cfg.mlflow.experiment, register_as)
                # the server is gone; the same store stays readable directly
                record.tracking["server_url"] = record.tracking["tracking_uri"]
                record.tracking["tracking_uri"] = uri
            else:
                record.tracking = log_record(record, result.run_dir, uri, cfg.mlflow.experiment, register_as)
        except Exception as e:  # any tracker fault: the record is safe on disk; `qeval sync` retries
            record.tracking = {"tracking_uri": uri, "error": f"{type(e).__name__}: {e}"[:500]}
            log(f"MLflow logging failed ({type(e).__name__}: {e}); the run record is kept in "
                f"{result.record_path}; run `qeval sync {result.run_dir}` later")
        record.save(result.record_path)
    return result


def run(cfg: CampaignConfig, settings: Settings | None = None, *, reporter: Reporter | None = None,
        **kwargs) -> CampaignResult:
    """The library entry point: what the CLI, the notebook and the tests call."""
    max_seconds, only = kwargs.pop("max_seconds", None), kwargs.pop("only", None)
    result = Campaign(cfg, settings or Settings.from_env(), reporter=reporter, **kwargs).run(max_seconds, only)
    return publish(result, cfg, reporter)


def finish(cfg: CampaignConfig, settings: Settings | None = None, *, reporter: Reporter | None = None,
           **kwargs) -> CampaignResult:
    """Verdict and report from what an interrupted run stored (see Campaign.finish)."""
    result = Campaign(cfg, settings or Settings.from_env(), reporter=reporter, **kwargs).finish()
    return publish(result, cfg, reporter)
