"""`qeval run` interrupted for real, in seconds: two loopback endpoints, the variant's one never answers.
Ctrl-C twice mid-suite: exit 130 within 10 s, and run.json keeps the baseline's results, the variant
NOT_EVALUATED. (The real-server version at every stage is tests/integration/test_interrupt_real.py.)"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

from qeval.record import RunRecord

from tests.loopback import Loopback, js

ROOT = Path(__file__).resolve().parents[1]


def _answer(body: bytes):
    return js({"choices": [{"index": 0, "message": {"role": "assistant", "content": "7"}, "finish_reason": "stop"}]})


def _never(body: bytes):
    time.sleep(60)  # a server that takes the request and does not answer
    return _answer(body)


def test_ctrl_c_twice_mid_suite_exits_130_in_10_s_with_the_record(spawn, tmp_path):
    models = js({"data": [{"id": "m"}]})
    model = tmp_path / "model"  # named by the campaign; external endpoints serve it, nothing loads it here
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with Loopback({"GET /v1/models": models, "POST /v1/chat/completions": _answer}) as base_url, \
            Loopback({"GET /v1/models": models, "POST /v1/chat/completions": _never}) as stuck_url:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(f"""
name: ctrl-c
model: {{path: {model}}}
output_dir: {tmp_path / 'runs'}
baseline: {{name: base, method: external, endpoint: "{base_url}/v1", served_model: m}}
variants: [{{name: stuck, method: external, endpoint: "{stuck_url}/v1", served_model: m}}]
suites: [{{kind: custom, path: {ROOT / 'suites/custom/arithmetic.yaml'}}}]
gates: {{rules: [{{match: "*", margin: 0.5}}]}}
mlflow: {{enabled: false}}
""")
        log = tmp_path / "cli.log"
        cli = spawn([sys.executable, "-m", "qeval.cli", "run", str(cfg)], stdout=log.open("w"), stderr=log.open("a"))
        deadline = time.monotonic() + 120
        while "[stuck] custom/arithmetic" not in log.read_text():
            assert cli.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        time.sleep(0.5)  # its requests are out, waiting
        cli.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        time.sleep(0.05)
        if cli.poll() is None:
            cli.send_signal(signal.SIGINT)  # a second Ctrl-C, during the clean-up or the exit, changes nothing
        while cli.poll() is None and time.monotonic() - t0 < 30:
            time.sleep(0.02)
        took = time.monotonic() - t0
    text = log.read_text()
    assert took < 10 and cli.returncode == 130, (took, cli.returncode, text[-3000:])
    assert "interrupted (SIGINT)" in text
    rec = RunRecord.load(tmp_path / "runs" / "ctrl-c" / "run.json")
    assert {v.name: v.status for v in rec.variants} == {"base": "ok", "stuck": "partial"}
    assert rec.verdicts == {"stuck": "NOT_EVALUATED"} and rec.finished_at is None
    base = next(v for v in rec.variants if v.name == "base")
    assert [(s.suite, s.n) for s in base.suites] == [("custom/arithmetic", 40)]
    json.loads((tmp_path / "runs" / "ctrl-c" / "run.json").read_text())  # whole, not cut mid-write


def test_a_signal_swallowed_inside_a_finalizer_is_raised_again(tmp_path):
    """SIGTERM landing in a WeakKeyDictionary callback: Python prints "Exception ignored" and the campaign
    would run to its end, exit 0. The handler must raise it again from ordinary code."""
    code = """
import gc, os, signal, sys, time
from qeval.cli import Interrupted, _OnSignal
_OnSignal().install()
class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10000):  # bytecode runs here: the handler raises inside __del__, and Python ignores it
            pass
try:
    Finalized()
    gc.collect()
    for _ in range(200):
        time.sleep(0.01)
    print("ran on")
except Interrupted as e:
    print("interrupted", e.signum)
"""
    import subprocess

    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.stdout.strip() == f"interrupted {int(signal.SIGTERM)}", (p.stdout, p.stderr)
