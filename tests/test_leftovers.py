"""A failing test leaves nothing running: the `spawn` fixture kills what it started, pass or fail."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil

from .conftest import describe, wait_gone

ROOT = Path(__file__).resolve().parents[1]


def test_a_failing_test_leaves_no_process_behind(tmp_path):
    pids_file = tmp_path / "pids"
    inner = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                            str(ROOT / "tests" / "leftovers_inner.py")], cwd=ROOT, capture_output=True, text=True,
                           env={**_env(), "PIDS_FILE": str(pids_file)}, timeout=300)
    # failing on purpose, and only after it saw both processes running (tests/leftovers_inner.py)
    assert inner.returncode == 1 and "AssertionError: failing on purpose" in inner.stdout, \
        inner.stdout[-3000:] + inner.stderr
    child, server = (int(x) for x in pids_file.read_text().split())
    procs = []
    for pid in (child, server):
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:  # gone: as it should be
            continue
    left = wait_gone(procs, timeout=5)
    try:
        assert not left, describe(left)  # the child and the server it started in a session of its own
    finally:
        for p in left:  # were the fixture broken, still end them here
            p.kill()


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
