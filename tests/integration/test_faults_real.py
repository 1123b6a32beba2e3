"""Faults for real: the engine is killed mid-suite; a variant whose engine cannot start."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from qeval.engines.process import is_alive
from qeval.engines.watchdog import FAILURES, HEALTH_TIMEOUT_S, INTERVAL_S
from qeval.record.run import RunRecord
from qeval.settings import Settings

from ..conftest import campaign_file
from .conftest import ROOT, count_records, qeval, run_qeval, wait_exit, wait_for

pytestmark = pytest.mark.slow


def _run_until_records(spawn, cfg: Path, db: Path, log: Path, n: int = 3) -> tuple[subprocess.Popen, psutil.Process]:
    """`qeval run` in the background until the baseline has n records; returns it and its one vLLM server."""
    cli = qeval(spawn, "run", str(cfg), log=log)
    wait_for(lambda: count_records(db, "bf16") >= n, cli, [log, db.parent], f"{n} baseline records")
    servers = [p for p in psutil.Process(cli.pid).children() if "vllm" in " ".join(p.cmdline())]
    assert len(servers) == 1
    return cli, servers[0]


def test_engine_killed_mid_suite_is_restarted_and_resumed(spawn, base_model, tmp_path):
    bad = tmp_path / "broken-ckpt"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    cfg = campaign_file(
        tmp_path, name="faults", model={"path": base_model}, output_dir=tmp_path / "runs",
        baseline={"name": "bf16", "method": "bf16"},
        variants=[{"name": "broken", "method": "checkpoint", "checkpoint": bad},  # cannot start: reported, never PASS
                  {"name": "same", "method": "checkpoint", "checkpoint": base_model}],
        engine={"enforce_eager": True, "kv_cache_gib": 1, "max_restarts": 2},
        suites=[{"kind": "logprobs", "name": "pydoc", "chunks": 32, "top_k": 5},
                {"kind": "custom", "path": ROOT / "suites/custom/capitals.yaml"}],
        gates={"rules": [{"match": "*", "margin": 0.15}]}, mlflow={"enabled": False})
    db = tmp_path / "runs" / "faults" / "results.sqlite"
    log = tmp_path / "cli.log"
    cli, server = _run_until_records(spawn, cfg, db, log)
    for p in [server, *server.children(recursive=True)]:  # kill the engine (not qeval) mid-suite
        p.kill()
    rc = wait_exit(cli, [log, db.parent])
    text = log.read_text()
    assert rc == 3, text[-3000:]  # a variant was not evaluated: infrastructure, not a pass
    assert "engine failed" in text and "restart 1 of 2" in text
    rec = RunRecord.load(tmp_path / "runs" / "faults" / "run.json")
    by_name = {v.name: v for v in rec.variants}
    assert by_name["bf16"].restarts == 1 and by_name["bf16"].status == "ok"
    assert by_name["broken"].status == "error" and "variant 'broken'" in by_name["broken"].error
    assert rec.verdicts["broken"] == "NOT_EVALUATED" and rec.verdict == "NOT_EVALUATED"
    assert rec.verdicts["same"] == "PASS"
    con = sqlite3.connect(db)
    rows = dict(con.execute("SELECT suite, COUNT(*) FROM records WHERE variant='bf16' GROUP BY suite").fetchall())
    assert rows == {"logprobs/pydoc": 32, "custom/capitals": 53}  # every item once, none lost


def test_time_budget_leaves_variants_not_evaluated_and_resumable(spawn, server, base_model, tmp_path):
    """`--max-minutes`: no variant starts after the budget; the rest are NOT_EVALUATED (exit 3), the
    run stays open, and the same command without the budget finishes it."""
    _, endpoint = server
    served = {"method": "external", "endpoint": endpoint.base_url, "served_model": endpoint.model,
              "checkpoint": base_model}
    cfg = campaign_file(
        tmp_path, name="budget", model={"path": base_model}, output_dir=tmp_path / "runs",
        baseline={"name": "bf16", **served}, variants=[{"name": "same", **served}],
        suites=[{"kind": "custom", "path": ROOT / "suites/custom/capitals.yaml"}],
        gates={"rules": [{"match": "*", "margin": 0.15}]},
        mlflow={"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"})
    first = run_qeval(spawn, "run", str(cfg), "--max-minutes", "0")
    assert first.returncode == 3, first.stdout[-2000:] + first.stderr[-2000:]
    rec = RunRecord.load(tmp_path / "runs" / "budget" / "run.json")
    assert rec.finished_at is None and rec.verdicts == {"same": "NOT_EVALUATED"}
    assert {v.name: v.status for v in rec.variants} == {"bf16": "ok", "same": "skipped"}
    second = run_qeval(spawn, "run", str(cfg))
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert "resuming run" in second.stderr and "[bf16] every suite already in the store" in second.stderr
    rec = RunRecord.load(tmp_path / "runs" / "budget" / "run.json")
    assert rec.finished_at and rec.verdicts == {"same": "PASS"}
    # MLflow logged the first part (NOT_EVALUATED); the resumed run updated those same runs
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = {r.info.run_name: r for r in client.search_runs([rec.tracking["experiment_id"]])}
    assert sorted(runs) == ["bf16", "budget", "same"]  # one parent, one child per variant: none added
    same = runs["same"]
    assert (same.info.status, same.data.tags["qeval.verdict"], runs["budget"].data.tags["qeval.verdict"]) == \
        ("FINISHED", "PASS", "PASS")
    assert "delta/custom/capitals/contains" in same.data.metrics and "engine" in same.data.params  # ok-only


def test_modelopt_fp8_is_made_here_and_refused_by_vllm_cpu_with_its_cause(spawn, server, base_model, tmp_path):
    """NVIDIA Model Optimizer makes an FP8 checkpoint on this CPU for real; vllm-cpu recognizes it
    (quant_method modelopt) but has no FP8 kernel here: the variant is NOT_EVALUATED, the error names
    it and quotes the engine log's root cause, and the rest of the campaign still runs."""
    _, endpoint = server
    cfg = campaign_file(
        tmp_path, name="modelopt", model={"path": base_model}, output_dir=tmp_path / "runs",
        baseline={"name": "bf16", "method": "external", "endpoint": endpoint.base_url,
                  "served_model": endpoint.model, "checkpoint": base_model},
        variants=[{"name": "mo-fp8", "method": "fp8", "quantizer": "modelopt", "recipe": {"calibration_samples": 8}}],
        engine={"enforce_eager": True, "kv_cache_gib": 1, "max_restarts": 0},
        suites=[{"kind": "custom", "path": ROOT / "suites/custom/capitals.yaml"}], mlflow={"enabled": False})
    settings = Settings.from_env()
    assert settings.modelopt.exists(), "built by `qeval setup` (make setup)"
    out = run_qeval(spawn, "run", str(cfg))
    assert out.returncode == 3, out.stdout[-3000:] + out.stderr[-3000:]
    rec = RunRecord.load(tmp_path / "runs" / "modelopt" / "run.json")
    mo = next(v for v in rec.variants if v.name == "mo-fp8")
    assert mo.status == "error" and rec.verdicts["mo-fp8"] == "NOT_EVALUATED"
    # the root cause, quoted from the log: no FP8 kernel; on an AVX2-only CPU, where qeval serves float32, vLLM
    # refuses the dtype first (seen under QEVAL_EMULATE_CPU=avx2)
    cause = ("float32 is not supported for quantization method modelopt" if settings.cpu.kernels() == "avx2"
             else "static_scaled_fp8_quant")
    assert "mo-fp8" in mo.error and cause in mo.error, mo.error
    ckpt = json.loads((Path(mo.checkpoint) / "hf_quant_config.json").read_text())
    assert ckpt["quantization"]["quant_algo"] == "FP8" and ckpt["producer"]["name"] == "modelopt"
    assert mo.weights_bytes < 0.7 * (base_model / "model.safetensors").stat().st_size  # FP8 linears, bf16 embeddings


def test_engine_that_stops_answering_is_detected_restarted_and_resumed(spawn, server, base_model, tmp_path):
    """The engine hangs (SIGSTOP: alive, listening, silent) mid-suite: the watchdog's health checks fail
    (the request timeout stays the long default: a slow engine is waited for), the server is killed and
    started again, and the suite resumes from the last stored record: every item once."""
    _, endpoint = server
    cfg = campaign_file(
        tmp_path, name="hang", model={"path": base_model}, output_dir=tmp_path / "runs",
        baseline={"name": "bf16", "method": "bf16"},
        variants=[{"name": "same", "method": "external", "endpoint": endpoint.base_url,
                   "served_model": endpoint.model, "checkpoint": base_model}],
        engine={"enforce_eager": True, "kv_cache_gib": 1, "max_restarts": 1},
        suites=[{"kind": "custom", "path": ROOT / "suites/custom/capitals.yaml"}],
        gates={"rules": [{"match": "*", "margin": 0.15}]}, mlflow={"enabled": False})
    db = tmp_path / "runs" / "hang" / "results.sqlite"
    log = tmp_path / "cli.log"
    cli, server = _run_until_records(spawn, cfg, db, log)
    hung_at = time.monotonic()
    for p in [server, *server.children(recursive=True)]:
        p.suspend()
    # found by its health checks (the product's own bound), then the suite's requests fail at once
    bound = FAILURES * (INTERVAL_S + HEALTH_TIMEOUT_S) + 30
    while "engine failed" not in log.read_text():
        assert time.monotonic() - hung_at < bound, log.read_text()[-3000:]
        assert cli.poll() is None, log.read_text()[-3000:]
        time.sleep(0.5)
    rc = wait_exit(cli, [log, db.parent])
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert "stopped answering" in text and "restart 1 of 1" in text
    assert not is_alive(server)  # the hung server was ended, not left behind
    rec = RunRecord.load(tmp_path / "runs" / "hang" / "run.json")
    bf16 = next(v for v in rec.variants if v.name == "bf16")
    assert bf16.restarts == 1 and bf16.status == "ok" and rec.verdicts == {"same": "PASS"}
    con = sqlite3.connect(db)
    n, distinct = con.execute("SELECT COUNT(*), COUNT(DISTINCT item_id) FROM records WHERE variant = 'bf16'").fetchone()
    assert n == distinct == 53
