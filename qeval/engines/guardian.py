"""Ends a child's process group once the process that started it is gone (run as a script, stdlib only).

Why: the kernel's parent-death signal reaches only the direct child (vLLM's API server), and only when the
starting *thread* ends; a Ray worker killed mid-variant would leave vLLM's engine core holding its GPU
memory. This process sits in a session of its own, so whatever ends the starter
does not end it; it exits by itself as soon as the group is gone.

usage: python -I guardian.py STARTER_PID PGID GRACE_S
"""

import os
import signal
import sys
import time

POLL_S = 0.5


def group_alive(pgid: int) -> bool:
    """A member of the group still runs. Zombies do not count: where PID 1 reaps no orphans (a container's
    init, a CI job's), a dead server stays a zombie for ever and kill(0) would still find it."""
    if os.path.isdir("/proc"):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()  # after the command name, which may hold spaces
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                return True
        return False
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal still exists
        return True


def main(starter: int, pgid: int, grace_s: float) -> None:
    while group_alive(pgid):
        if os.getppid() != starter:  # reparented: the starter is gone, nobody else will stop the group
            os.killpg(pgid, signal.SIGTERM)
            os.killpg(pgid, signal.SIGCONT)
            deadline = time.monotonic() + grace_s
            while group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)
            return
        time.sleep(POLL_S)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the starter's to handle, not ours
    try:
        main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))
    except ProcessLookupError:
        pass  # the group ended between the check and the signal
