"""`qeval data bigbench TASK`: one more BIG-bench task's data from the sdist `make setup` downloaded, with a
task YAML to start from; the same extraction `make setup` runs for the shipped five (standard library only)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from qeval.settings import Settings
from qeval.suites.bigbench import SDIST, SHIPPED, TASKS
from qeval.suites.lmeval import resolve_tasks
from qeval.suites.spec import LmEvalSuiteRef

ROOT = Path(__file__).resolve().parents[2]

CHOICE = {"examples": [{"input": "home town", "target_scores": {"town center": 0, "native city": 1}},
                       {"input": "sun", "target_scores": {"star": 1, "moon": 0}}]}
ANSWER = {"examples": [{"input": "What is 12 plus 30?", "target": ["42", "forty-two"]}]}


def _sdist(path: Path, tasks: dict[str, object]) -> Path:
    """A stand-in for bigbench-1.0.0.tar.gz: the same layout, a few tasks."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for rel, content in tasks.items():
            data = content if isinstance(content, bytes) else json.dumps(content).encode()
            info = tarfile.TarInfo(TASKS + rel)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def cache(tmp_path) -> Path:
    cache = tmp_path / "cache"
    _sdist(cache / "data" / ".download" / SDIST, {
        "phrase_relatedness/task.json": json.dumps(CHOICE, indent=2).encode(),
        "phrase_relatedness/README.md": b"# not a task\n",
        "arithmetic/task.json": {"name": "arithmetic", "description": "parent"},
        "arithmetic/2_digit_addition/task.json": ANSWER,
        "arithmetic/2_digit_subtraction/task.json": ANSWER,
        "programmatic_one/task.py": b"class Task: ...\n",
        **{f"{t}/task.json": CHOICE for t in SHIPPED}})
    return cache


def qeval(cache: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "QEVAL_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "qeval.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_one_more_task_with_a_yaml_that_resolves(cache, tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    r = qeval(cache, "data", "bigbench", "phrase_relatedness", "arithmetic/2_digit_addition", "--yaml", str(tasks))
    assert r.returncode == 0, r.stderr
    data = cache / "data" / "bigbench"
    assert f"phrase_relatedness: 2 examples in {data / 'phrase_relatedness/task.jsonl'}" in r.stdout
    assert (data / "phrase_relatedness" / "task.json").read_bytes() == json.dumps(CHOICE, indent=2).encode()
    rows = [json.loads(x) for x in (data / "phrase_relatedness" / "task.jsonl").read_text().splitlines()]
    assert rows[0] == {"id": "0", "input": "home town", "choices": ["town center", "native city"], "gold": 1,
                       "target": "native city"}
    mc, gen = (tasks / "bb_phrase_relatedness.yaml").read_text(), (tasks / "bb_2_digit_addition.yaml").read_text()
    assert "output_type: multiple_choice" in mc and "output_type: generate_until" in gen
    ref = LmEvalSuiteRef(kind="lm_eval", tasks=["bb_phrase_relatedness", "bb_2_digit_addition"], include_path=tasks)
    resolved = resolve_tasks(ref, cache / "data")  # the data files it names exist and are hashed
    assert [t.output_type for t in resolved] == ["multiple_choice", "generate_until"]
    (tasks / "bb_phrase_relatedness.yaml").write_text(mc + "# mine\n")
    again = qeval(cache, "data", "bigbench", "phrase_relatedness", "--yaml", str(tasks))
    assert again.returncode == 0 and "exists: kept as it is" in again.stdout
    assert (tasks / "bb_phrase_relatedness.yaml").read_text().endswith("# mine\n")


@pytest.mark.parametrize("task, says", [
    ("arithmetic", "arithmetic has no examples of its own: name one of its subtasks (arithmetic/1_digit_addition, "
                   "arithmetic/2_digit_addition, arithmetic/2_digit_subtraction)"),
    ("programmatic_one", "programmatic_one is a programmatic BIG-bench task (task.py)"),
    ("phrase_relatednes", "phrase_relatednes is not a BIG-bench task (did you mean phrase_relatedness?)"),
])
def test_what_cannot_be_extracted_is_exit_2_saying_why(cache, task, says):
    r = qeval(cache, "data", "bigbench", task)
    assert r.returncode == 2 and says in r.stderr, r.stderr
    assert not (cache / "data" / "bigbench").exists()  # nothing half-written


def test_without_the_sdist_it_says_how_to_get_it(tmp_path):
    r = qeval(tmp_path / "empty", "data", "bigbench", "phrase_relatedness")
    assert r.returncode == 3 and "the bigbench sdist not found" in r.stderr and "qeval setup" in r.stderr


def test_make_setup_extracts_the_shipped_five_with_the_standard_library_only(cache, tmp_path):
    out = tmp_path / "out"
    # -S: no site-packages, so no qeval dependency can be imported (any Python can run the extraction)
    r = subprocess.run([sys.executable, "-S", "-m", "qeval.suites.bigbench", str(cache / "data/.download" / SDIST),
                        str(out)], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert sorted(p.parent.relative_to(out).as_posix() for p in out.rglob("task.jsonl")) == sorted(SHIPPED)


@pytest.mark.slow
def test_a_real_bigbench_task_is_extracted_and_passes_the_pre_flight(tmp_path):
    real = Settings.from_env()
    sdist = real.data / ".download" / SDIST
    if not sdist.is_file() or not real.vllm.exists():  # a failure, not a skip: `make setup` makes both
        pytest.fail(f"not built: {sdist} / {real.vllm.location}; run `make setup`")
    cache = tmp_path / "cache"
    (cache / "data" / ".download").mkdir(parents=True)
    (cache / "data" / ".download" / SDIST).symlink_to(sdist)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    r = qeval(cache, "data", "bigbench", "phrase_relatedness", "--yaml", str(tasks))
    assert r.returncode == 0 and "phrase_relatedness: 100 examples" in r.stdout, r.stderr
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text("{}")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: t\nmodel: {{path: ck}}\nbaseline: {{name: base, method: bf16}}\nvariants: "
                   f"[{{name: q, method: int8}}]\nsuites:\n  - {{kind: lm_eval, include_path: {tasks}, "
                   f"tasks: [bb_phrase_relatedness]}}\n")
    env = {**os.environ, "QEVAL_CACHE": str(cache), "QEVAL_VLLM_PYTHON": str(real.vllm.python),
           "PYTHONPATH": str(ROOT)}
    v = subprocess.run([sys.executable, "-m", "qeval.cli", "validate", str(cfg)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert v.returncode == 0, v.stderr
    assert "lm-eval data: 1 task loads here, offline (1 checked" in v.stdout
