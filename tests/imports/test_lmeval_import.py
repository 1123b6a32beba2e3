"""lm-eval's `--log_samples` output read by qeval's importer: the fixture is a real lm-eval run (its README says
which); every bad input is derived from it in a temporary folder and refused naming the file and line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from qeval.errors import EXIT_USAGE, EngineError
from qeval.imports import IMPORTERS
from qeval.imports.base import BadResults, Importer
from qeval.imports.lmeval import LmEvalImporter, read_samples
from qeval.suites.lmeval import parse_samples

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "imports" / "lmeval"


def _copy(tmp_path: Path, variant: str = "bf16") -> Path:
    dest = tmp_path / variant
    shutil.copytree(FIXTURE / variant, dest)
    return dest


def _samples(folder: Path) -> Path:
    [f] = folder.glob("samples_*.jsonl")
    return f


def _results(folder: Path) -> Path:
    [f] = folder.glob("results_*.json")
    return f


def test_the_registry_finds_the_lm_eval_importer():
    cls = IMPORTERS.get("lm_eval")
    assert cls is LmEvalImporter and issubclass(cls, Importer) and cls.kind == "lm_eval"
    assert cls.claims(FIXTURE / "bf16") and cls.claims(_results(FIXTURE / "bf16"))
    assert not cls.claims(_samples(FIXTURE / "bf16"))


@pytest.mark.parametrize("variant", ["bf16", "int8"])
def test_a_real_run_imports_as_one_record_per_doc_with_lm_evals_own_figures(variant):
    got = LmEvalImporter().read(FIXTURE / variant)
    [task] = got.tasks.values()
    assert task.suite == "lm_eval/oe_arc_easy"
    assert len(task.records) == 30 and [r.item_id for r in task.records] == [str(i) for i in range(30)]
    # the same ids, hashes and scores qeval's own lm-eval suite reads from the file
    native = parse_samples(_samples(FIXTURE / variant))
    assert [(r.item_id, r.prompt_hash, r.doc_hash, r.scores) for r in task.records] == \
        [(r.item_id, r.prompt_hash, r.doc_hash, r.scores) for r in native]
    results = json.loads(_results(FIXTURE / variant).read_text())
    mean = sum(r.scores["acc"] for r in task.records) / 30
    assert mean == pytest.approx(results["results"]["oe_arc_easy"]["acc,none"])
    spec = task.declared["acc"]
    assert spec.binary and spec.higher_is_better is True and "higher_is_better.oe_arc_easy.acc" in spec.source
    assert task.identity["configs.oe_arc_easy.num_fewshot"] == 0
    assert task.identity["config.fewshot_seed"] == 1234
    assert task.advisory["lm_eval_version"] == "0.4.13" and task.advisory["config.limit"] == 30
    assert task.records[6].extra["at"] == f"{_samples(FIXTURE / variant).name}:7"
    src = got.source
    assert (src.format, src.evaluator, src.version, src.model) == ("lm_eval", "lm-eval", "0.4.13", variant)
    assert [Path(f.path).name.split("_")[0] for f in src.files] == ["results", "samples"]
    assert src.files[1].lines == 30 and len(src.files[1].sha256) == 64


def _refused(src: Path, *needles: str) -> BadResults:
    with pytest.raises(BadResults) as e:
        LmEvalImporter().read(src)
    assert e.value.exit_code == EXIT_USAGE
    for n in needles:
        assert n in str(e.value), str(e.value)
    return e.value


def test_a_truncated_last_line_is_refused_naming_the_file_and_line(tmp_path):
    d = _copy(tmp_path)
    f = _samples(d)
    text = f.read_text()
    f.write_text(text[:-200])  # cut mid-line, as a killed writer leaves it
    _refused(d, f"{f}:30:", "not JSON", "truncated?")


def test_a_duplicated_line_is_refused_naming_both_lines(tmp_path):
    d = _copy(tmp_path)
    f = _samples(d)
    lines = f.read_text().splitlines(keepends=True)
    f.write_text("".join(lines + [lines[6]]))
    _refused(d, f"{f}:31:", "doc_id 6 twice (lines 7 and 31)")


def test_a_missing_field_and_a_score_that_is_not_a_number_are_refused(tmp_path):
    d = _copy(tmp_path)
    f = _samples(d)
    lines = f.read_text().splitlines()
    s = json.loads(lines[3])
    del s["prompt_hash"]
    f.write_text("\n".join(lines[:3] + [json.dumps(s)] + lines[4:]) + "\n")
    _refused(d, f"{f}:4:", "no 'prompt_hash'")
    s = json.loads(lines[3])
    s["acc"] = "0.5"
    f.write_text("\n".join(lines[:3] + [json.dumps(s)] + lines[4:]) + "\n")
    _refused(d, f"{f}:4:", "metric 'acc' is '0.5', not a finite number")


def test_a_corpus_metric_is_not_a_per_item_score(tmp_path):
    d = _copy(tmp_path)
    f = _samples(d)
    lines = f.read_text().splitlines()
    s = json.loads(lines[0])
    s["metrics"], s["perplexity"] = ["acc", "perplexity"], -17.68  # lm-eval's per-line perplexity: a log-likelihood
    f.write_text("\n".join([json.dumps(s)] + lines[1:]) + "\n")
    _refused(d, f"{f}:1:", "'perplexity' is not a per-item score", "(perplexity)")
    # a task's own metric_list aggregating otherwise
    r = _results(d)
    doc = json.loads(r.read_text())
    doc["configs"]["oe_arc_easy"]["metric_list"][0]["aggregation"] = "median"
    r.write_text(json.dumps(doc))
    f.write_text("\n".join(lines) + "\n")
    _refused(d, f"{f}:1:", "'acc' is not a per-item score", "(median)")


def test_two_runs_in_one_folder_are_named_and_one_must_be_chosen(tmp_path):
    _copy(tmp_path, "bf16")
    _copy(tmp_path, "int8")
    e = _refused(tmp_path, "2 lm-eval runs", "name one of")
    assert str(_results(tmp_path / "int8")) in str(e)
    assert len(LmEvalImporter().read(_results(tmp_path / "int8")).tasks["lm_eval/oe_arc_easy"].records) == 30


def test_another_format_is_refused_and_named(tmp_path):
    log = tmp_path / "fp8.eval"
    log.write_bytes(b"PK\x03\x04")
    _refused(log, str(log), "not lm-eval output (no results_*.json)", "inspect log (use inspect:")
    _refused(_samples(FIXTURE / "bf16"), "not lm-eval output")


def test_a_missing_samples_file_asks_for_log_samples(tmp_path):
    d = _copy(tmp_path)
    _samples(d).unlink()
    _refused(d, "no samples file", "--log_samples")


def _line(doc_id: int, filt: str, em: float, prompt: str = "p") -> str:
    return json.dumps({"doc_id": doc_id, "filter": filt, "metrics": ["exact_match"], "exact_match": em,
                       "doc_hash": f"d{doc_id}", "prompt_hash": f"{prompt}{doc_id}", "target": "4",
                       "filtered_resps": [str(em)]})


def test_a_task_with_several_filters_gives_one_record_per_doc_with_each_filters_scores(tmp_path):
    # lm-eval writes one line per (doc, filter) (gsm8k: strict-match and flexible-extract)
    f = tmp_path / "samples_gsm.jsonl"
    f.write_text("\n".join([_line(0, "strict-match", 0), _line(0, "flexible-extract", 1),
                            _line(1, "strict-match", 1), _line(1, "flexible-extract", 1)]) + "\n")
    recs = read_samples(f, "gsm")
    assert [(r.item_id, r.scores) for r in recs] == [
        ("0", {"exact_match,strict-match": 0.0, "exact_match,flexible-extract": 1.0}),
        ("1", {"exact_match,strict-match": 1.0, "exact_match,flexible-extract": 1.0})]
    assert parse_samples(f) == recs  # qeval's own lm-eval suite: the same records, each doc once
    # `none` keeps lm-eval's plain name; a task of one filter keeps it whatever the filter is called
    f.write_text("\n".join([_line(0, "none", 0), _line(0, "maj@8", 1)]) + "\n")
    assert read_samples(f)[0].scores == {"exact_match": 0.0, "exact_match,maj@8": 1.0}
    f.write_text(_line(0, "strip", 1) + "\n")
    assert read_samples(f)[0].scores == {"exact_match": 1.0}
    # one (doc, filter) twice, or one doc's filters asked with different prompts: refused
    f.write_text("\n".join([_line(0, "strict-match", 0), _line(0, "flexible-extract", 1),
                            _line(0, "strict-match", 0)]) + "\n")
    with pytest.raises(BadResults, match=r"samples_gsm.jsonl:3: doc_id 0 twice for filter 'strict-match' \(lines 1 and 3\)"):
        read_samples(f)
    f.write_text("\n".join([_line(0, "strict-match", 0), _line(0, "flexible-extract", 1, prompt="q")]) + "\n")
    with pytest.raises(BadResults, match="lines 1 and 2 have different prompt_hashes"):
        read_samples(f)


def test_qevals_own_lm_eval_suite_reports_unreadable_output_as_lm_evals_fault(tmp_path):
    f = tmp_path / "samples_t.jsonl"
    f.write_text(_line(0, "none", 1) + "\n" + _line(0, "none", 1) + "\n")
    with pytest.raises(EngineError, match="lm-eval's output: .*doc_id 0 twice"):
        parse_samples(f)


def test_a_source_names_its_format_or_is_claimed_by_exactly_one_importer(tmp_path):
    from qeval.errors import ConfigError
    from qeval.imports.sources import parse_source

    assert IMPORTERS.every_name() == ["inspect", "lm_eval", "mlflow"]
    assert parse_source(f"bf16=lm_eval:{FIXTURE / 'bf16'}", "--baseline") == ("bf16", "lm_eval", FIXTURE / "bf16")
    assert parse_source(f"bf16={FIXTURE / 'bf16'}", "--baseline") == ("bf16", "lm_eval", FIXTURE / "bf16")
    with pytest.raises(ConfigError, match=r"no results format recognises .*fp8.eval; name it as NAME=FORMAT:PATH "
                                          r"\(formats: inspect, lm_eval, mlflow\)"):
        parse_source(f"fp8={tmp_path / 'fp8.eval'}", "--variant")
    with pytest.raises(ConfigError, match="expected NAME=FORMAT:PATH"):
        parse_source(str(FIXTURE / "bf16"), "--variant")
    # an MLflow run is a URI, named with its format or not
    assert parse_source("w4=mlflow:runs:/0a1b", "--variant") == ("w4", "mlflow", Path("runs:/0a1b"))
    assert parse_source("w4=runs:/0a1b", "--variant") == ("w4", "mlflow", Path("runs:/0a1b"))
