"""A local MLflow tracking server (SQLite store, local artifacts, loopback), started and stopped by qeval."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import httpx

from ..engines.process import ServerProcess, free_port, stop_grace
from ..errors import QevalError


class MlflowServer:
    """`mlflow server` on 127.0.0.1 and a free port; a context manager, like the engines."""

    def __init__(self, store_dir: Path, host: str = "127.0.0.1", port: int | None = None,
                 startup_timeout_s: float = 180):
        self.store_dir, self.host, self.port = store_dir, host, port
        self.startup_timeout_s = startup_timeout_s
        self.proc: ServerProcess | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> str:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port(self.host)
        mlflow_bin = Path(sys.executable).with_name("mlflow")
        argv = [str(mlflow_bin), "server", "--host", self.host, "--port", str(self.port),
                "--backend-store-uri", f"sqlite:///{(self.store_dir / 'mlflow.db').resolve()}",
                "--default-artifact-root", str((self.store_dir / "mlartifacts").resolve()),
                "--artifacts-destination", str((self.store_dir / "mlartifacts").resolve()), "--workers", "1"]
        self.proc = ServerProcess(argv, dict(os.environ), self.store_dir / "mlflow-server.log")
        self.proc.spawn()
        try:
            return self._wait_healthy()
        except BaseException as e:  # Ctrl-C while it starts: `with` never reaches __exit__, so stop it here
            self.stop(stop_grace(e, 15))
            raise

    def _wait_healthy(self) -> str:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if not self.proc.alive():
                raise QevalError(f"MLflow server exited during start-up:\n{self.proc.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self.url
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise QevalError(f"MLflow server not healthy after {self.startup_timeout_s:.0f} s:\n{self.proc.log_tail()}")

    def stop(self, grace_s: float = 15) -> None:
        if self.proc is not None:
            self.proc.terminate(grace_s=grace_s)
            self.proc = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop(stop_grace(exc, 15))


def runs_table_urls(url: str) -> dict[str, str]:
    """Each experiment's runs table in the MLflow UI, by name. MLflow 3 opens on its GenAI overview;
    `workflowType=machine_learning` is what shows the classic runs table with params and metrics."""
    from mlflow.tracking import MlflowClient

    return {e.name: f"{url}/#/experiments/{e.experiment_id}/runs?workflowType=machine_learning"
            for e in MlflowClient(tracking_uri=url).search_experiments() if e.name != "Default"}
