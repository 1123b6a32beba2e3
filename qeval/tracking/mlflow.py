"""Log a run record to MLflow: a parent run per campaign, a child run per variant.

Reads the record and the files the publish stage exports beside it (the per-item tables, flips.parquet, the
report's), never the campaign's store. Uses an explicit MlflowClient (no global tracking state). An upsert keyed by the qeval run id (tag) and
the variant (run name): `qeval sync` can be run any number of times, and a resumed run updates what
its first part logged.
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from ..methods import scheme_params
from ..record.run import RunRecord, VariantResult, changes_text
from ..record.measurements import Grid, metric_segment
from ..verdict.decision import for_record as decisions
from ..verdict.recommend import for_record
from ..verdict.savings import savings
from .compare import compare_artifact, compare_prefix, compared, comparisons_of, shown_verdict
from .spec import default_tracking_uri  # noqa: F401  (where callers have always found it)

_BAD = re.compile(r"[^A-Za-z0-9_\-./ ]")
# per grid cell (grid/<row>/c_<concurrency>/<figure>): the client's view, the engine's memory, the server's
CELL_METRICS = ("output_throughput", "request_throughput", "ttft_p95_ms", "ttft_p99_ms", "tpot_p95_ms", "tpot_p99_ms",
                "e2e_p95_ms", "errors", "requests", "memory_rss_bytes", "memory_gpu_bytes", "memory_kv_cache_bytes",
                "server_queue_mean_ms", "server_ttft_mean_ms", "server_running_max", "server_waiting_max",
                "server_kv_cache_usage_max")


def items_file(run_dir: Path, name: str) -> Path:
    """Where the publish stage exports a variant's per-item table (pipeline/publish.py export_items)."""
    return run_dir / f"items-{name}.parquet"


def metric_name(*parts: str) -> str:
    return "/".join(_BAD.sub("_", p) for p in parts)


def gate_tags(record: RunRecord, name: str) -> dict[str, str]:
    """Each gate's finding as a tag of the variant's run (finding.<suite>/<metric>: shown_worse, not_shown_within,
    ...): the gate/ metric says pass or not, the tag what the data showed; a gate of an older record has none."""
    return {"finding." + metric_name(g.suite, g.metric): g.finding for g in record.gates
            if g.variant == name and g.finding is not None}


def variant_metrics(record: RunRecord, name: str) -> dict[str, float]:
    m: dict[str, float] = {}
    v = next(x for x in record.variants if x.name == name)
    for s in v.suites:
        for metric, value in s.means.items():
            m[metric_name("quality", s.suite, metric)] = value
    for c in comparisons_of(record, name):
        for label, value in (("delta", c.delta), ("ci_low", c.ci_low), ("ci_high", c.ci_high), ("p", c.p_value),
                             ("p_holm", c.p_adjusted), ("flip_rate", c.flip_rate)):
            if value is not None:
                m[metric_name(label, c.suite, c.metric)] = value
    for n in (record.noise_floor.within if record.noise_floor is not None else []):
        if n.variant == name:  # disagrees with the baseline no more than the baseline with itself
            m[metric_name("within_noise_floor", n.suite, n.metric)] = 1.0
    for g in (g for g in record.gates if g.variant == name):
        m[metric_name("gate", g.suite, g.metric)] = 1.0 if g.verdict == "PASS" else 0.0
        if g.sequential is not None:  # where the gate stopped, e.g. items_used/custom/caps/contains
            for label, value in (("items_used", g.items_used), ("items_planned", g.items_planned)):
                if value is not None:
                    m[metric_name(label, g.suite, g.metric)] = float(value)
    saved = next((s for s in savings(record).variants if s.variant == name), None)
    if saved is not None:  # over the variant's sequential and skipped suites
        m |= {"sequential/items_evaluated": float(saved.evaluated), "sequential/items_planned": float(saved.planned),
              "sequential/items_saved": float(saved.saved)}
        if saved.seconds_saved is not None:
            m["sequential/eval_s_saved_estimate"] = saved.seconds_saved
    for label, value in (("memory/weights_bytes", v.weights_bytes), ("memory/engine_rss_bytes", v.engine_rss_bytes),
                         ("memory/engine_gpu_bytes", v.engine_gpu_bytes), ("memory/gpus", v.gpus),
                         ("memory/model_bytes", v.model_memory_bytes),
                         ("memory/kv_cache_bytes", v.kv_cache_bytes), ("memory/kv_cache_tokens", v.kv_cache_tokens),
                         ("time/startup_s", v.startup_seconds), ("time/eval_s", v.eval_seconds),
                         ("time/idle_s", v.idle_seconds), ("time/lease_wait_s", v.lease_wait_seconds),
                         ("time/quantize_s", v.quantize_seconds)):
        if value is not None:
            m[label] = float(value)
    for suite, figures in v.distribution.items():
        for k, value in figures.model_dump().items():
            if isinstance(value, (int, float)) and value == value:
                m[metric_name("dist", suite, k)] = float(value)
    for k, value in v.perf().items():
        m[metric_name("perf", k)] = value
    if v.probe and v.probe.saturation_concurrency is not None:
        m["perf/saturation_concurrency"] = float(v.probe.saturation_concurrency)
    return m | grid_metrics(v.grid)


def compare_metrics(record: RunRecord, name: str, baseline_run_id: str) -> dict[str, float]:
    """MLflow's comparison keys (tracking/compare.py): compare/<baseline's run id[:8]>/<suite>/<metric>/<stat>,
    e.g. compare/1a2b3c4d/lm_eval/oe_arc_easy/acc/diff, for each of the variant's comparisons."""
    prefix = compare_prefix(baseline_run_id)
    return {metric_name(prefix, c.suite, c.metric, stat): value for c, figures in compared(record, name)
            for stat, value in figures.items()}


def variant_params(v: VariantResult) -> dict[str, Any]:
    """What made and served the variant, as MLflow params: its method and scheme, recipe and checkpoint, and
    (evaluated) its engine and the requests in flight each suite ran with (concurrency.<suite>, a suite set to
    `auto` as sized from the engine) beside the engine's max_num_seqs."""
    out = {"method": v.method, **scheme_params(v.method, v.recipe, v.dtype),
           **({"dtype": v.dtype} if v.dtype else {}),
           **({"kv_cache_dtype": v.kv_cache_dtype} if v.kv_cache_dtype else {}),
           **{f"recipe.{k}": v2 for k, v2 in v.shown_recipe().items()},  # a param: 6,000 characters at most
           **{f"checkpoint.{k}": v2 for k, v2 in v.scheme.items()}}  # what its config declares
    if v.status == "ok":  # a variant not (yet) evaluated has no engine or checkpoint to name
        out |= {"engine": v.engine, "engine_version": v.engine_version,
                "checkpoint_hash": v.checkpoint_hash or ""}
    out |= {f"concurrency.{metric_name(suite)}": n for suite, n in v.concurrency.items()}
    if v.max_num_seqs is not None:
        out["max_num_seqs"] = v.max_num_seqs
    return out


def grid_metrics(grid: Grid | Mapping[str, Any] | None) -> dict[str, float]:
    """Per cell, grid/<row>/c_<concurrency>/<figure> (e.g. grid/mns_8/c_4/output_throughput), and the
    best cell under the SLOs as grid/best/* (its throughput, concurrency and engine settings)."""
    if not grid:
        return {}
    g = Grid.model_validate(grid)  # a stored dict checked, a record's model as it is
    m: dict[str, float] = {}
    for c in g.cells:
        f = c.figures()
        for k in CELL_METRICS:
            if f.get(k) is not None and f[k] == f[k]:
                m[metric_name("grid", metric_segment(c.row), f"c_{c.concurrency}", k)] = f[k]
    best = g.best
    if best:
        m["grid/best/output_throughput"] = float(best.output_throughput)
        m["grid/best/concurrency"] = float(best.concurrency)
        setting = next(c.setting for c in g.cells if c.row == best.row)
        m |= {metric_name("grid", "best", k): float(val) for k, val in setting.items()}
    return m


def probe_history(record: RunRecord, name: str) -> list[tuple[str, float, int]]:
    """Per-step latency figures with step = the concurrency, so the MLflow UI charts them against load."""
    v = next(x for x in record.variants if x.name == name)
    out = []
    for s in (v.probe.steps if v.probe else []):
        if s.kind != "concurrency":
            continue
        step = int(s.load)
        out += [("latency/output_throughput", s.output_throughput, step),
                ("latency/request_throughput", s.request_throughput, step),
                ("latency/client_cpu_share", s.client_cpu_share, step)]
        if s.goodput is not None:
            out.append(("latency/goodput", s.goodput, step))
        for fam in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            for stat in ("p50", "p95", "p99"):
                val = getattr(getattr(s, fam), stat)
                if val == val:  # NaN (no successful request) is not logged
                    out.append((f"latency/{fam.removesuffix('_ms')}_{stat}_ms", val, step))
        # the engine's own view of the step (its /metrics), e.g. latency/server_queue_mean_ms
        out += [(f"latency/server_{k}", float(val), step) for k, val in s.server.items() if val == val]
    return out


def _log_grid(client, run_id: str, v, run_dir: Path, tmp: Path) -> None:
    """The grid as JSON (as in the run record), as a table of cells (Parquet), and its heat map."""
    import json

    (tmp / f"grid-{v.name}.json").write_text(json.dumps(v.grid.model_dump(), indent=1))  # NaN as NaN, as before
    pd.DataFrame(v.grid.table()).to_parquet(tmp / f"grid-{v.name}.parquet")
    for f in (tmp / f"grid-{v.name}.json", tmp / f"grid-{v.name}.parquet", run_dir / f"grid-{v.name}.png"):
        if f.exists():
            client.log_artifact(run_id, str(f), "grid")


def log_record(record: RunRecord, run_dir: Path, tracking_uri: str, experiment: str | None = None,
               register_as: str | None = None) -> dict[str, str]:
    """Bring MLflow up to the record: one parent run per qeval run id, one child per variant, found again
    by tag and run name, so a re-sync adds nothing and a resumed run (more variants evaluated, new
    multiplicity-adjusted p-values, new verdicts) updates the runs it logged before. With `register_as`,
    each variant also becomes a model version under that registered model."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp_name = experiment or record.campaign
    exp = client.get_experiment_by_name(exp_name)
    if exp is None:
        artifacts = (run_dir.parent / "mlartifacts").resolve()
        exp_id = client.create_experiment(exp_name, artifact_location=artifacts.as_uri())
    else:
        exp_id = exp.experiment_id
    found = client.search_runs([exp_id], filter_string=f"tags.`qeval.run_id` = '{record.run_id}' "
                                                         f"and tags.`qeval.role` = 'campaign'")
    kids: dict[str, object] = {}
    if found:  # logged before (perhaps cut short, or before a resume finished more variants): update it
        parent = found[0]
        kids = {k.info.run_name: k for k in client.search_runs(
            [exp_id], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")}
    else:
        parent = client.create_run(exp_id, run_name=record.campaign)
    pid = parent.info.run_id
    params = {"baseline": record.variants[0].name if record.variants else "", "config_hash": record.config_hash,
              "multiplicity": record.multiplicity, **{f"env.{k}": v for k, v in record.environment.items()}}
    tags = {"qeval.run_id": record.run_id, "qeval.role": "campaign", "qeval.verdict": record.verdict,
            "qeval.config_hash": record.config_hash, "qeval.schema_version": str(record.schema_version),
            "qeval.recommendation": for_record(record).text()[:5000],  # MLflow caps a tag at 5,000 characters
            **{f"verdict.{n}": v for n, v in record.verdicts.items()}}
    floor = {metric_name("noise_floor", f.suite, f.metric): f.value
             for f in (record.noise_floor.figures if record.noise_floor is not None else [])}
    _upsert(client, parent, params, tags, floor, [])
    now = int(time.time() * 1000)
    children: dict[str, str] = {}
    flips_path = run_dir / "flips.parquet"
    flips = pd.read_parquet(flips_path) if flips_path.exists() else None
    # every variant's run first: a variant's comparison keys name its baseline's run id
    runs = {v.name: kids.get(v.name) or client.create_run(exp_id, run_name=v.name, tags={"mlflow.parentRunId": pid})
            for v in record.variants}
    base = next((runs[v.name].info.run_id for v in record.variants if v.role == "baseline"), None)
    decided = {d.variant: d for d in decisions(record)}
    with tempfile.TemporaryDirectory() as tmp:
        for v in record.variants:
            child = runs[v.name]
            cid = child.info.run_id
            children[v.name] = cid
            vparams = variant_params(v)
            vtags = {"qeval.run_id": record.run_id, "qeval.role": v.role, "qeval.status": v.status,
                     "qeval.verdict": shown_verdict(record, v),
                     **({"qeval.simulated": v.simulated} if v.simulated else {}),  # why: its perf figures are not its own
                     # what it changes against the baseline, which decides the performance rules that gate it
                     **({"qeval.changes": ",".join(v.changes), "qeval.differs": changes_text(v.changes, v.serving_diff)}
                        if v.changes else {}),
                     # a KV-cache or serving variant: may it be turned on (the outcome, and the line that says why)
                     **({"qeval.decision": decided[v.name].outcome, "qeval.decision_text": decided[v.name].text()[:5000]}
                        if v.name in decided else {}),
                     **gate_tags(record, v.name)}
            figures = variant_metrics(record, v.name) | (compare_metrics(record, v.name, base) if base else {})
            _upsert(client, child, vparams, vtags, figures, probe_history(record, v.name), now)
            items = v.status == "ok" and items_file(run_dir, v.name).exists()
            if items:
                client.log_artifact(cid, str(items_file(run_dir, v.name)), "items")
            if base and v.role != "baseline" and comparisons_of(record, v.name):  # overwritten: it follows the record
                client.log_dict(cid, compare_artifact(record, v.name, base, cid,
                                                      f"items/{items_file(run_dir, v.name).name}" if items else None),
                                f"{compare_prefix(base)}.json")
            # MLflow's table view (the UI shows it as a table); log_table appends to an existing file: once a run
            if v.flips and flips is not None and "flips.json" not in {a.path for a in client.list_artifacts(cid)}:
                mine = flips[flips.variant == v.name].drop(columns=["variant"])
                client.log_table(cid, mine.reset_index(drop=True), "flips.json")
            if v.probe_requests and Path(v.probe_requests).exists():
                client.log_artifact(cid, v.probe_requests, "latency")
            if v.grid:
                _log_grid(client, cid, v, run_dir, Path(tmp))
            client.set_terminated(cid, "FINISHED" if v.status == "ok" else "FAILED")
    for f in ("run.json", "report.md", "report.html", "summary.md", "junit.xml", "flips.parquet"):  # overwritten
        if (run_dir / f).exists():
            client.log_artifact(pid, str(run_dir / f))
    with tempfile.TemporaryDirectory() as tmp:  # the report's figures as files, for the UI's artifact view
        from ..report import plots

        for name, fn in (("forest", plots.forest), ("tradeoff", plots.tradeoff), ("latency", plots.latency),
                         ("needle", plots.needle)):
            png = fn(record)
            if png:
                (Path(tmp) / f"{name}.png").write_bytes(png)
                client.log_artifact(pid, str(Path(tmp) / f"{name}.png"), "plots")
    client.set_terminated(pid, "FINISHED")
    out = {"tracking_uri": tracking_uri, "experiment_id": exp_id, "parent_run_id": pid}
    if register_as:  # after the run is complete: a registry fault is retried by `qeval sync`, runs not duplicated
        out["registered_model"] = _register(client, record, children, register_as)
    return out


def _upsert(client, run, params: dict, tags: dict[str, str], metrics: dict[str, float],
            history: list[tuple[str, float, int]], now: int = 0) -> None:
    """Log what the run lacks or holds differently. MLflow params are immutable: a param already logged
    with another value (e.g. the environment of a resumed run) is kept, and named in a tag instead."""
    from mlflow.entities import Metric, Param, RunTag

    have_p, have_t, have_m = run.data.params, run.data.tags, run.data.metrics
    new_p = [Param(k, str(v)[:500]) for k, v in params.items() if k not in have_p]
    differ = sorted(k for k, v in params.items() if k in have_p and have_p[k] != str(v)[:500])
    if differ:
        tags = tags | {"qeval.params_not_updated": ", ".join(differ)[:5000]}
    new_t = [RunTag(k, v) for k, v in tags.items() if have_t.get(k) != v]
    new_m = [Metric(k, float(v), now, 0) for k, v in metrics.items() if have_m.get(k) != float(v)]
    # a figure per load step: logged once (steps of a finished probe do not change; re-logging would
    # add a second point at each step)
    new_m += [Metric(k, float(v), now, step) for k, v, step in history if k not in have_m]
    client.log_batch(run.info.run_id, params=new_p, tags=new_t)
    for i in range(0, len(new_m), 1000):  # MLflow takes at most 1,000 metrics a batch (a grid has many)
        client.log_batch(run.info.run_id, metrics=new_m[i:i + 1000])


def _register(client, record: RunRecord, children: dict[str, str], model_name: str) -> str:
    from .registry import register_variants

    versions = register_variants(client, record, children, model_name)
    return model_name + (": " + ", ".join(f"{k} v{n}" for k, n in versions.items()) if versions else "")
