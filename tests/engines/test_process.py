"""ServerProcess: an interrupt at any moment of a child's start leaves no child running."""

from __future__ import annotations

import signal
import subprocess
import sys

import psutil
import pytest

from qeval.engines.process import ServerProcess
from tests.conftest import wait_gone

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def interrupted_popen(monkeypatch):
    """Popen that forks its child, then is hit by SIGINT before it returns (as a Ctrl-C can land), keeping
    the child's pid where the test can see it."""
    real, started = subprocess.Popen, []

    def popen(*args, **kwargs):
        proc = real(*args, **kwargs)
        started.append(psutil.Process(proc.pid))
        signal.raise_signal(signal.SIGINT)  # inside Popen: the caller has no handle on the child yet
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen)
    return started


@pytest.mark.parametrize("how", ["spawn", "run"])
def test_interrupt_during_the_start_leaves_no_child(interrupted_popen, tmp_path, how):
    proc = ServerProcess(SLEEPER, {"PATH": "/usr/bin:/bin"}, tmp_path / "child.log")
    with pytest.raises(KeyboardInterrupt):
        getattr(proc, how)()
    assert len(interrupted_popen) == 1
    assert not wait_gone(interrupted_popen, timeout=10)
    assert proc.proc is None  # reaped


def test_run_returns_the_exit_code(tmp_path):
    proc = ServerProcess([sys.executable, "-c", "raise SystemExit(3)"], {"PATH": "/usr/bin:/bin"}, tmp_path / "l")
    assert proc.run() == 3


def test_a_signal_held_during_the_start_is_delivered_after_it(tmp_path):
    """The held SIGINT is not lost: it reaches the caller once the child is started, and ends it."""
    seen = []
    previous = signal.signal(signal.SIGINT, lambda *_: seen.append("int"))
    try:
        real = subprocess.Popen

        def popen(*a, **k):
            p = real(*a, **k)
            signal.raise_signal(signal.SIGINT)
            assert not seen  # held while Popen runs
            return p

        subprocess.Popen = popen
        try:
            proc = ServerProcess(SLEEPER, {"PATH": "/usr/bin:/bin"}, tmp_path / "l")
            proc.spawn()
        finally:
            subprocess.Popen = real
        assert seen == ["int"] and proc.alive()  # this handler does not raise: the start completes
        proc.terminate(grace_s=1)
    finally:
        signal.signal(signal.SIGINT, previous)
