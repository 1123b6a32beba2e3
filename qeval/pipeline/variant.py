"""One variant, start to end: quantize -> serve -> suites -> probe -> grid, as a unit of work that can travel.

`run_variant` reads only its plan and its own keys in the sink, writes records only through the sink and
files only under its workspace, and returns a frozen outcome; the driver merges outcomes into the record.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..engines import Engine, build_engine
from ..engines.capacity import Capacity
from ..engines.process import INTERRUPT_GRACE_S
from ..engines.spec import kv_cache_dtype
from ..executors.leases import Guard, Kind, unguarded
from ..executors.outcome import VariantOutcome
from ..errors import EngineError, MissingEnvError, QuantizeError
from ..hashing import key_hash, tree_hash
from ..progress import Reporter
from ..record.run import Measured
from ..record.measurements import metric_segment
from ..quantize import QUANTIZERS, quantizer_for
from ..quantize.base import DEFAULT_QUANTIZER
from ..quantize.describe import describe_checkpoint
from ..record.store import Record
from ..suites.base import Part
from .monitor import Monitor
from .plan import UNQUANTIZED, VariantPlan, variant_key
from .sink import Pending, RecordSink, Reference


def _weights_bytes(ckpt: Path | None) -> int | None:
    if ckpt is None or not ckpt.is_dir():
        return None
    return sum(p.stat().st_size for p in ckpt.glob("*.safetensors")) or None


@contextmanager
def _stopping(engine: Engine) -> Iterator[None]:
    try:
        yield
    except EngineError as e:
        if engine.hung:  # the watchdog found it hung and ended it: say so, not the suite's symptom
            raise EngineError(engine.hung, variant=engine.name) from e
        e.engine_alive = engine.health()  # judged before the stop below: a restart only helps a dead engine
        raise
    except KeyboardInterrupt:
        engine.stop(INTERRUPT_GRACE_S)  # Ctrl-C / SIGTERM: someone is waiting, so a short grace
        raise
    finally:
        engine.stop()


class _Clock:
    """Where the variant's engine time went: up (started to stopped, over every restart), busy (a stage ran on it:
    its suites, its probe, its grid cells) and waiting for a lease (any stage's). Up but not busy is idle: the
    engine held its share of the device while it waited for a lease or for the baseline's records."""

    def __init__(self, guard: Guard):
        self.guard = guard
        self.up = self.busy = self.waiting = 0.0

    @contextmanager
    def leased(self, kind: Kind, busy: bool = True) -> Iterator[None]:
        """The stage under its lease; `busy`: it runs on the engine (not its start)."""
        t0 = time.monotonic()
        with self.guard(kind):
            got = time.monotonic()
            self.waiting += got - t0
            try:
                yield
            finally:
                if busy:
                    self.busy += time.monotonic() - got

    @contextmanager
    def serving(self) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.up += time.monotonic() - t0

    def facts(self) -> dict[str, float]:
        return {"idle_seconds": round(max(0.0, self.up - self.busy), 1), "lease_wait_seconds": round(self.waiting, 1)}


class _Run:
    """The state of one variant's run; only `run_variant` makes one."""

    def __init__(self, plan: VariantPlan, workspace: Path, sink: RecordSink, reporter: Reporter,
                 guard: Guard = unguarded, reference: Reference | Pending | None = None):
        self.plan, self.ws, self.sink, self.reporter = plan, workspace, sink, reporter
        self.clock = _Clock(guard)  # every stage's lease is taken through it
        self.reference = reference
        self.monitor: Monitor | None = None  # once the variant's key is known
        self.v, self.log = plan.variant, reporter.log
        self.logs = workspace / plan.logs
        self.facts: dict[str, Any] = {}  # Measured's fields as they are found (checked by name when it is built)
        self.reused: dict[str, int] = {}  # per suite, the records taken from the shared store

    def checkpoint(self) -> Path | None:
        with self.clock.leased("make", busy=False):  # no engine sizes its memory beside a quantizer
            ckpt, made = make_checkpoint(self.plan, self.ws, self.reporter)
        if self.v.method != "external":  # an endpoint's folder is its tokenizer: nothing it serves to describe
            made["scheme"] = describe_checkpoint(ckpt)  # a team's checkpoint as well as one made here
        self.facts.update(made)
        return ckpt

    # -- what is left to do -----------------------------------------------------------------
    def grid_rows(self, checkpoint_hash: str | None) -> list:
        """The variant's grid rows. A row is stored under the key of the variant served with its setting
        (and the cells' probe settings), so a resumed run, or another campaign, skips what is done."""
        p = self.plan
        return grid_rows(p, checkpoint_hash, self.ws)

    def todo(self, vkey: str, rows: list) -> bool:
        p = self.plan
        self.monitor = Monitor(p, self.reference, self.sink, vkey, self.log)
        for k in p.suites.parts():  # whole suites another campaign stored under the same keys
            if not self.sink.is_complete(vkey, k.key) and (n := self.sink.reuse(vkey, k.key, self.v.name, k.suite)):
                self.reused[k.suite] = n
                self.log(f"[{self.v.name}] {k.suite}: {n} records reused from the shared store (same checkpoint, "
                         "engine, dtype and suite): not served again")
        probe_missing = p.probe is not None and not (self.ws / p.probe_path(vkey)).exists()
        grid_missing = any(r.on_server and not r.path.exists() for r in rows)  # they need the evaluation's server
        missing = [k for k in p.suites.parts() if not self.sink.is_complete(vkey, k.key)]
        if missing and self.monitor.failed_already():  # a rerun: the stored suites failed it, the rest stay skipped
            missing = [k for k in missing if not self.monitor.skip(k)]
        return probe_missing or grid_missing or bool(missing)

    # -- serving and evaluating -------------------------------------------------------------
    def evaluate(self, ckpt: Path | None, vkey: str, rows: list) -> None:
        """Serve the variant and run what the store lacks. If the engine dies or stops answering
        mid-suite, it is restarted (at most engine.max_restarts times) and the suites resume from the
        last stored record; past the bound the EngineError stands and every record so far is kept."""
        p, v = self.plan, self.v
        engine = build_engine(p.engine_kind, v, ckpt, p.engine, p.settings, self.logs)
        self.facts["restarts"] = 0
        try:
            self._attempts(engine, vkey, rows)
        finally:  # what its engine's time went to, however the run ended
            self.facts.update(self.clock.facts())

    def _attempts(self, engine, vkey: str, rows: list) -> None:
        p, v = self.plan, self.v
        for attempt in range(p.engine.max_restarts + 1):
            try:
                self._serve_and_evaluate(engine, vkey, rows)
                return
            except EngineError as e:
                if attempt == p.engine.max_restarts or p.external:  # not ours to restart
                    raise
                if e.at_start:  # it never came up: a start-up failure repeats, a restart waits for it
                    raise
                if e.engine_alive:  # it still answered: the fault is elsewhere (an lm-eval crash)
                    raise
                self.log(f"[{v.name}] engine failed ({str(e).splitlines()[0]}); restart {attempt + 1} of "
                         f"{p.engine.max_restarts}, resuming from the store")
                self.facts["restarts"] += 1

    def _serve_and_evaluate(self, engine, vkey: str, rows: list) -> None:
        p, v = self.plan, self.v
        t0 = time.monotonic()
        starting = self.reporter.step(f"[{v.name}] starting the {p.engine_kind} engine")
        # an engine sizing its memory from what is free starts alone on its GPU (executors/leases.py)
        with self.clock.leased("start" if p.engine.start_reads_free_memory else "shared", busy=False), starting:
            try:
                endpoint = engine.start()
            except EngineError as e:
                e.at_start = True
                raise
        with _stopping(engine), self.clock.serving():
            self.facts["startup_seconds"] = round(engine.startup_seconds or time.monotonic() - t0, 1)
            self.facts["engine"], self.facts["engine_version"] = endpoint.engine, endpoint.engine_version
            self.log(f"[{v.name}] engine up in {self.facts['startup_seconds']:.0f} s at {endpoint.base_url}")
            # a pending baseline is waited for holding no lease: its probe needs the device alone
            self.monitor.wait_for_reference()
            with self.clock.leased("shared"):
                self._suites(engine, endpoint, vkey)
            # latency is measured with the devices alone: other variants' work there waits meanwhile
            if p.probe is not None and not (self.ws / p.probe_path(vkey)).exists():
                with self.clock.leased("exclusive"):
                    self.probe(endpoint, vkey)
            for row in rows:
                if row.on_server and not row.path.exists():
                    with self.clock.leased("exclusive"):
                        self.grid_row(row, engine, endpoint)

    def _suites(self, engine, endpoint, vkey: str) -> None:
        """Every suite the store lacks, on the running engine; then what the engine holds in memory."""
        p = self.plan
        t_eval = time.monotonic()
        capacity = engine.capacity()  # read once it is up: what suites set to `auto` are sized from
        if capacity is not None:
            self.facts.update(max_num_seqs=capacity.max_num_seqs)
        used = self.facts.setdefault("concurrency", {})
        run = _SuiteRun(endpoint=endpoint, variant=self.v.name, seed=p.seed, settings=p.settings,
                        timeout_s=p.engine.request_timeout_s, retry_backoff_s=p.engine.retry_backoff_s,
                        concurrency=p.concurrency, capacity=capacity, used=used, logs=self.logs,
                        # lm-eval's request cache answers a request it has seen whatever now serves it: one
                        # folder per checkpoint (the variant's key), so a variant re-made under its name is asked
                        # again, and a resumed one is not
                        work=self.ws / "work" / self.v.name / vkey.replace(":", "-"),
                        vkey=vkey, sink=self.sink, monitor=self.monitor, reporter=self.reporter)
        for suite in p.suites.suites:
            suite.run(run)
        self.facts["eval_seconds"] = round(time.monotonic() - t_eval, 1)
        mem = engine.memory()
        on_gpu = getattr(p.engine, "device", None) == "gpu" and not p.external
        self.facts.update(gpus=getattr(p.engine, "tensor_parallel_size", 1) if on_gpu else None,
                          engine_rss_bytes=mem.rss_bytes, engine_gpu_bytes=mem.gpu_bytes,
                          model_memory_bytes=mem.model_bytes, kv_cache_bytes=mem.kv_cache_bytes,
                          kv_cache_tokens=mem.kv_cache_tokens)

    # -- latency ----------------------------------------------------------------------------
    def probe(self, endpoint, vkey: str) -> None:
        """Latency sweep on the server that was just evaluated; written atomically, so a crash redoes it whole."""
        import pandas as pd

        from ..probe.latency import run_probe

        spec = self.plan.probe
        with self.reporter.step(f"[{self.v.name}] latency probe (concurrency {spec.concurrency})",
                                total=len(spec.concurrency) + len(spec.rates)) as advance:
            res = run_probe(spec, endpoint, seed=self.plan.seed, on_step=lambda s: advance(1))
        path = self.ws / self.plan.probe_path(vkey)
        path.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(res.requests).to_parquet(path.with_suffix(".parquet"))
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(res.to_json()))
        tmp.replace(path)

    def grid_row(self, row, engine, endpoint=None) -> None:
        """One row's cells: on `endpoint` (the evaluation's server), else on a server of its own."""
        from ..probe.grid_run import run_row, save_row, serve_row

        probe = self.plan.cell_probe
        where = "" if endpoint else f"; its own server (log {engine.log_path})"
        with self.reporter.step(f"[{self.v.name}] grid {row.label} x concurrency {probe.concurrency}{where}",
                                total=len(probe.concurrency)) as advance:
            if endpoint is not None:
                data = run_row(row, probe, endpoint, engine, self.plan.seed, on_cell=lambda c: advance(1))
            else:
                data = serve_row(row, probe, engine, self.plan.seed, on_cell=lambda c: advance(1))
        save_row(row.path, data)

    def grid(self, ckpt: Path | None, rows: list) -> dict[str, Any] | None:
        """The rows the evaluation's server did not have, one engine start each (after that server has
        stopped); then the whole grid. A row whose engine fails is reported, not fatal."""
        from ..probe.grid import assemble
        from ..probe.grid_run import load_rows

        if not rows:
            return None
        errors: dict[str, str] = {}
        for row in rows:
            if row.path.exists():
                continue
            if row.on_server:  # it ran with the evaluation, unless that stopped early
                errors[row.label] = "not run: the evaluation's server stopped before it"
                continue
            engine = build_engine(row.spec.kind, self.v, ckpt, row.spec, self.plan.settings,
                                  self.logs / "grid" / metric_segment(row.label))
            try:
                with self.clock.leased("exclusive", busy=False):  # its own engine: the variant's is stopped
                    self.grid_row(row, engine)
            except EngineError as e:
                errors[row.label] = str(e).splitlines()[0]
                self.log(f"[{self.v.name}] grid row {row.label} has no cells: {errors[row.label]}")
        return assemble(self.plan.grid, self.plan.slo, load_rows(rows), errors)


@dataclass(frozen=True)
class _SuiteRun:
    """What a suite is given to run on one variant's engine (suites/base.py SuiteRun): the endpoint, this
    variant's records through the sink, the looks of its gates through the monitor."""

    endpoint: Any
    variant: str
    seed: int
    settings: Any
    timeout_s: float
    retry_backoff_s: float
    concurrency: int | None
    capacity: Capacity | None  # what the engine holds at once, read once it was up
    used: dict[str, int]  # the variant's facts' `concurrency`: per part, the requests in flight it ran with
    work: Path
    logs: Path
    vkey: str
    sink: RecordSink
    monitor: Monitor
    reporter: Reporter

    def done_ids(self, part: Part) -> set[str]:
        return self.sink.done_ids(self.vkey, part.key)

    def used_concurrency(self, part: Part, n: int) -> None:
        self.used[part.suite] = n

    def is_complete(self, part: Part) -> bool:
        return self.sink.is_complete(self.vkey, part.key)

    def put(self, part: Part, records: list[Record]) -> None:
        self.sink.put(self.vkey, part.key, self.variant, part.suite, records)

    def complete(self, part: Part, n_items: int) -> None:
        self.sink.mark_complete(self.vkey, part.key, n_items)

    def skip(self, part: Part) -> bool:
        return self.monitor.skip(part)

    def cuts(self, part: Part, ids, groups) -> list[list[str]] | None:
        return self.monitor.batches(part, ids, groups)

    def look(self, part: Part) -> bool:
        return self.monitor.look(part)

    def finished(self, part: Part) -> None:
        self.monitor.finished(part)

    def stopping(self) -> bool:
        return bool(self.monitor.failed) and self.monitor.policy is not None and self.monitor.policy.stop_variant_on_fail

    def step(self, description: str, total: int | None = None):
        return self.reporter.step(description, total=total)

    def log(self, message: str) -> None:
        self.reporter.log(message)


def made_here(plan: VariantPlan) -> bool:
    """Whether the variant's checkpoint is made by a quantizer (else it is the base, or one given as is)."""
    v = plan.variant
    # an external endpoint's checkpoint is only its tokenizer; any given checkpoint is served as is
    return v.method != "external" and v.checkpoint is None and v.method not in UNQUANTIZED


def make_checkpoint(plan: VariantPlan, workspace: Path, reporter: Reporter) -> tuple[Path | None, dict[str, Any]]:
    """The checkpoint the variant is served from (quantized into the machine's cache, unless it is there
    already), and what making it recorded: the recipe, and the seconds it took where it was made now."""
    v, facts = plan.variant, {}
    if not made_here(plan):
        given = v.method == "external" or v.checkpoint is not None
        return (v.checkpoint if given else plan.suites.base_checkpoint), facts
    base = plan.suites.base_checkpoint
    name = v.quantizer or DEFAULT_QUANTIZER[v.method]
    runtime = QUANTIZERS.get(name).runtime_of(plan.settings)  # each quantizer names the tool it runs in
    q = quantizer_for(v.method, name, runtime=runtime, engine=plan.engine, dtype=plan.dtype.quantize_dtype)
    out = plan.settings.variants / f"{base.name}-{v.method}-{q.cache_key(base, v)}"
    facts["recipe"] = q.spec(base, v)
    if isinstance(facts["recipe"].get("calibration_data"), dict):  # named in the record, keyed by its content
        facts["recipe"]["calibration_data"]["file"] = v.recipe.calibration.path.name
    if (out / "config.json").is_file():
        return out, facts
    log = workspace / plan.logs / f"quantize-{v.name}.log"
    t0 = time.monotonic()
    with reporter.step(f"[{v.name}] quantizing ({v.method}, {q.name}; log {log})"):
        ckpt = q.quantize(base, v, out, log)
    facts["quantize_seconds"] = round(time.monotonic() - t0, 1)
    return ckpt, facts


def grid_rows(plan: VariantPlan, checkpoint_hash: str | None, workspace: Path) -> list:
    """The variant's grid rows, each with the engine setting it needs and where its cells are kept."""
    from ..engines.spec import merged
    from ..probe.grid import GridRow
    from ..probe.grid import settings as grid_settings

    if plan.grid is None:
        return []
    cells = {k: x for k, x in plan.cell_probe.key().items() if k != "slo"}  # SLOs change no cell
    rows = []
    for setting in grid_settings(plan.grid.engine):
        # validated as the campaign's engine is, so the key reads the setting as the engine will
        served = merged(plan.engine, setting)
        key = variant_key(plan.variant, served, plan.settings, checkpoint_hash)
        row_spec = plan.engine.model_copy(update=setting)
        rows.append(GridRow(setting=setting, spec=row_spec, on_server=row_spec == plan.engine,
                            path=workspace / "grid" / f"{key_hash([key, cells])}.json"))
    return rows


def run_variant(plan: VariantPlan, workspace: Path, sink: RecordSink, reporter: Reporter,
                guard: Guard = unguarded, reference: Reference | Pending | None = None) -> VariantOutcome:
    """Make, serve and evaluate one variant; its faults are its outcome (status "error"), never raised.
    An interrupt (KeyboardInterrupt) stops its engines and goes on up: the driver records what finished.
    `reference`: the baseline's records, which sequential gates and stop_variant_on_fail look at (or a
    callable that waits for them, called at the first suite that needs them)."""
    r = _Run(plan, workspace, sink, reporter, guard, reference)
    v = plan.variant
    try:
        ckpt = r.checkpoint()
        chash = tree_hash(ckpt) if ckpt and not plan.external else None
        vkey = plan.key(chash)
        r.facts.update(key=vkey, checkpoint=str(ckpt) if ckpt else None, checkpoint_hash=chash,
                       weights_bytes=None if plan.external else _weights_bytes(ckpt))
        if plan.dtype is not None:  # an endpoint someone else runs serves in its own dtype
            r.facts.update(dtype=plan.dtype.dtype, dtype_reason=plan.dtype.reason)
        r.facts.update(kv_cache_dtype=kv_cache_dtype(plan.engine), simulated=plan.simulated)
        rows = r.grid_rows(chash)
        evaluated = r.todo(vkey, rows)
        if evaluated:
            # the driver puts it on the record before it starts: a run cut here leaves it as partial, with
            # the key under which `qeval finish` finds the suites it stored
            sink.begin(VariantOutcome(name=v.name, status="partial", measured=Measured(**r.facts),
                                      error="cut while being evaluated; run the same command again"))
            r.evaluate(ckpt, vkey, rows)
        else:
            reporter.log(f"[{v.name}] every suite already in the store: nothing to run")
        probe = plan.probe_path(vkey) if plan.probe is not None else None
        grid = r.grid(ckpt, rows)
        if evaluated:  # with the leases its grid rows waited for
            r.facts.update(r.clock.facts())
        measured = Measured(**r.facts, reused=r.reused, not_run=dict(r.monitor.not_run) if r.monitor else {})
        return VariantOutcome(name=v.name, status="ok", measured=measured, evaluated=evaluated, grid=grid,
                              probe_path=str(probe) if probe and (workspace / probe).exists() else None)
    except (EngineError, QuantizeError, MissingEnvError) as e:
        reporter.log(f"[{v.name}] NOT EVALUATED: {e}")
        return VariantOutcome(name=v.name, status="error", error=str(e), measured=Measured(**r.facts))
