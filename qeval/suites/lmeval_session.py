"""One lm-eval process kept across a suite's calls (workers/lmeval_session.py): lm-eval imported, its client made and
its tasks built once per variant, suite and scoring, then asked for one batch of docs after another.

The process is a ServerProcess (its own group, ended with qeval; a guardian ends it should qeval be killed). It
connects back to a socket this side listens on at 127.0.0.1, proves it is the process started (a token passed
in its environment, never its argv), and answers each call once lm-eval has written the call's per-sample log.
A call's answered requests are in its own request cache as they come, so a process that dies mid-call loses
nothing the next run does not find there.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..engines.process import INTERRUPT_GRACE_S, ServerProcess
from ..errors import EngineError

SESSION_WORKER = Path(__file__).resolve().parent.parent / "workers" / "lmeval_session.py"
POLL_S = 0.5  # how often a wait on the worker looks whether it is still alive
STOP_WAIT_S = 10.0  # an idle worker asked to stop exits at once; after this long its group is ended


@dataclass(frozen=True)
class Call:
    """One batch for a kept lm-eval: its tasks, their docs (lm-eval's --samples; None: the limit's), its request
    cache, its output folder and (next-token scoring) its flags file."""

    tasks: tuple[str, ...]
    out: Path
    cache: Path
    samples: Mapping[str, Sequence[int]] | None = None
    limit: int | None = None
    flags: Path | None = None

    def line(self) -> bytes:
        # lm-eval maps its k-th selected doc to samples[k] only if they are sorted
        samples = None if self.samples is None else {t: sorted(ix) for t, ix in self.samples.items()}
        return (json.dumps({"tasks": list(self.tasks), "samples": samples, "limit": self.limit,
                            "output_path": str(self.out), "use_cache": str(self.cache),
                            "flags": None if self.flags is None else str(self.flags)}) + "\n").encode()


class LmEvalSession:
    """A started lm-eval worker (`start`), asked call by call (`evaluate`), ended by `close` (also as a context
    manager: an interrupt while it runs ends its whole process group)."""

    def __init__(self, python: Path, lmeval_args: list[str], env: dict[str, str], log_path: Path, model: str,
                 next_token_top_k: int | None = None, connect_timeout_s: float = 600.0):
        self.python, self.args, self.env, self.log_path, self.model = python, lmeval_args, env, log_path, model
        self.top_k, self.connect_timeout_s = next_token_top_k, connect_timeout_s
        self.proc: ServerProcess | None = None
        self.channel: socket.socket | None = None
        self.buffer = b""

    def __enter__(self) -> "LmEvalSession":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(grace_s=0.0 if exc is not None else STOP_WAIT_S)  # unwinding: no wait for a call to end

    @property
    def started(self) -> bool:
        return self.proc is not None

    def start(self) -> None:
        token = secrets.token_hex(16)
        with socket.create_server(("127.0.0.1", 0)) as listener:
            listener.settimeout(POLL_S)
            port = listener.getsockname()[1]
            head = [str(self.python), str(SESSION_WORKER), str(port)]
            if self.top_k is not None:
                head += ["--next-token", str(self.top_k)]
            self.proc = ServerProcess([*head, "--", *self.args], {**self.env, "QEVAL_SESSION_TOKEN": token},
                                      self.log_path)
            self.proc.spawn()
            deadline = time.monotonic() + self.connect_timeout_s
            while True:  # lm-eval's import and the tasks' build happen before it connects
                self._check_alive("while it built its tasks")
                if time.monotonic() > deadline:
                    raise self._failed(f"lm-eval did not start within {self.connect_timeout_s:.0f} s")
                try:
                    conn, _ = listener.accept()
                except socket.timeout:
                    continue
                conn.settimeout(30.0)
                try:
                    hello = json.loads(conn.makefile("rb").readline() or b"{}")
                except (OSError, ValueError):
                    hello = {}
                if secrets.compare_digest(str(hello.get("token", "")), token):
                    conn.settimeout(POLL_S)
                    self.channel = conn
                    return
                conn.close()  # not the process started: another local connection, refused

    def evaluate(self, call: Call) -> None:
        """One batch, answered once lm-eval has written its per-sample log; EngineError if it failed or died."""
        if self.proc is None:
            self.start()
        self.channel.sendall(call.line())
        line = self._line()
        answer = json.loads(line)
        if not answer.get("ok"):
            raise self._failed(f"lm-eval failed: {answer.get('error', 'no reason given')}")

    def _line(self) -> bytes:
        # recv with a timeout, not a file over the socket: a timeout would leave a file's buffer undefined
        while b"\n" not in self.buffer:
            try:
                chunk = self.channel.recv(65536)
            except socket.timeout:
                self._check_alive("during a call")
                continue
            if not chunk:
                self._check_alive("during a call")
                raise self._failed("lm-eval closed its channel during a call")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def close(self, grace_s: float = STOP_WAIT_S) -> None:
        """Ask it to stop, wait up to `grace_s` for it to exit, then end its process group whatever it did."""
        if self.channel is not None:
            try:
                self.channel.sendall(b'{"stop": true}\n')
            except OSError:
                pass
            self.channel.close()
            self.channel = None
        if self.proc is not None:
            proc, self.proc = self.proc, None
            try:
                if proc.proc is not None:  # None: its start failed, and ended what it started
                    proc.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
            finally:  # also when an interrupt lands while waiting: its group is ended
                proc.terminate(grace_s=INTERRUPT_GRACE_S)

    def _check_alive(self, when: str) -> None:
        if self.proc is not None and not self.proc.alive():
            rc = self.proc.proc.returncode if self.proc.proc is not None else None
            raise self._failed(f"lm-eval exited with code {rc} {when}")

    def _failed(self, what: str) -> EngineError:
        tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-25:]) \
            if self.log_path.is_file() else ""
        return EngineError(f"{what} (log: {self.log_path})", variant=self.model, log_tail=tail)
