"""SIGINT / SIGTERM to `qeval run` at each stage (engine start, a custom suite, lm-eval, the probe,
quantization, MLflow logging): within 10 s of the signal it has stopped every child and exited
128 + signal, and run.json holds the verdicts of what finished, the rest NOT_EVALUATED.

One campaign on the tiny random Llama, resumed after each signal, so each stage is reached once."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psutil
import pytest

from qeval.record.run import RunRecord
from qeval.settings import Settings

from ..conftest import campaign_file, describe, descendants, sees_marked, wait_gone
from .conftest import ROOT, count_records, qeval, tiny_llama, wait_exit, wait_for

pytestmark = pytest.mark.slow

BOUND_S = 10  # the product's requirement, measured from the signal (not a guess at this machine's speed)


def _config(tmp_path: Path, model: Path) -> Path:
    return campaign_file(
        tmp_path, name="stops", file="stops.yaml", model={"path": model}, output_dir=tmp_path / "runs",
        baseline={"name": "bf16", "method": "bf16"},
        variants=[{"name": "w4", "method": "rtn", "recipe": {"group_size": 32}}],
        engine={"enforce_eager": True, "kv_cache_gib": 1, "max_model_len": 512},
        suites=[{"kind": "custom", "path": ROOT / "suites/custom/arithmetic.yaml"},
                {"kind": "lm_eval", "include_path": ROOT / "suites/lmeval", "tasks": ["oe_addition"], "limit": 10}],
        probe={"enabled": True, "concurrency": [1, 4], "requests_per_step": 16, "warmup_requests": 1,
               "prompt_tokens": 32, "output_tokens": 64},
        gates={"rules": [{"match": "*", "margin": 0.5}]}, mlflow={"server": True})


def _has(pid: int, word: str) -> bool:
    for p in descendants(pid):
        try:
            if word in " ".join(p.cmdline()):
                return True
        except psutil.Error:
            continue
    return False


# (stage, the log line that starts it, what else shows it is under way, the signal, a child running then)
STAGES = [
    ("engine start", "[bf16] starting the vllm engine", lambda cli, db: _has(cli.pid, "vllm.entrypoints"),
     signal.SIGINT, "vllm.entrypoints"),
    ("custom suite", "[bf16] custom/arithmetic", lambda cli, db: count_records(db, "bf16") >= 3, signal.SIGTERM,
     "vllm.entrypoints"),
    ("lm-eval", "[bf16] lm-eval", lambda cli, db: _has(cli.pid, "lmeval_session"), signal.SIGINT, "lmeval_session"),
    ("probe", "[bf16] latency probe", lambda cli, db: True, signal.SIGTERM, "vllm.entrypoints"),
    ("quantization", "[w4] quantizing", lambda cli, db: _has(cli.pid, "quantize_"), signal.SIGINT, "quantize_"),
    ("MLflow logging", "MLflow server up at", lambda cli, db: True, signal.SIGTERM, "mlflow"),
]


def _interrupt(spawn, cfg: Path, log: Path, marker: str, under_way, sig: signal.Signals, child: str) -> float:
    run_dir = cfg.parent / "runs" / "stops"
    cli = qeval(spawn, "run", str(cfg), log=log)
    wait_for(lambda: marker in log.read_text() and under_way(cli, run_dir / "results.sqlite"), cli,
             [log, cfg.parent / "runs"], marker)
    tree = descendants(cli.pid)
    live = sees_marked(cli.test_token, child)  # the search below sees what runs at this stage
    cli.send_signal(sig)
    t0 = time.monotonic()
    if sig == signal.SIGINT:  # Ctrl-C pressed twice: the second must not cut the clean-up short
        time.sleep(0.3)
        cli.send_signal(sig)
    while cli.poll() is None and time.monotonic() - t0 < 60:
        time.sleep(0.02)
    took = time.monotonic() - t0
    text = log.read_text()
    assert took < BOUND_S, f"{took:.1f} s after {sig.name} at '{marker}':\n{text[-3000:]}"
    assert cli.returncode == 128 + sig, text[-3000:]
    left = wait_gone(tree, timeout=1)
    assert not left, describe(left)
    live.assert_gone(timeout=0)
    return took


def test_interrupted_at_each_stage_stops_within_10_s_and_keeps_the_record(spawn, tmp_path):
    model = tiny_llama(Settings.from_env(), tmp_path / "tiny-llama")
    (model / "nonce.txt").write_text(str(time.time_ns()))  # a new checkpoint hash: w4 is really quantized
    cfg = _config(tmp_path, model)
    record = tmp_path / "runs" / "stops" / "run.json"
    took = {}
    for i, (stage, marker, under_way, sig, child) in enumerate(STAGES):
        took[stage] = _interrupt(spawn, cfg, tmp_path / f"stop-{i}.log", marker, under_way, sig, child)
        rec = RunRecord.load(record)
        status = {v.name: v.status for v in rec.variants}
        if stage == "MLflow logging":  # the campaign had finished: every verdict is there
            assert status == {"bf16": "ok", "w4": "ok"} and rec.finished_at, (stage, status)
            assert rec.verdicts["w4"] in ("PASS", "FAIL", "INCONCLUSIVE") and rec.gates
            continue
        assert rec.finished_at is None, stage  # unfinished: the same command resumes it
        assert rec.verdicts == {"w4": "NOT_EVALUATED"} and rec.verdict == "NOT_EVALUATED", (stage, rec.verdicts)
        if stage == "quantization":  # the baseline finished before; w4 was being made
            assert status == {"bf16": "ok", "w4": "skipped"}, (stage, status)
            assert "interrupted" in next(v for v in rec.variants if v.name == "w4").error
            made = list((Settings.from_env().variants).glob(f"{model.name}-rtn-*"))
            assert not [p for p in made if ".tmp-" in p.name], made  # no half-made checkpoint left
        else:  # the baseline was being evaluated: partial, with what it finished
            bf16 = next(v for v in rec.variants if v.name == "bf16")
            assert status == {"bf16": "partial", "w4": "skipped"}, (stage, status)
            assert bf16.error.startswith("cut while being evaluated"), bf16.error
            if stage in ("lm-eval", "probe"):
                assert "custom/arithmetic" in {s.suite for s in bf16.suites}, (stage, bf16.suites)
    print("seconds from the signal to the exit:", {k: round(v, 2) for k, v in took.items()})
    # and the same command still finishes the run
    last = qeval(spawn, "run", str(cfg), log=tmp_path / "last.log")
    assert wait_exit(last, [tmp_path / "last.log", tmp_path / "runs"]) in (0, 1), \
        (tmp_path / "last.log").read_text()[-3000:]
    rec = RunRecord.load(record)
    assert rec.finished_at and rec.verdicts["w4"] != "NOT_EVALUATED"
    made = next(v for v in rec.variants if v.name == "w4").checkpoint
    import shutil

    shutil.rmtree(made)  # this test's own variant: nothing else will use it
