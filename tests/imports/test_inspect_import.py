"""inspect_ai eval logs, written by inspect_ai itself (tests/imports/inspect_logs.py: a 12-sample task, `includes()`,
`mockllm/model` answering right on items chosen per run), read by qeval's importer and compared: the per-item values
are inspect's own, the flips exact, epochs read through the log's reductions; a value qeval cannot read as declared,
and a gated metric nobody declared, exit 2 naming the file and the place."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("inspect_ai", reason="inspect-ai (the dev extra) writes the logs these tests read")

from qeval.imports.inspect_log import InspectImporter, doc_hash, prompt_hash  # noqa: E402
from qeval.record.run import RunRecord  # noqa: E402

from .comparisons import compare_file, comparison_file, refused  # noqa: E402
from .inspect_logs import BASE_RIGHT, CAND_RIGHT, N  # noqa: E402

HERE = Path(__file__).resolve().parent
GATES = {"rules": [{"match": "*", "margin": 0.2, "alpha": 0.05}]}


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("inspect-logs")
    p = subprocess.run([sys.executable, str(HERE / "inspect_logs.py"), str(out)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def _records(path: Path) -> dict:
    [task] = InspectImporter().read(path).tasks.values()
    return {r.item_id: r for r in task.records}


def _file(tmp_path: Path, base: Path, cand: Path, gates: dict = GATES, **extra) -> Path:
    return comparison_file(tmp_path, "inspect", ("a", "b"), base, cand, gates, **extra)


def _compare(path: Path) -> RunRecord:
    return compare_file(path).record


_refused = refused


def _edited(logs: Path, tmp_path: Path, name: str, edit) -> Path:
    doc = json.loads((logs / name).read_text())
    edit(doc)
    dest = tmp_path / name
    dest.write_text(json.dumps(doc))
    return dest


def test_each_items_value_is_the_one_inspect_reads_from_its_own_log(logs):
    expected = json.loads((logs / "expected.json").read_text())
    assert len(expected) == 6
    for name, values in expected.items():
        got = _records(logs / name)
        assert {i: r.scores["includes"] for i, r in got.items()} == values, name
    # the archive and the JSON log of one run are the same records
    for run in ("base", "cand"):
        a, b = _records(logs / f"{run}.eval"), _records(logs / f"{run}.json")
        assert {i: (r.scores, r.prompt_hash, r.doc_hash) for i, r in a.items()} == \
            {i: (r.scores, r.prompt_hash, r.doc_hash) for i, r in b.items()}
    sample = json.loads((logs / "base.json").read_text())["samples"][0]
    r = _records(logs / "base.json")[str(sample["id"])]
    assert (r.prompt_hash, r.doc_hash) == (prompt_hash(sample), doc_hash(sample))
    assert r.extra["at"] == "base.json:samples[0] (sample 0, epoch 1)"


def test_the_command_line_compares_two_runs_with_exact_flips(logs, tmp_path):
    policy = tmp_path / "gates.yaml"
    policy.write_text(yaml.safe_dump(GATES))
    out = tmp_path / "runs" / "cmp"
    p = subprocess.run([sys.executable, "-m", "qeval.cli", "compare", "--baseline", f"a=inspect:{logs / 'base.eval'}",
                        "--variant", f"b={logs / 'cand.json'}", "--policy", str(policy), "--out", str(out),
                        "--no-mlflow"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode in (0, 1), p.stderr + p.stdout
    r = RunRecord.load(out / "run.json")
    [c] = r.comparisons
    assert (c.suite, c.metric, c.n_paired, c.unpaired_base, c.unpaired_variant) == ("inspect/capitals", "includes",
                                                                                  N, 0, 0)
    assert c.binary and c.higher_is_better and c.p_method and "mcnemar" in c.p_method.lower()
    # McNemar's discordant pairs: the items only the baseline got right, and only the variant
    assert (c.flips_base_only, c.flips_variant_only) == (len(BASE_RIGHT - CAND_RIGHT), len(CAND_RIGHT - BASE_RIGHT))
    assert (c.base_mean, c.variant_mean) == pytest.approx((len(BASE_RIGHT) / N, len(CAND_RIGHT) / N))
    v = next(x for x in r.variants if x.name == "b")
    assert (v.imported.format, v.imported.evaluator, v.imported.version, v.imported.model) == \
        ("inspect", "inspect_ai", "0.3.285", "mockllm/model")
    assert [Path(f.path).name for f in v.imported.files] == ["cand.json"]
    assert p.returncode == (0 if r.verdict == "PASS" else 1)


def test_several_epochs_are_read_through_the_logs_reductions(logs, tmp_path):
    expected = json.loads((logs / "expected.json").read_text())
    r = _compare(_file(tmp_path, logs / "base3.json", logs / "cand3.json"))
    [c] = r.comparisons
    base, cand = expected["base3.json"], expected["cand3.json"]
    assert c.n_paired == N and not c.binary and c.higher_is_better  # a mean over 3 epochs is not 0/1
    assert (c.base_mean, c.variant_mean) == pytest.approx((sum(base.values()) / N, sum(cand.values()) / N))
    assert c.delta == pytest.approx(sum(cand[i] - base[i] for i in base) / N)


def test_partial_credit_is_compared_only_where_declared_continuous(logs, tmp_path):
    graded = logs / "graded.json"
    _refused(_file(tmp_path, graded, graded), "inspect/graded: metric 'model_graded_qa' has partial credit (P) but "
             "is not declared", "type: continuous")
    binary = [{"match": "inspect/graded/model_graded_qa", "type": "binary", "higher_is_better": True}]
    _refused(_file(tmp_path, graded, graded, metrics=binary), "is declared 0/1 (metrics[0] in")
    continuous = [{"match": "inspect/*/model_graded_qa", "type": "continuous", "higher_is_better": True}]
    [c] = _compare(_file(tmp_path, graded, graded, metrics=continuous)).comparisons
    assert not c.binary and c.base_mean == pytest.approx((N - 2 + 2 * 0.5) / N) and c.delta == 0


def test_a_value_inspect_would_read_as_zero_is_refused(logs, tmp_path):
    worded = logs / "worded.json"
    _refused(_file(tmp_path, worded, worded), f"{worded}:samples[3] (sample 3, epoch 1): score 'verdict_word' is "
             "'maybe'")


def _renamed(doc: dict) -> None:
    """The same run scored by a scorer qeval's table does not know."""
    doc["eval"]["scorers"][0]["name"] = "judge"
    for s in doc["results"]["scores"]:
        s["name"] = s["scorer"] = "judge"
    for s in doc["samples"]:
        s["scores"] = {"judge": s["scores"]["includes"]}


def test_a_gated_metric_no_one_declared_exits_2_with_the_lines_to_add(logs, tmp_path):
    base, cand = _edited(logs, tmp_path, "base.json", _renamed), _edited(logs, tmp_path, "cand.json", _renamed)
    _refused(_file(tmp_path, base, cand), "inspect/capitals/judge",
             '- {match: "inspect/capitals/judge", type: binary|continuous, higher_is_better: true|false}')
    declared = tmp_path / "metrics.yaml"
    declared.write_text(yaml.safe_dump({"metrics": [{"match": "inspect/capitals/judge", "type": "binary",
                                                     "higher_is_better": True}]}))
    policy = tmp_path / "gates.yaml"
    policy.write_text(yaml.safe_dump(GATES))
    out = tmp_path / "runs" / "declared"
    p = subprocess.run([sys.executable, "-m", "qeval.cli", "compare", "--baseline", f"a=inspect:{base}",
                        "--variant", f"b=inspect:{cand}", "--policy", str(policy), "--metrics", str(declared),
                        "--out", str(out), "--no-mlflow"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode in (0, 1), p.stderr + p.stdout
    [c] = RunRecord.load(out / "run.json").comparisons
    assert c.binary and c.flips_base_only == 2 and c.flips_variant_only == 1
    # the evaluator's declaration and the file's disagreeing is refused naming both
    wrong = [{"match": "inspect/capitals/includes", "type": "continuous", "higher_is_better": True}]
    _refused(_file(tmp_path, logs / "base.json", logs / "cand.json", metrics=wrong),
             "declared continuous", "metrics[0] in", "inspect's includes scorer")


def test_an_errored_sample_is_unpaired_with_its_reason(logs, tmp_path):
    def errored(doc):
        doc["samples"][5]["error"] = {"message": "RuntimeError: the sandbox went away", "traceback": ""}
    cand = _edited(logs, tmp_path, "cand.json", errored)
    r = _compare(_file(tmp_path, logs / "base.json", cand))
    [c] = r.comparisons
    assert (c.n_paired, c.unpaired_base, c.unpaired_variant) == (N - 1, 1, 0)
    facts = next(x for x in r.variants if x.name == "b").imported.tasks["inspect/capitals"]
    assert facts.unpaired == {"baseline": ["5"]}
    assert facts.dropped == {"variant": {"5": "errored (samples[5] (sample 5, epoch 1): RuntimeError: the sandbox "
                                                "went away)"}}
    report = (tmp_path / "runs" / "cmp" / "report.md").read_text()
    assert "b, inspect/capitals: variant's item 5 has no score: errored (samples[5]" in report


@pytest.mark.parametrize("edit, needles", [
    (lambda d: d["eval"].update(model_generate_config={"temperature": 0.7}),
     ["eval.model_generate_config differs", "variant b"]),
    (lambda d: d["eval"]["config"].update(epochs=2), ["eval.config.epochs differs"]),
    (lambda d: d["plan"]["steps"][0]["params"].update(tool_calls="none"), ["plan.steps differs"]),
    (lambda d: d["samples"][4].update(input="What is the capital of country four?"),
     ["item 4: doc_hash differs", "base.json:samples[4] (sample 4, epoch 1)"]),
    (lambda d: d.update(status="error"), ["the eval's status is 'error'"]),
    (lambda d: d.update(version=1), ["inspect log version 1"]),
    (lambda d: d["samples"].append(d["samples"][0]), ["sample 0 epoch 1 twice (samples[0]"]),
])
def test_what_makes_two_logs_incomparable_exits_2_naming_it(logs, tmp_path, edit, needles):
    cand = _edited(logs, tmp_path, "cand.json", edit)
    _refused(_file(tmp_path, logs / "base.json", cand), str(cand), *needles)


def test_an_inspect_log_given_as_lm_eval_output_is_named_as_such(logs, tmp_path):
    bad = _file(tmp_path, logs / "base.json", logs / "cand.eval")
    doc = yaml.safe_load(bad.read_text())
    doc["variants"][0]["results"]["format"] = "lm_eval"
    bad.write_text(yaml.safe_dump(doc))
    _refused(bad, "not lm-eval output", "it looks like an inspect log (use inspect:")
    folder = tmp_path / "logs"
    folder.mkdir()
    shutil.copy(logs / "base.json", folder)
    _refused(_file(tmp_path, logs / "base.json", folder), "a folder of inspect logs: name one log: base.json")


def test_a_dict_valued_score_is_one_metric_per_key_and_declared_by_no_table(logs, tmp_path):
    def split(doc):
        for s in doc["samples"]:
            s["scores"]["includes"]["value"] = {"right": s["scores"]["includes"]["value"], "style": 0.25}
    got = _records(_edited(logs, tmp_path, "base.json", split))
    assert {i: r.scores for i, r in got.items()} == {str(i): {"includes.right": float(i in BASE_RIGHT),
                                                              "includes.style": 0.25} for i in range(N)}
    [task] = InspectImporter().read(tmp_path / "base.json").tasks.values()
    assert task.declared == {}  # includes' table entry is for its C/I value, not for keys a changed scorer gives


def test_a_log_without_samples_is_refused(logs, tmp_path):
    bare = _edited(logs, tmp_path, "cand.json", lambda d: d.pop("samples"))
    _refused(_file(tmp_path, logs / "base.json", bare), f"{bare}:samples: the log has no samples")
