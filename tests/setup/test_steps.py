"""Setup's steps side by side: each starts once the steps it needs are done, a failure starts nothing more and
is raised after the running ones end, and one worker keeps the given order."""

from __future__ import annotations

import threading
import time

import pytest

from qeval.setup.steps import Step, run_steps


def _recorder():
    log: list[str] = []
    lock = threading.Lock()

    def step(name: str, seconds: float = 0.0, fail: bool = False):
        def run():
            with lock:
                log.append(f"start {name}")
            time.sleep(seconds)
            with lock:
                log.append(f"end {name}")
            if fail:
                raise RuntimeError(f"{name} failed")
            return name.upper()
        return run

    return log, step


def test_steps_wait_for_what_they_need_and_independent_ones_overlap():
    log, step = _recorder()
    steps = [Step("vllm", step("vllm", 0.3)), Step("llmc", step("llmc", 0.1)),
             Step("modelopt", step("modelopt", 0.05), ("llmc",)), Step("model", step("model", 0.05), ("llmc",))]
    assert run_steps(steps, workers=4) == {"vllm": "VLLM", "llmc": "LLMC", "modelopt": "MODELOPT", "model": "MODEL"}
    assert log.index("end llmc") < log.index("start modelopt") and log.index("end llmc") < log.index("start model")
    # the overlay and the model ran while the long env was still building
    assert log.index("start modelopt") < log.index("end vllm") and log.index("start model") < log.index("end vllm")


def test_one_worker_runs_them_in_the_given_order():
    log, step = _recorder()
    run_steps([Step("a", step("a")), Step("b", step("b")), Step("c", step("c"), ("a",))], workers=1)
    assert log == ["start a", "end a", "start b", "end b", "start c", "end c"]


def test_a_failure_lets_the_running_steps_finish_starts_no_other_and_is_raised():
    log, step = _recorder()
    steps = [Step("llmc", step("llmc", 0.05, fail=True)), Step("vllm", step("vllm", 0.3)),
             Step("modelopt", step("modelopt"), ("llmc",)), Step("late", step("late"))]
    with pytest.raises(RuntimeError, match="llmc failed"):
        run_steps(steps, workers=2)
    assert "end vllm" in log  # the running one finished
    assert "start modelopt" not in log and "start late" not in log  # nothing started after the failure


def test_an_unknown_or_circular_need_is_refused():
    with pytest.raises(ValueError, match="unknown"):
        run_steps([Step("a", lambda: 1, ("b",))], workers=2)
    with pytest.raises(ValueError, match="wait on each other"):
        run_steps([Step("a", lambda: 1, ("b",)), Step("b", lambda: 2, ("a",))], workers=2)
