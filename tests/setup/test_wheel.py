"""qeval as a team installs it: `python -m build` makes a wheel that carries what qeval reads at run time, and
that wheel, installed into a fresh venv, runs `qeval --help` and validates the demo campaign against the
machine's cache (built by `make setup`)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from qeval.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DEMO = next((p for p in (ROOT / "examples" / "demo.yaml", ROOT / "configs" / "demo.yaml") if p.is_file()), None)


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_the_built_wheel_installs_and_runs_from_a_fresh_venv(tmp_path):
    assert DEMO is not None, "examples/demo.yaml"
    # neither this tree nor the test's venv may be what the installed qeval imports
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV"))}
    r = _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), str(ROOT)],
             tmp_path, env, 600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    wheel = next((tmp_path / "dist").glob("qeval-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("qeval/workers/convert_gguf.py", "qeval/workers/quantize_llmc.py",
                   "qeval/emulate/avx2/sitecustomize.py", "qeval/setup/locks/cuda-vllm.txt",
                   "qeval/setup/locks/cuda-llmc.txt", "qeval/setup/locks/modelopt.txt", "qeval/setup/install.sh"):
        assert needed in names, needed

    venv = tmp_path / "venv"
    r = _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env, 300)
    assert r.returncode == 0, r.stderr
    r = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], tmp_path, env, 1200)
    assert r.returncode == 0, r.stderr[-3000:]
    qeval = str(venv / "bin" / "qeval")

    r = _run([qeval, "--help"], tmp_path, env, 120)
    assert r.returncode == 0, r.stderr
    for command in ("run", "validate", "setup", "kit"):
        assert f" {command} " in r.stdout, command
    r = _run([str(venv / "bin" / "python"), "-c", "import qeval, sys; print(qeval.__file__)"], tmp_path, env, 60)
    assert r.stdout.strip().startswith(str(venv)), r.stdout  # the installed copy, not this tree

    cache = Settings.from_env().cache  # the machine's tool envs, model and data
    r = _run([qeval, "validate", str(DEMO)], tmp_path, {**env, "QEVAL_CACHE": str(cache)}, 600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"{DEMO}: ok" in r.stdout and "lm-eval tasks" in r.stdout

    r = _run([qeval, "validate", str(tmp_path / "missing.yaml")], tmp_path, env, 120)
    assert r.returncode == 2 and "missing.yaml" in r.stderr
