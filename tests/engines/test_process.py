"""ServerProcess: an interrupt at any moment of a child's start leaves no child running."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from qeval.engines.process import ServerProcess
from tests.conftest import wait_gone

ROOT = Path(__file__).resolve().parents[2]
SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture(autouse=True)
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt here, as in a terminal: a test runner started in the background by a
    shell without job control inherits SIGINT ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def interrupted_popen(monkeypatch):
    """Popen that forks its child, then is hit by SIGINT before it returns (as a Ctrl-C can land), keeping
    the child's pid where the test can see it."""
    real, started = subprocess.Popen, []

    def popen(*args, **kwargs):
        proc = real(*args, **kwargs)
        started.append(psutil.Process(proc.pid))
        if len(started) == 1:  # the server's (then its guardian's): inside Popen, no handle on the child yet
            signal.raise_signal(signal.SIGINT)
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen)
    return started


@pytest.mark.parametrize("how", ["spawn", "run"])
def test_interrupt_during_the_start_leaves_no_child(interrupted_popen, tmp_path, how):
    proc = ServerProcess(SLEEPER, {"PATH": "/usr/bin:/bin"}, tmp_path / "child.log")
    with pytest.raises(KeyboardInterrupt):
        getattr(proc, how)()
    assert len(interrupted_popen) == 2  # the server and its guardian
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


# a "server" deaf to SIGTERM, with a child of its own in its group (as vLLM's API server and engine core)
DEAF = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
core = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
open(sys.argv[1], "w").write(f"{os.getpid()} {core.pid}")
time.sleep(120)
"""

# the process that starts it, then is SIGKILLed before it can stop it (a Ray worker killed mid-variant)
STARTER = """
import sys, time
from pathlib import Path
from qeval.engines.process import ServerProcess
ServerProcess([sys.executable, "-c", sys.argv[1], sys.argv[2]], {"PATH": "/usr/bin:/bin"}, Path(sys.argv[3])).spawn()
time.sleep(120)
"""


def test_a_group_whose_starter_is_killed_is_ended_by_its_guardian(spawn, tmp_path):
    """The parent-death signal alone reaches only the direct child, which may ignore it: the guardian ends the
    whole group (SIGTERM, then SIGKILL after its grace) and then itself."""
    import os
    import time

    pids_file = tmp_path / "pids"
    starter = spawn([sys.executable, "-c", STARTER, DEAF, str(pids_file), str(tmp_path / "server.log")],
                    env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    deadline = time.monotonic() + 60
    while not (pids_file.is_file() and len(pids_file.read_text().split()) == 2):
        assert starter.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    server, core = (psutil.Process(int(p)) for p in pids_file.read_text().split())

    def guardians() -> list[psutil.Process]:
        return [c for c in psutil.Process(starter.pid).children() if "guardian.py" in " ".join(c.cmdline())]

    while not guardians():  # started beside the server: on a busy machine it may be a moment behind its pids
        assert time.monotonic() < deadline
        time.sleep(0.05)
    [guardian] = guardians()
    assert os.getpgid(guardian.pid) != os.getpgid(server.pid)  # not in the group it ends
    starter.kill()
    starter.wait()
    assert not wait_gone([server, core], timeout=30)
    assert not wait_gone([guardian], timeout=5)  # done, it exits


def test_a_stopped_server_leaves_no_guardian(tmp_path):
    proc = ServerProcess(SLEEPER, {"PATH": "/usr/bin:/bin"}, tmp_path / "l")
    proc.spawn()
    guardian = psutil.Process(proc.guardian.pid)
    proc.terminate(grace_s=1)
    assert proc.guardian is None and not wait_gone([guardian], timeout=1)


def test_the_guardian_counts_a_group_of_zombies_as_gone():
    """Where PID 1 reaps no orphans (a container's init), a dead server stays a zombie; kill(0) still finds
    it, and a guardian that believed it would wait out its whole grace."""
    import os
    import time

    from qeval.engines.guardian import group_alive

    sleeper = subprocess.Popen(SLEEPER, start_new_session=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    try:
        assert group_alive(sleeper.pid)
        deadline = time.monotonic() + 30
        while psutil.Process(dead.pid).status() != psutil.STATUS_ZOMBIE:  # exited, not reaped: a zombie
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.killpg(dead.pid, 0)  # the kernel still finds it
        assert not group_alive(dead.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
        dead.wait()
