"""A server subprocess that cannot outlive qeval: own process group, parent-death signal, group kill."""

from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

_PR_SET_PDEATHSIG = 1
# on Ctrl-C / SIGTERM the user (or CI) is waiting: children get this long after SIGTERM, then SIGKILL
INTERRUPT_GRACE_S = 3.0
STOP_GRACE_S = 30.0  # otherwise: time for a clean shutdown (vLLM frees its engine core and device memory)
GUARDIAN = Path(__file__).with_name("guardian.py")
ORPHAN_GRACE_S = 10.0  # a group whose starter died: SIGTERM, then SIGKILL after this long (guardian.py)


# "RuntimeError: ...", "ValueError: ...", "CUDA out of memory", "Address already in use": causes, not frames
_CAUSE = re.compile(r"\b\w*(Error|Exception): |out of memory|Address already in use")


def _die_with_parent() -> None:
    # Linux: if qeval is SIGKILLed, the kernel sends SIGTERM to the server so it shuts down cleanly.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT / SIGTERM wait until the block ends, then reach the handlers the process had before it (also where
    code inside the block replaced them): raised inside Popen after its fork, they would leave a child nobody
    holds (it ran on, the campaign gone). Handlers run in the main thread only: another thread needs none."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    previous = {s: h for s, h in previous.items() if h is not None}  # None: set outside Python, left alone
    for s in previous:
        signal.signal(s, lambda signum, _frame: held.append(signum))
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        for s in dict.fromkeys(held):
            signal.raise_signal(s)


def stop_grace(exc: BaseException | None, normal: float | None = None) -> float | None:
    """How long a child may take to stop cleanly: short while an interrupt unwinds, else `normal`."""
    return INTERRUPT_GRACE_S if isinstance(exc, KeyboardInterrupt) else normal


def is_alive(p: psutil.Process) -> bool:
    """Still running: a zombie (exited, not yet reaped by its parent) counts as gone."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:  # NoSuchProcess, and ZombieProcess where status() itself finds it dead
        return False


def pid_alive(pid: int) -> bool:
    try:
        return is_alive(psutil.Process(pid))
    except psutil.Error:
        return False


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerProcess:
    """A child in its own process group that dies with qeval; `terminate` ends the whole group.
    Servers (vLLM, MLflow) and tool workers (quantizers, lm-eval) alike."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path):
        self.argv, self.env, self.log_path = argv, env, log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.guardian: subprocess.Popen[bytes] | None = None

    def spawn(self) -> None:
        """Start it; returns with the child running, or raises with no child left (a Ctrl-C during the start
        is held until the child is ours, then ends it)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self.log_path.open("ab") as log, signals_held():
                self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True,
                                             preexec_fn=_die_with_parent)
                # in a session of its own: ends the group should this process die without stopping it
                self.guardian = subprocess.Popen(
                    [sys.executable, "-I", str(GUARDIAN), str(os.getpid()), str(self.proc.pid), str(ORPHAN_GRACE_S)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        except BaseException:
            self.terminate(grace_s=INTERRUPT_GRACE_S)
            raise

    def wait(self) -> int:
        """Wait for it to exit; an exception meanwhile (Ctrl-C, SIGTERM) ends its whole group first."""
        return self._life(start=False)

    def run(self) -> int:
        """spawn, then wait: a tool worker's whole life, with no moment where an interrupt leaves it running."""
        return self._life(start=True)

    def _life(self, start: bool) -> int:
        try:
            if start:
                self.spawn()
            rc = self.proc.wait()
        except BaseException:
            self.terminate(grace_s=INTERRUPT_GRACE_S)
            raise
        self.terminate(grace_s=0)  # what it left in its group, and its guardian
        return rc

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        """The log's last lines, led by the lines that name an error: a server's root cause (e.g. vLLM's
        worker RuntimeError) sits above the generic traceback of the process that reported it."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        all_lines = text.splitlines()
        causes = [ln for ln in all_lines if _CAUSE.search(ln) and " WARNING " not in ln]
        causes = list(dict.fromkeys(causes))[-6:]  # distinct, in order, the last few
        tail = all_lines[-lines:]
        head = [ln for ln in causes if ln not in tail]
        return "\n".join((["... error lines:"] + head + ["... last lines:"] if head else []) + tail)

    def pids(self) -> set[int]:
        """The server and every process it started (vLLM's engine core runs in a child)."""
        if not self.alive():
            return set()
        try:
            root = psutil.Process(self.proc.pid)
            return {root.pid, *(c.pid for c in root.children(recursive=True))}
        except psutil.Error:
            return set()

    def rss_bytes(self) -> int | None:
        total = 0
        for pid in self.pids():
            try:
                total += psutil.Process(pid).memory_info().rss
            except psutil.Error:
                continue
        return total or None

    def kill(self) -> None:
        """SIGKILL the whole group at once (a hung server); safe from another thread, `terminate` still reaps."""
        if self.proc is not None:
            self._signal(self.proc.pid, signal.SIGKILL)

    def terminate(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM the whole process group, then SIGKILL what is left after the grace period."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session made the server its group's leader
        members = self._group(pgid)
        self._signal(pgid, signal.SIGTERM)
        self._signal(pgid, signal.SIGCONT)  # a stopped (hung) server acts on the TERM only once continued
        deadline = time.monotonic() + grace_s
        try:
            try:  # back as soon as the server exits (a fake one does within milliseconds), not at the next poll
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
            while time.monotonic() < deadline and any(is_alive(p) for p in members):
                time.sleep(0.1)
        finally:  # also when a second Ctrl-C lands while waiting: nothing is left behind
            self._signal(pgid, signal.SIGKILL)
            for p in members:  # children that left the group (setsid) are still ours to end
                try:
                    p.kill()
                except psutil.Error:
                    pass
            self.proc.wait()
            self.proc = None
            if self.guardian is not None:  # its group is gone: it would exit within a poll, end it now
                self.guardian.kill()
                self.guardian.wait()
                self.guardian = None

    @staticmethod
    def _group(pgid: int) -> list[psutil.Process]:
        try:
            root = psutil.Process(pgid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    @staticmethod
    def _signal(pgid: int, sig: signal.Signals) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
