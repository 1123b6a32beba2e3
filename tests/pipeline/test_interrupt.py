"""`qeval run` interrupted for real, in seconds: two loopback endpoints, the variant's one never answers.
Ctrl-C twice mid-suite: exit 130 within 10 s, and run.json keeps the baseline's results, the variant
NOT_EVALUATED. SIGINT and SIGTERM mid-variant on the fake engine, on the local executor and on Ray (a cluster
started for the run): exit 130 / 143 within 10 s, the record written, no engine or Ray process left; and the
Ray executor keeps the process's signal handlers over ray.init's. (The real-server version at every stage is
tests/integration/test_interrupt_real.py; a cluster the run did not start: tests/test_ray_executor.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qeval.record.run import RunRecord
from tests.conftest import sees_marked
from tests.loopback import Loopback, js
from tests.ray_cluster import QUIET

ROOT = Path(__file__).resolve().parents[2]


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


# the local executor, and Ray on a cluster started for the run (its processes the driver's descendants)
EXECUTORS = [pytest.param("{kind: local}", id="local"),
             pytest.param("{kind: ray, address: local}", id="ray", marks=pytest.mark.ray)]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_signal_mid_variant_stops_every_process_and_writes_the_record(executor, sig, spawn, tmp_path):
    """SIGINT or SIGTERM (twice) to `qeval run` while the fake engine serves a variant: exit 128 + the signal's
    number within 10 s; run.json keeps the baseline's results, the variant cut short partial, the one never
    reached NOT_EVALUATED; no engine, no Ray worker, nothing the run started outlives it."""
    from qeval.engines.fake import FakeEngineSpec, write_checkpoint
    from tests.pipeline.test_pipeline_fake import N, _campaign, _rows

    config = _campaign(tmp_path, token_delay_s=0.002)
    # the variants slow: on Ray they run beside the baseline, and the signal must land in w3's suite after the
    # baseline is done, with neither variant done
    for name, model in (("w3", "fake"), ("same", "same")):
        write_checkpoint(tmp_path / "ck" / name, FakeEngineSpec(model=model, answers=[Path("../../facts.jsonl")],
                                                                token_delay_s=0.2))
    # no probe: on Ray the baseline's would wait for the device w3's suites hold, and be done only after them
    config.write_text(config.read_text().replace("probe: {enabled: true", "probe: {enabled: false").replace(
        "mlflow: {enabled: false}", f"mlflow: {{enabled: false}}\nexecutor: {executor}"))
    log = tmp_path / "cli.log"
    env = {**os.environ, **QUIET, "QEVAL_CACHE": str(tmp_path / "cache"), "QEVAL_RECORDS": "off"}
    cli = spawn([sys.executable, "-m", "qeval.cli", "run", str(config), "--no-mlflow"], cwd=tmp_path, env=env,
                stdout=log.open("w"), stderr=subprocess.STDOUT)
    run_dir = tmp_path / "runs" / "p"
    deadline = time.monotonic() + 240
    while _status(run_dir).get("base") != "ok" or _rows(run_dir, "w3") < 2:  # the baseline done, w3 mid-suite
        assert cli.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)
    # its engine (and on Ray the cluster's own processes and the task's worker), seen running by the search
    # that must find none of them afterwards
    kinds = ["fake_server.py"] + (["raylet", "gcs_server", "ray::"] if "ray" in executor else [])
    live = sees_marked(cli.test_token, *kinds)
    # Ctrl-C as a terminal sends it: to the whole process group (on Ray, the cluster's own processes too); SIGTERM
    # as CI, Kubernetes or Slurm send it: to the process
    send = (lambda: os.killpg(cli.pid, sig)) if sig == signal.SIGINT else (lambda: cli.send_signal(sig))
    send()
    t0 = time.monotonic()
    time.sleep(0.05)
    if cli.poll() is None:
        send()  # a second one, during the clean-up or the exit, changes nothing
    while cli.poll() is None and time.monotonic() - t0 < 30:
        time.sleep(0.02)
    took = time.monotonic() - t0
    text = log.read_text()
    assert took < 10 and cli.returncode == 128 + sig, (took, cli.returncode, text[-3000:])
    assert f"interrupted ({signal.Signals(sig).name})" in text
    live.assert_gone(timeout=0.5)  # gone with the driver, not some time later
    rec = RunRecord.load(run_dir / "run.json")
    status = {v.name: v.status for v in rec.variants}
    # `same`: not reached one after another; on Ray, where it runs beside w3, perhaps started
    assert status["base"] == "ok" and status["w3"] == "partial" and status["same"] in ("skipped", "partial"), status
    assert rec.verdicts == {"w3": "NOT_EVALUATED", "same": "NOT_EVALUATED"} and rec.finished_at is None
    base = next(v for v in rec.variants if v.name == "base")
    assert [(s.suite, s.n) for s in base.suites] == [("custom/facts", N), ("custom/sums", N)]
    print(f"{executor} {signal.Signals(sig).name}: exit {cli.returncode} after {took:.2f} s")


def _status(run_dir: Path) -> dict[str, str]:
    try:
        return {v["name"]: v["status"] for v in json.loads((run_dir / "run.json").read_text())["variants"]}
    except (OSError, ValueError):  # not written yet, or being written
        return {}


class _Stop(Exception):
    """What the process's own handler raises in the tests below (qeval's raises Interrupted)."""


class _FakeRay:
    """What RayExecutor.check calls of Ray: its init does to SIGTERM's handler what ray.init does, then `meanwhile`."""

    def __init__(self, meanwhile=lambda: None):
        self.meanwhile, self.shut = meanwhile, False

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs) -> None:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # as ray.init installs it
        self.meanwhile()

    def shutdown(self) -> None:
        self.shut = True


@pytest.fixture
def own_handler():
    """SIGINT and SIGTERM handled by one that raises _Stop, as qeval's raises Interrupted; put back after."""
    def own(signum, frame):
        raise _Stop(signum)

    before = {s: signal.signal(s, own) for s in (signal.SIGINT, signal.SIGTERM)}
    yield own
    for s, h in before.items():
        signal.signal(s, h)


def _check(fake: _FakeRay, monkeypatch) -> None:
    from qeval.executors.ray import RayExecutor, RayExecutorSpec

    monkeypatch.setitem(sys.modules, "ray", fake)
    RayExecutor(RayExecutorSpec(address="local")).check([])


def test_the_ray_executor_puts_the_signal_handlers_back_after_ray_init(own_handler, monkeypatch):
    fake = _FakeRay()
    _check(fake, monkeypatch)
    assert signal.getsignal(signal.SIGINT) is own_handler and signal.getsignal(signal.SIGTERM) is own_handler
    assert not fake.shut


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_inside_ray_init_reaches_the_process_handler_and_the_cluster_is_shut_down(sig, own_handler,
                                                                                           monkeypatch):
    """SIGTERM inside ray.init meets Ray's handler (sys.exit(15)); SIGINT is held: either reaches the process's
    own handler once init returns, and the cluster init started is shut down."""
    fake = _FakeRay(meanwhile=lambda: os.kill(os.getpid(), sig))
    with pytest.raises(_Stop) as stopped:
        _check(fake, monkeypatch)
    assert stopped.value.args == (sig,) and fake.shut
    assert signal.getsignal(signal.SIGTERM) is own_handler


def test_an_interrupted_ray_run_cancels_each_task_by_force_and_waits_for_its_end():
    """What the driver does on an interrupt, whoever owns the cluster (a notebook's connection outlives the run,
    and its tasks would run on): every task still running cancelled by force, each stream's end awaited."""
    import queue
    import threading

    from qeval.executors.ray import CANCEL_WAIT_S, _cancel

    ended: queue.Queue = queue.Queue()
    cancelled = []

    class Ray:
        def cancel(self, gen, force: bool) -> None:
            cancelled.append((gen, force))
            threading.Timer(0.3, ended.put, args=((gen, RuntimeError("cancelled")),)).start()  # its stream's end

    ended.put((("w3", 1), "a record still under way"))  # not an end: waited past
    t0 = time.monotonic()
    _cancel(Ray(), {("w3", 1): ("w3", 1), ("same", 1): ("same", 1)}, ended)
    assert cancelled == [(("w3", 1), True), (("same", 1), True)]
    assert 0.3 <= time.monotonic() - t0 < CANCEL_WAIT_S and ended.empty()
