"""Tells a hung engine from a slow one while suites run: by its health check and its progress.

A slow engine answers `/health` and its token counters move, so its requests may take as long as the
(long) request timeout allows. A hung one (stopped, deadlocked) answers nothing: after a few failed
health checks in a row, or with requests in flight and no token made for `stall_s`, the watchdog calls
`on_hung` (the engine ends its server), so every request waiting on it fails at once and the
campaign's restart-and-resume path takes over, whichever suite (custom, logprobs, lm-eval, probe) runs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

import httpx

from .base import tls_verify
from .capabilities import MetricNames
from .prometheus import parse

# a stopped server answers nothing: 3 checks of 10 s each, 5 s apart, find it within a minute; a busy
# CPU server still answers /health (its HTTP front end is a process apart from the engine core) in well under 10 s
HEALTH_TIMEOUT_S = 10.0
INTERVAL_S = 5.0
FAILURES = 3


@dataclass(frozen=True)
class Progress:
    """What the engine's /metrics say it has done: tokens made so far, requests it is working on."""

    tokens: float
    running: float


def progress_reader(names: MetricNames) -> Callable[[str], Progress | None]:
    """/metrics text -> the engine's token counters (summed) and running-requests gauge, as its table
    names them; None without those counters."""
    running = names.gauges.get("running", ())

    def read(text: str) -> Progress | None:
        try:
            s = parse(text)
        except ValueError:
            return None
        tokens = [s.counters[n] for n in names.tokens if n in s.counters]
        if not tokens:
            return None
        gauge = next((n for n in running if n in s.gauges), None)
        return Progress(tokens=sum(tokens), running=sum(s.gauges[gauge]) if gauge else 0.0)

    return read


class Watchdog:
    """A daemon thread from `start()` to `stop()`; `reason` says why it judged the engine hung (None: it did not)."""

    def __init__(self, base_url: str, on_hung: Callable[[str], None], *, stall_s: float,
                 progress: Callable[[str], Progress | None] | None = None,
                 interval_s: float = INTERVAL_S, failures: int = FAILURES, health_timeout_s: float = HEALTH_TIMEOUT_S):
        self.base_url, self.on_hung, self.stall_s, self.progress = base_url.rstrip("/"), on_hung, stall_s, progress
        self.interval_s, self.failures, self.health_timeout_s = interval_s, failures, health_timeout_s
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def detects_within_s(self) -> float:
        """The longest a silent engine goes unnoticed."""
        return self.failures * (self.interval_s + self.health_timeout_s)

    def start(self) -> "Watchdog":
        self._thread = threading.Thread(target=self._watch, name="engine-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.health_timeout_s + 1)
        self._thread = None

    def _healthy(self, client: httpx.Client) -> bool:
        try:
            return client.get(self.base_url + "/health", timeout=self.health_timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    def _read_progress(self, client: httpx.Client) -> Progress | None:
        if self.progress is None:
            return None
        try:
            r = client.get(self.base_url + "/metrics", timeout=self.health_timeout_s)
            return self.progress(r.text) if r.status_code == 200 else None
        except httpx.HTTPError:
            return None

    def _watch(self) -> None:
        failed, last_tokens, moved_at = 0, None, time.monotonic()
        with httpx.Client(verify=tls_verify(self.base_url)) as client:
            while not self._stop.wait(self.interval_s):
                if not self._healthy(client):
                    failed += 1
                    if failed >= self.failures:
                        return self._hung(f"the engine stopped answering: {failed} health checks in a row failed "
                                          f"({self.health_timeout_s:.0f} s each)")
                    continue
                failed = 0
                p = self._read_progress(client)
                now = time.monotonic()
                if p is None or p.running == 0 or p.tokens != last_tokens:
                    last_tokens, moved_at = (p.tokens if p else None), now
                elif now - moved_at > self.stall_s:
                    return self._hung(f"the engine made no token in {now - moved_at:.0f} s with "
                                      f"{p.running:.0f} request(s) running")

    def _hung(self, reason: str) -> None:
        if not self._stop.is_set():
            self.reason = reason
            self.on_hung(reason)
