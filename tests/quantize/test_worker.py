"""WorkerQuantizer without a real tool: two campaigns making the same variant at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from qeval.quantize.worker import WorkerQuantizer
from qeval.settings import Runtime

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("barrier_worker.py")


class BarrierQuantizer(WorkerQuantizer):
    name = "barrier"
    worker = WORKER
    version = "0"

    def spec(self, base, variant) -> dict:
        return {"method": variant.method}


# one campaign process: quantize into the shared `out`, print where the checkpoint is
DRIVER = """
import signal, sys
# Ctrl-C as in a terminal, whatever the test runner's own: one started in the background by a shell without
# job control has SIGINT ignored, and this child would inherit that (qeval's CLI installs its own handler)
signal.signal(signal.SIGINT, signal.default_int_handler)
from pathlib import Path
from qeval.config import VariantSpec
from qeval.settings import Runtime
from tests.quantize.test_worker import BarrierQuantizer

q = BarrierQuantizer(Runtime(name="py", python=Path(sys.executable)))
out = q.quantize(Path(sys.argv[1]), VariantSpec(name="w4", method="rtn"), Path(sys.argv[2]), Path(sys.argv[3]))
print(out)
"""


def test_two_campaigns_quantizing_one_variant_both_succeed(spawn, tmp_path):
    """Each campaign's worker has a spec file of its own: both exit 0 with their folder written, and
    neither is reported failed, whichever won the rename (a shared spec file made one fail, "exit 0")."""
    base, out, barrier = tmp_path / "base", tmp_path / "cache" / "base-rtn-abc123", tmp_path / "barrier"
    base.mkdir()
    barrier.mkdir()
    env = {"PYTHONPATH": str(ROOT), "BARRIER_DIR": str(barrier), "BARRIER_N": "2", "PATH": "/usr/bin:/bin"}
    procs = [spawn([sys.executable, "-c", DRIVER, str(base), str(out), str(tmp_path / f"q{i}.log")], env=env,
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert len(list(barrier.iterdir())) == 2  # the two workers really ran at the same time
    assert [o.strip().splitlines()[-1] for o in outs] == [str(out), str(out)]
    assert (out / "config.json").is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no tmp folder or spec file left


def test_interrupted_quantizer_leaves_no_worker(spawn, tmp_path):
    """SIGINT to a campaign while its worker runs: the worker's group is ended with it."""
    import signal
    import time

    from tests.conftest import sees_marked

    base, out, barrier = tmp_path / "base", tmp_path / "cache" / "v", tmp_path / "barrier"
    base.mkdir()
    barrier.mkdir()
    env = {"PYTHONPATH": str(ROOT), "BARRIER_DIR": str(barrier), "BARRIER_N": "2", "PATH": "/usr/bin:/bin"}
    proc = spawn([sys.executable, "-c", DRIVER, str(base), str(out), str(tmp_path / "q.log")], env=env,
                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not list(barrier.iterdir()):  # the worker is waiting for a second one that never comes
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.05)
    workers = {int(p.name) for p in barrier.iterdir()}
    live = sees_marked(proc.test_token, "barrier_worker.py")  # the search below sees the worker while it runs
    assert workers <= {p.pid for p in live.procs}
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 10 and proc.returncode != 0
    live.assert_gone()
    assert not (out / "config.json").exists() and not list(out.parent.glob(out.name + ".tmp-*"))
