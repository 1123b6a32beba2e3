"""Shared by every test: subprocesses that cannot outlive the test that started them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import psutil
import pytest

from qeval.engines.process import is_alive

# every test's campaigns stand alone: none reads suites another test stored in the machine's shared store
# (tests of that sharing give their own); set before any Settings.from_env, a session fixture's included
os.environ["QEVAL_RECORDS"] = "off"


def wait_gone(procs: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until every process has exited (a zombie counts as gone); the ones still alive."""
    procs = list(procs)
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in procs if is_alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def describe(procs: Iterable[psutil.Process]) -> list[str]:
    """pid and command line of each process, for an assertion message; never raises on a dead one."""
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid}: {' '.join(p.cmdline()[:4])}")
        except psutil.Error:
            out.append(f"{p.pid}: (gone)")
    return out


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


MARK = "QEVAL_TEST_SPAWN"  # in a spawned process's environment, inherited by everything it starts


def marked(token: str) -> list[psutil.Process]:
    """Processes whose environment carries this token: a spawned process's descendants, also the ones
    orphaned when their parent died (they are no longer its children, and servers leave its group)."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and p.environ().get(MARK) == token:
                out.append(p)
        except psutil.Error:
            continue
    return out


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


@dataclass(frozen=True)
class Seen:
    """What a search for processes found while they ran (see `sees`): the proof that the same search, run
    again afterwards, would see them still there."""

    find: Callable[[], list[psutil.Process]]
    procs: tuple[psutil.Process, ...]

    def assert_gone(self, timeout: float = 5) -> None:
        """Every process seen, and every one the search finds now, has exited (within `timeout`)."""
        left = wait_gone([*self.procs, *self.find()], timeout)
        assert not left, f"still running: {describe(left)}"


def sees(find: Callable[[], list[psutil.Process]], *kinds: str) -> Seen:
    """The positive control of a "nothing left running" check: the search, run while the processes live, must
    find one of each kind (a part of its command line: "fake_server.py", "raylet"); else a check that they are
    gone afterwards would pass however the search failed (the marker not reaching a server, say).
    `sees(find, kind).assert_gone()` is the whole check."""
    found = find()
    missing = [k for k in kinds if not any(k in _cmdline(p) for p in found)]
    assert found and not missing, f"the search sees no {missing or 'process'} while they run, among {describe(found)}"
    return Seen(find, tuple(found))


def sees_marked(token: str, *kinds: str) -> Seen:
    """`sees` with the search for what a spawned process (or a test's own marked environment) started."""
    return sees(lambda: marked(token), *kinds)


def kill_tree(proc: subprocess.Popen, token: str) -> None:
    """SIGKILL a process started in its own group: the group, then every process that carries its
    token (servers start sessions of their own, so they are not in its group), then reap it."""
    tree = [*descendants(proc.pid), *marked(token)]
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for p in tree:
        try:
            if is_alive(p):
                p.kill()
        except psutil.Error:
            pass
    proc.wait()
    wait_gone(tree, timeout=10)


@pytest.fixture
def spawn(request) -> Callable[..., subprocess.Popen]:
    """`spawn(argv, **popen_kwargs) -> Popen`: started in a process group of its own, its environment
    marked; at teardown, pass or fail, its group and every process it started are killed."""
    started: list[tuple[subprocess.Popen, str]] = []

    def _spawn(argv, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
        token = uuid.uuid4().hex
        env = {**(os.environ if env is None else env), MARK: token}
        proc = subprocess.Popen(argv, start_new_session=True, env=env, **kwargs)
        proc.test_token = token  # marked(proc.test_token): whatever it started that is still there
        started.append((proc, token))
        return proc

    def _finalize() -> None:
        for proc, token in started:
            kill_tree(proc, token)

    request.addfinalizer(_finalize)
    return _spawn


@pytest.fixture(scope="session")
def stopped_campaign(tmp_path_factory):
    """A real record of sequential gates on the fake engine (tests/pipeline/test_sequential_pipeline.py's campaign)
    with stop_variant_on_fail: `bad` FAILs custom/facts at 100 of 400 items and skips custom/sums
    (NOT_RUN); `same` PASSes both at 200 of 400. Run once for the report, tracking and CLI tests."""
    from tests.pipeline.test_sequential_pipeline import _run

    gates = ("{rules: [{match: '*', margin: 0.05}], stop_variant_on_fail: true, "
             "sequential: {method: gsd, look_every: 100, min_items: 100}}")
    return _run(tmp_path_factory.mktemp("stopped"), gates)


def small_campaign(tmp_path: Path, model: str = "{builtin: smollm2-135m-instruct}",
                   variant: str = "{name: q, method: rtn}", extra: str = "") -> Path:
    """A campaign file of one variant and one custom suite, for tests that load or check a campaign."""
    path = tmp_path / "c.yaml"
    path.write_text(f"""name: t
model: {model}
output_dir: {tmp_path}/runs
baseline: {{name: base, method: bf16}}
variants:
  - {variant}
suites:
  - {{kind: custom, path: {Path(__file__).resolve().parent.parent}/suites/custom/capitals.yaml}}
""" + extra)
    return path


def _plain(value):
    """What yaml.safe_dump writes: paths as their text, tuples as lists, all the way down."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def campaign_file(root: Path, *, name: str = "t", model: dict | None = None, output_dir: str | Path | None = "runs",
                  baseline: dict | None = None, variants: Iterable[dict] = (), engine: dict | None = None,
                  suites: Iterable[dict] | None = None, probe: dict | None = None, gates: dict | str | None = None,
                  mlflow: dict | None = None, extra: dict | None = None, file: str = "c.yaml") -> Path:
    """A campaign file `root/file`, written from plain data (paths may be Path objects; `gates` a policy or the
    path of a policy file). The model defaults to ck/base (a fake_checkpoint's folder), the baseline to bf16
    `base`; a section left at None is not written, so qeval's default holds; `extra` adds top-level keys after
    the others. Short mappings are written inline (`mlflow: {enabled: false}`), so a test may still add a line
    after one. qeval reads relative paths from the file's folder."""
    import yaml

    cfg = {"name": name, "model": {"path": "ck/base"} if model is None else model, "output_dir": output_dir,
           "baseline": {"name": "base", "method": "bf16"} if baseline is None else baseline,
           "variants": list(variants), "engine": engine, "suites": None if suites is None else list(suites),
           "probe": probe, "gates": gates, "mlflow": mlflow, **(extra or {})}
    path = root / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(_plain({k: v for k, v in cfg.items() if v is not None}), sort_keys=False,
                                   default_flow_style=None, width=120))
    return path


def fake_checkpoint(root: Path, name: str, spec) -> str:
    """A fake engine's checkpoint (a FakeEngineSpec) at root/ck/name; its path as a campaign under root names it."""
    from qeval.engines.fake import write_checkpoint

    write_checkpoint(root / "ck" / name, spec)
    return f"ck/{name}"
