"""Run only by tests/test_leftovers.py, in a pytest of its own: a test that starts a child (which starts
a server-like grandchild in a session of its own, as qeval starts vLLM), sees both with the search the
`spawn` fixture's clean-up uses, and then fails."""

import os
import sys
import time
from pathlib import Path

from tests.conftest import sees_marked

CHILD = """
import os, subprocess, sys, time
from pathlib import Path

from tests.conftest import sees_marked
server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
Path(os.environ["PIDS_FILE"]).write_text(f"{os.getpid()} {server.pid}")
time.sleep(600)
"""


def test_starts_a_child_and_fails(spawn):
    pids = Path(os.environ["PIDS_FILE"])
    proc = spawn([sys.executable, "-c", CHILD])
    deadline = time.monotonic() + 60
    while not pids.exists() or len(pids.read_text().split()) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    live = sees_marked(proc.test_token, "time.sleep(600)")  # the positive control of the outer test's check
    assert {int(x) for x in pids.read_text().split()} <= {p.pid for p in live.procs}
    assert 1 == 2, "failing on purpose, with its processes running"
