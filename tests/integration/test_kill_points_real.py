"""SIGKILL of `qeval run` at one stage after another (server start, an lm-eval task, the probe,
quantization, MLflow logging), each time run again: at the end every per-item record is there once
and the results equal an uninterrupted run's (greedy decoding)."""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path

import psutil
import pytest

from qeval.engines.process import ORPHAN_GRACE_S
from qeval.record.run import RunRecord
from qeval.settings import Settings

from ..conftest import campaign_file, describe, sees_marked, wait_gone
from .conftest import ROOT, qeval, tiny_llama, wait_exit, wait_for

pytestmark = pytest.mark.slow

# the stage's first log line, and how long after it the kill lands (all within the stage)
# (the log line, how long after it, a child running then)
KILL_POINTS = [("[bf16] starting the vllm engine", 3.0, "vllm.entrypoints"),
               ("[bf16] lm-eval", 4.0, "vllm.entrypoints"), ("[bf16] latency probe", 0.3, "vllm.entrypoints"),
               ("[w4] quantizing", 2.0, "quantize_"), ("MLflow server up at", 0.2, "mlflow")]


def _config(tmp_path: Path, model: Path, out: Path) -> Path:
    return campaign_file(
        tmp_path, name="kills", file=f"{out.name}.yaml", model={"path": model}, output_dir=out,
        baseline={"name": "bf16", "method": "bf16"},
        variants=[{"name": "w4", "method": "rtn", "recipe": {"group_size": 32}}],
        engine={"enforce_eager": True, "kv_cache_gib": 1, "max_model_len": 512},
        suites=[{"kind": "custom", "path": ROOT / "suites/custom/arithmetic.yaml"},
                {"kind": "logprobs", "name": "pydoc", "chunks": 8, "top_k": 5},
                {"kind": "lm_eval", "include_path": ROOT / "suites/lmeval", "tasks": ["oe_addition"], "limit": 20}],
        probe={"enabled": True, "concurrency": [1, 4], "requests_per_step": 8, "warmup_requests": 1,
               "prompt_tokens": 32, "output_tokens": 8},
        gates={"rules": [{"match": "*", "margin": 0.5}]}, mlflow={"server": True})


def _run(spawn, cfg: Path, log: Path, kill_at: tuple[str, float, str] | None) -> int | None:
    cli = qeval(spawn, "run", str(cfg), log=log)
    watch = [log, cfg.parent / cfg.stem]
    if kill_at is None:
        return wait_exit(cli, watch)
    marker, delay, child = kill_at
    wait_for(lambda: marker in log.read_text(), cli, watch, marker)
    time.sleep(delay)
    children = psutil.Process(cli.pid).children(recursive=True)
    live = sees_marked(cli.test_token, child)  # the search below sees what runs at this point
    cli.send_signal(signal.SIGKILL)
    cli.wait()
    alive = wait_gone(children, timeout=60)  # servers and workers die with their parent (a zombie is gone)
    assert not alive, describe(alive)
    # then each guardian ends what is left of its group and exits (SIGTERM, SIGKILL after its grace)
    live.assert_gone(timeout=ORPHAN_GRACE_S + 5)
    return None


def _scores(db: Path) -> dict[tuple[str, str, str], str]:
    con = sqlite3.connect(db)
    rows = con.execute("SELECT variant, suite, item_id, scores FROM records").fetchall()
    assert len(rows) == len({(v, s, i) for v, s, i, _ in rows})  # nothing stored twice
    return {(v, s, i): sc for v, s, i, sc in rows}


def test_killed_at_every_stage_then_resumed_equals_uninterrupted(spawn, tmp_path):
    settings = Settings.from_env()
    model = tiny_llama(settings, tmp_path / "tiny-llama")
    # a nonce in the checkpoint makes its hash (the variant cache key) new: the quantization really runs
    (model / "nonce.txt").write_text(str(time.time_ns()))
    killed = _config(tmp_path, model, tmp_path / "killed")
    for i, point in enumerate(KILL_POINTS):
        _run(spawn, killed, tmp_path / f"kill-{i}.log", point)
    rc = _run(spawn, killed, tmp_path / "last.log", None)
    assert rc in (0, 1), (tmp_path / "last.log").read_text()[-3000:]
    ref = _config(tmp_path, model, tmp_path / "ref")
    assert _run(spawn, ref, tmp_path / "ref.log", None) in (0, 1)

    got, want = _scores(tmp_path / "killed" / "kills" / "results.sqlite"), _scores(tmp_path / "ref" / "kills" / "results.sqlite")
    assert got.keys() == want.keys() and len(got) == 2 * (40 + 8 + 20)
    assert got == want  # greedy decoding: the interrupted run scored every item as the uninterrupted one did
    a, b = (RunRecord.load(tmp_path / d / "kills" / "run.json") for d in ("killed", "ref"))
    assert a.verdicts == b.verdicts and a.finished_at
    assert [(c.suite, c.metric, c.delta) for c in a.comparisons] == [(c.suite, c.metric, c.delta) for c in b.comparisons]
    assert all(v.probe for v in a.variants)  # the probe killed part-way was redone whole
    made = next(v for v in a.variants if v.name == "w4").checkpoint
    assert not list(Path(made).parent.glob(Path(made).name + ".tmp-*"))  # no half-quantized folder left
    import shutil

    shutil.rmtree(made)  # this test's own variant: nothing else will use it
