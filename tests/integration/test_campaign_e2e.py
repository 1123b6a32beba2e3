"""A whole campaign on the real model, killed half-way and resumed: nothing lost, nothing duplicated."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import pytest

from qeval.record.run import RunRecord

from ..conftest import campaign_file, descendants, sees
from .conftest import ROOT, count_records, qeval, run_qeval, subprocess_env, wait_exit, wait_for

pytestmark = pytest.mark.slow

EXPECTED = {"custom/capitals": 53, "custom/arithmetic": 40, "lm_eval/oe_arc_easy": 30}
GATES = {"rules": [{"match": "*", "margin": 0.15, "alpha": 0.05}]}  # wide enough for these small suites' power


def _config(tmp_path: Path, base_model: Path, endpoint) -> Path:
    return campaign_file(
        tmp_path, name="e2e", file="e2e.yaml", model={"path": base_model}, output_dir=tmp_path / "runs",
        baseline={"name": "bf16", "method": "bf16"},
        variants=[
            # the smallest calibration that still runs SmoothQuant + GPTQ for real (the demo keeps the full one)
            {"name": "int8", "method": "int8", "recipe": {"calibration_samples": 8, "calibration_seq_len": 64}},
            # the bf16 server the tests share, already running: same model, so it must pair exactly and pass
            {"name": "same", "method": "external", "endpoint": endpoint.base_url, "served_model": endpoint.model,
             "checkpoint": base_model}],
        engine={"enforce_eager": True, "kv_cache_gib": 1},
        # one request in flight at a time: vLLM's answers then do not depend on what else shared the batch, so two
        # servers of the same model agree exactly (under load, concurrent batches flipped an item)
        suites=[{"kind": "custom", "path": ROOT / "suites/custom/capitals.yaml", "concurrency": 1},
                {"kind": "custom", "path": ROOT / "suites/custom/arithmetic.yaml", "concurrency": 1},
                {"kind": "lm_eval", "include_path": ROOT / "suites/lmeval", "tasks": ["oe_arc_easy"], "limit": 30,
                 "num_concurrent": 1}],
        gates=GATES,
        mlflow={"server": True})  # log through a real `mlflow server` on loopback


def test_campaign_killed_and_resumed(spawn, server, base_model, settings, tmp_path):
    _, endpoint = server
    cfg = _config(tmp_path, base_model, endpoint)
    db = tmp_path / "runs" / "e2e" / "results.sqlite"

    # 1. run until the int8 variant is part-way through its first suite, then SIGKILL: no clean-up at all
    first = qeval(spawn, "run", str(cfg), log=tmp_path / "first.log")
    wait_for(lambda: count_records(db, "int8") >= 10, first, [tmp_path / "first.log", tmp_path / "runs"],
             "int8's first 10 records")
    servers = sees(lambda: descendants(first.pid), "vllm.entrypoints")  # int8's server, seen running
    first.send_signal(signal.SIGKILL)
    first.wait()
    # the server dies with its parent (parent-death signal), even after a SIGKILL
    servers.assert_gone(timeout=60)
    partial = count_records(db, "int8")
    assert 10 <= partial < sum(EXPECTED.values())

    # 1b. `qeval finish` gives a verdict from what is stored, serving nothing: the unfinished variants
    # are NOT_EVALUATED (exit 3, never PASS), and the run stays open for the resume below; int8, cut while
    # being evaluated, is on the record as partial, and only the suites it finished are compared
    fin = run_qeval(spawn, "finish", str(cfg), "--no-mlflow")
    assert fin.returncode == 3, fin.stdout[-2000:] + fin.stderr[-2000:]
    rec = RunRecord.load(tmp_path / "runs" / "e2e" / "run.json")
    assert rec.finished_at is None and rec.verdict == "NOT_EVALUATED"
    assert {v.name: v.status for v in rec.variants} == {"bf16": "ok", "int8": "partial", "same": "skipped"}
    assert next(v for v in rec.variants if v.name == "int8").error.startswith("cut while being evaluated")
    assert all(c.n_paired == EXPECTED[c.suite] for c in rec.comparisons if c.variant == "int8")
    assert rec.verdicts == {"int8": "NOT_EVALUATED", "same": "NOT_EVALUATED"}
    assert count_records(db, "int8") == partial  # nothing served, nothing written to the store

    # 2. the same command again resumes: the baseline is not re-run, int8 finishes
    second = qeval(spawn, "run", str(cfg), log=tmp_path / "second.log")
    rc = wait_exit(second, [tmp_path / "second.log", tmp_path / "runs"])
    log = (tmp_path / "second.log").read_text()
    assert rc in (0, 1), log[-3000:]
    assert "resuming run" in log and "[bf16] every suite already in the store" in log
    assert "MLflow server up at http://127.0.0.1:" in log

    # 3. every item once, per variant and suite
    con = sqlite3.connect(db)
    rows = con.execute("SELECT variant, suite, COUNT(*), COUNT(DISTINCT item_id) FROM records GROUP BY 1, 2").fetchall()
    got = {(v, s): (n, d) for v, s, n, d in rows}
    for v in ("bf16", "int8", "same"):
        for s, n in EXPECTED.items():
            assert got[(v, s)] == (n, n), (v, s, got.get((v, s)))

    # 4. the record, the verdicts and the statistics
    rec = RunRecord.load(tmp_path / "runs" / "e2e" / "run.json")
    assert rec.finished_at and rec.verdict in ("PASS", "FAIL")
    same = [c for c in rec.comparisons if c.variant == "same"]
    # the same model: the interval (a score interval, never degenerate) holds 0, and nothing changes, except on
    # an AMX CPU, where two bf16 servers of one checkpoint differ even one request at a time: 15 of 123 records
    # and 1 of 30 lm-eval answers in a cold run, 38 of 201 in another
    flips = 0 if settings.cpu.kernels() != "amx" else 2
    assert same and all(c.ci_low <= 0 <= c.ci_high for c in same), same
    assert all(c.binary and (c.flips_base_only or 0) + (c.flips_variant_only or 0) <= flips for c in same), same
    assert rec.verdicts["same"] == "PASS"
    int8 = {(c.suite, c.metric): c for c in rec.comparisons if c.variant == "int8"}
    assert int8[("custom/capitals", "contains")].n_paired == 53
    assert rec.verdicts["int8"] in ("PASS", "FAIL")
    assert {v.name: v.status for v in rec.variants} == {"bf16": "ok", "int8": "ok", "same": "ok"}
    # bf16 was served by the first attempt only: what its engine measured then is kept
    bf16 = next(v for v in rec.variants if v.name == "bf16")
    assert bf16.startup_seconds and bf16.engine_rss_bytes and bf16.engine == "vllm", bf16
    assert next(v for v in rec.variants if v.name == "int8").weights_bytes < \
        next(v for v in rec.variants if v.name == "bf16").weights_bytes

    # 4b. `qeval compare` over the lm-eval output this campaign left reaches the campaign's own figures
    _compare_reaches_the_campaigns_figures(spawn, tmp_path, rec)

    # 5. MLflow has the parent run, one child per variant, and the per-item tables
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=rec.tracking["tracking_uri"])
    parent = client.get_run(rec.tracking["parent_run_id"])
    assert parent.data.tags["qeval.verdict"] == rec.verdict
    children = client.search_runs([rec.tracking["experiment_id"]],
                                  filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert sorted(c.info.run_name for c in children) == ["bf16", "int8", "same"]
    int8_run = next(c for c in children if c.info.run_name == "int8")
    assert "delta/custom/capitals/contains" in int8_run.data.metrics
    assert [a.path for a in client.list_artifacts(int8_run.info.run_id, "items")] == ["items/items-int8.parquet"]
    assert {k: int8_run.data.params[k] for k in ("method", "scheme", "weight_bits", "activation_bits")} == \
        {"method": "int8", "scheme": "W8A8-INT8", "weight_bits": "8", "activation_bits": "8"}
    top = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"run.json", "report.html", "report.md", "junit.xml", "plots"} <= top, top
    assert "plots/forest.png" in {a.path for a in client.list_artifacts(parent.info.run_id, "plots")}

    # 6. the report leads with the verdict
    report = (tmp_path / "runs" / "e2e" / "report.md").read_text()
    assert f"**Overall verdict: {rec.verdict}**" in report and "| int8 | custom/capitals / contains |" in report
    json.loads((tmp_path / "runs" / "e2e" / "run.json").read_text())  # well-formed

    # 7. MLflow down: the campaign still finishes (from the store, no server needed) and keeps its record;
    #    `qeval sync` logs it later, and a second sync adds nothing
    down = run_qeval(spawn, "run", str(cfg), env=subprocess_env(MLFLOW_TRACKING_URI="http://127.0.0.1:9",
                                                                MLFLOW_HTTP_REQUEST_MAX_RETRIES="0",
                                                                MLFLOW_HTTP_REQUEST_TIMEOUT="5"))
    assert down.returncode in (0, 1), down.stderr[-2000:]
    assert "MLflow logging failed" in down.stderr and "qeval sync" in down.stderr
    kept = RunRecord.load(tmp_path / "runs" / "e2e" / "run.json")
    assert "error" in kept.tracking and kept.run_id != rec.run_id
    from qeval.tracking.server import MlflowServer

    with MlflowServer(tmp_path / "later") as url:  # a real tracking server, over HTTP
        ids = []
        for _ in range(2):
            s = run_qeval(spawn, "sync", str(tmp_path / "runs" / "e2e"), "--tracking-uri", url)
            assert s.returncode == 0, s.stderr
            ids.append(RunRecord.load(tmp_path / "runs" / "e2e" / "run.json").tracking["parent_run_id"])
        assert ids[0] == ids[1]
        remote = MlflowClient(tracking_uri=url)
        exp = remote.get_experiment_by_name("e2e")
        parents = remote.search_runs([exp.experiment_id], filter_string="tags.`qeval.role` = 'campaign'")
        assert len(parents) == 1 and parents[0].data.tags["qeval.run_id"] == kept.run_id
        kids = remote.search_runs([exp.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{ids[0]}'")
        assert sorted(k.info.run_name for k in kids) == ["bf16", "int8", "same"]
        assert any(k.data.metrics.get("perf/weights_bytes") for k in kids)

    # 8. the notebook loads the campaign from MLflow and redraws the trade-off
    import os

    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "notebooks" / "explore_campaign.ipynb", as_version=4)
    figure = tmp_path / "tradeoff.png"
    env = {"QEVAL_TRACKING_URI": rec.tracking["tracking_uri"], "QEVAL_EXPERIMENT": "e2e",
           "QEVAL_RUN_ID": rec.tracking["parent_run_id"], "QEVAL_FIGURE": str(figure)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    assert figure.stat().st_size > 1000
    assert nb.cells[-1].outputs[-1]["data"]["text/plain"] == "3"  # three variants in the table


def _compare_reaches_the_campaigns_figures(spawn, tmp_path: Path, rec: RunRecord) -> None:
    """The acceptance check of bringing one's own results: lm-eval's `--log_samples` output for bf16 and int8, as
    this campaign's lm-eval suite wrote it, compared by `qeval compare` under the campaign's (fixed-n) policy, gives
    the campaign's n, means, delta, interval, MDE, p-value and verdict for the task. (`p_adjusted` differs: Holm
    runs over all of a run's comparisons, and the campaign has more.)"""
    def newest(variant: str) -> Path:  # a resumed lm-eval call would leave a second run beside the first: the last
        found = sorted((tmp_path / "runs" / "e2e" / "work" / variant).glob("*/lmeval-out/*/results_*.json"),
                       key=lambda p: p.stat().st_mtime)
        assert found, f"no lm-eval results for {variant}"
        return found[-1]

    policy = tmp_path / "gates.yaml"
    policy.write_text(json.dumps(GATES))  # the campaign's
    out = tmp_path / "runs" / "compared"
    p = run_qeval(spawn, "compare", "--baseline", f"bf16=lm_eval:{newest('bf16')}",
                  "--variant", f"int8=lm_eval:{newest('int8')}", "--policy", str(policy), "--out", str(out),
                  "--no-mlflow")
    assert p.returncode in (0, 1), p.stdout[-2000:] + p.stderr[-2000:]
    got = RunRecord.load(out / "run.json")
    key = ("int8", "lm_eval/oe_arc_easy", "acc")
    [c] = [x for x in got.comparisons if (x.variant, x.suite, x.metric) == key]
    [want] = [x for x in rec.comparisons if (x.variant, x.suite, x.metric) == key]
    fields = ("n_paired", "unpaired_base", "unpaired_variant", "base_mean", "variant_mean", "delta", "ci_low",
              "ci_high", "mde", "p_value", "binary", "higher_is_better", "interval_method", "flips_base_only",
              "flips_variant_only")
    assert {f: getattr(c, f) for f in fields} == {f: getattr(want, f) for f in fields}
    [g] = [x for x in got.gates if (x.variant, x.suite, x.metric) == key]
    [w] = [x for x in rec.gates if (x.variant, x.suite, x.metric) == key]
    assert (g.verdict, g.finding, g.lower_bound, g.upper_bound, g.margin) == \
        (w.verdict, w.finding, w.lower_bound, w.upper_bound, w.margin)
    assert p.returncode == (0 if g.verdict == "PASS" else 1)
