"""A real Ray cluster of two nodes on this machine, for the tests: a head and a worker, each a separate
`ray start --block` process with its own temporary folder, its own qeval cache (so no worker reads the
other's, nor the driver's run folder) and a custom resource naming it. Small for a 2-core machine:
one CPU each, a small object store, no dashboard.

Ray binds every node to the address it finds for the machine, never to loopback when it has another
interface (it rewrites 127.0.0.1 to that), and refuses several nodes when told to use loopback. So the
cluster lives in a network namespace of its own that has only loopback (`unshare -n`): there, 127.0.0.1
is the only address, and nothing Ray starts is reachable from outside it. Whatever talks to the cluster
(the driver, `ray status`) is started inside it through `run_prefix`."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.conftest import MARK, marked, wait_gone

RAY = Path(sys.executable).with_name("ray")
# RAY_AUTH_MODE set: Ray 2.60 otherwise turns token auth on for a `ray start` that finds ~/.ray/auth_token (which
# some Ray process writes when it is missing), while `ray status` and drivers stay off: a cluster started after
# the file appeared was never seen up ("InvalidAuthToken"). Off is safe here: the cluster's namespace has loopback only
QUIET = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


class Netns:
    """A network namespace with loopback only. A sleeping process makes it; this process then holds it
    by an open descriptor, so the namespace lives as long as the Netns is open, whatever becomes of the
    sleeper (a cluster that lost it once timed out with every `nsenter` failing: CI at 8fd5d7d)."""

    def __init__(self) -> None:
        self.holder = subprocess.Popen(["unshare", "--net", "sh", "-c", "ip link set lo up && exec sleep 86400"],
                                       start_new_session=True)
        self.fd: int | None = None
        deadline = time.monotonic() + 10
        while True:
            r = subprocess.run(["nsenter", f"--net=/proc/{self.holder.pid}/ns/net", "--", "ip", "-o", "link", "show",
                                "lo"], capture_output=True, text=True)
            if r.returncode == 0 and "UP" in r.stdout.split(">")[0]:
                self.fd = os.open(f"/proc/{self.holder.pid}/ns/net", os.O_RDONLY)
                return
            if self.holder.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"no network namespace (unshare --net): {r.stderr.strip()}")
            time.sleep(0.05)

    @property
    def prefix(self) -> list[str]:
        assert self.fd is not None, "the namespace is closed"
        return ["nsenter", f"--net=/proc/{os.getpid()}/fd/{self.fd}", "--"]

    def holder_state(self) -> str:
        """For an error message: what became of the sleeper that made the namespace."""
        rc = self.holder.poll()
        return "the namespace's sleeper runs" if rc is None else f"the namespace's sleeper exited ({rc})"

    def close(self) -> None:
        if self.holder.poll() is None:
            os.killpg(self.holder.pid, signal.SIGKILL)
        elif self.fd is not None:  # not a failure any more, but what ended it is still unknown: say so in CI's log
            warnings.warn(f"{self.holder_state()} before the cluster stopped")
        self.holder.wait()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Node:
    name: str
    proc: subprocess.Popen
    token: str
    cache: Path

    def kill(self) -> None:
        """The whole node at once (its raylet, object store and workers), as a machine lost."""
        procs = marked(self.token)
        for p in procs:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        wait_gone(procs, timeout=10)
        self.proc.wait(timeout=10)


@dataclass
class Cluster:
    root: Path
    port: int = 6379  # inside its own namespace: free
    nodes: list[Node] = field(default_factory=list)
    netns: Netns | None = None
    temp_dirs: list[Path] = field(default_factory=list)  # Ray's session folders, removed by stop()

    @property
    def run_prefix(self) -> list[str]:
        """Put before a command to run it where the cluster is (its network namespace)."""
        assert self.netns is not None, "start() the cluster first"
        return self.netns.prefix

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, name: str, head: bool, num_cpus: int, env: dict[str, str], num_gpus: int = 0) -> Node:
        self.root.mkdir(parents=True, exist_ok=True)
        token = uuid.uuid4().hex
        cache = self.root / name / "cache"
        tmp = Path("/tmp") / f"ray-{token[:8]}"  # Ray's socket paths must stay short: not under pytest's tmp
        tmp.mkdir()
        self.temp_dirs.append(tmp)
        argv = [str(RAY), "start", "--block", f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}",
                f"--resources={{\"{name}\": 1}}", "--object-store-memory=100000000", "--disable-usage-stats",
                f"--temp-dir={tmp}"]
        argv += (["--head", f"--port={self.port}", "--include-dashboard=false"] if head
                 else [f"--address={self.address}"])
        full = {**os.environ, **QUIET, **env, MARK: token, "QEVAL_CACHE": str(cache), "QEVAL_RECORDS": "off"}
        log = (self.root / f"{name}.log").open("w")
        proc = subprocess.Popen([*self.run_prefix, *argv], env=full, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        node = Node(name, proc, token, cache)
        self.nodes.append(node)
        return node

    def start(self, workers: int = 1, env: dict[str, str] | None = None, gpus: dict[str, int] | None = None) -> "Cluster":
        """`gpus`: GPUs a node declares, by its name ("head", "worker1", ...). Ray counts them and gives each task
        its own (CUDA_VISIBLE_DEVICES) without looking for hardware: placement and isolation, not CUDA."""
        gpus = gpus or {}
        self.netns = Netns()
        try:
            self._start("head", True, 1, env or {}, gpus.get("head", 0))
            self._wait(1)
            for i in range(workers):
                self._start(f"worker{i + 1}", False, 1, env or {}, gpus.get(f"worker{i + 1}", 0))
            self._wait(1 + workers)
        except BaseException:
            self.stop()
            raise
        return self


    def _wait(self, n: int, timeout: float = 120) -> None:
        import ray  # noqa: F401  (only to fail early without it)

        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.proc.poll() is not None:
                    raise RuntimeError(f"ray start for {node.name} exited: " + self._log_tail(node, 2000))
            count, last = self._count()
            if count >= n:
                return
            time.sleep(0.5)
        # all a reader needs to tell a slow start from a broken one
        logs = "\n".join(f"--- {node.name}.log\n" + self._log_tail(node, 1500) for node in self.nodes)
        raise TimeoutError(f"{n} Ray nodes not up in {timeout} s; {self.netns.holder_state()}; "
                           f"last `ray status`: {last[-1500:]}\n{logs}")

    def _log_tail(self, node: Node, chars: int) -> str:
        return (self.root / f"{node.name}.log").read_text()[-chars:]

    def _count(self) -> tuple[int, str]:
        """Nodes `ray status` lists as active, and what it said."""
        r = subprocess.run([*self.run_prefix, str(RAY), "status", f"--address={self.address}"], capture_output=True, text=True,
                           env={**os.environ, **QUIET}, timeout=60)
        said = f"exit {r.returncode}: {r.stdout[-700:]} {r.stderr[-700:]}"
        if r.returncode != 0:
            return 0, said
        text = r.stdout
        active = text.split("Active:")[1].split("Pending:")[0] if "Active:" in text else ""
        return sum(1 for line in active.splitlines() if line.strip().startswith("1 node_")), said

    def processes(self) -> list[psutil.Process]:
        """Every process of every node (its raylet, object store, workers, what their tasks started)."""
        return [p for node in self.nodes for p in marked(node.token)]

    def stop(self) -> list[psutil.Process]:
        """Every process of every node (SIGKILL: nothing of a test cluster needs a clean stop), then the
        namespace; what is left (nothing, unless a process escaped)."""
        left = []
        for node in self.nodes:
            if node.proc.poll() is None:
                os.killpg(node.proc.pid, signal.SIGKILL)
            left += marked(node.token)
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        for node in self.nodes:
            node.proc.wait(timeout=10)
        if self.netns is not None:
            self.netns.close()
        gone = wait_gone(left, timeout=10)
        for tmp in self.temp_dirs:
            shutil.rmtree(tmp, ignore_errors=True)
        return gone
