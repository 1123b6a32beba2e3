"""MLflow GenAI evaluation runs, made by `mlflow.genai.evaluate` itself on a local SQLite tracking store (a `predict_fn`
and code scorers, no judge model): read item by item as compare_evaluations reads them, then compared by
`qeval compare`; and what qeval cannot read as one value an item, refused naming the trace."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from qeval.errors import EXIT_USAGE
from qeval.imports.base import BadResults
from qeval.imports.mlflow_eval import MlflowImporter, inputs_hash
from qeval.record.run import RunRecord

from .comparisons import comparison_file, refused

QUESTIONS = 12
WRONG = {"bf16": {2}, "int8": {2, 5, 7}, "bf16-again": {2, 9}}  # the rows each "model" answers wrongly
DECLARED = [{"match": "mlflow/*/exact", "type": "binary", "higher_is_better": True}]
GATES = {"rules": [{"match": "*", "margin": 0.4, "alpha": 0.05}]}


def _evaluate(names: dict[str, set[int]], store: Path, extra=None) -> dict[str, str]:
    """Each name's evaluation run (its run id): mlflow.genai.evaluate over the same rows with a predict_fn answering
    wrongly on the given rows, scored by code scorers."""
    import mlflow
    from mlflow.genai.scorers import scorer

    @scorer
    def exact(outputs, expectations) -> bool:
        return outputs == expectations["expected_response"]

    @scorer
    def length(outputs) -> float:
        return float(len(outputs))

    def answering(wrong: set[int]):
        return lambda question: "wrong" if int(question[1:]) in wrong else f"a{question[1:]}"

    data = [{"inputs": {"question": f"q{i}"}, "expectations": {"expected_response": f"a{i}"}} for i in range(QUESTIONS)]
    # MLflow keeps its tracking URI in the environment: put back exactly what was there (None: unset), or
    # every later test and its subprocesses would log to this store, or to ./mlflow.db
    before = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(f"sqlite:///{store}")
    try:
        mlflow.set_experiment("quantized")
        ids = {}
        for name, wrong in names.items():
            with mlflow.start_run(run_name=name) as run:
                mlflow.genai.evaluate(data=data, predict_fn=answering(wrong), scorers=[exact, *(extra or [length])])
                ids[name] = run.info.run_id
        return ids
    finally:
        mlflow.set_tracking_uri(before)
        assert os.environ.get("MLFLOW_TRACKING_URI") == before


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    store = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    return f"sqlite:///{store}", _evaluate(WRONG, store)


def test_a_run_is_read_row_by_row_as_compare_evaluations_reads_it(runs):
    uri, ids = runs
    data = MlflowImporter(tracking_uri=uri).read(Path(f"runs:/{ids['int8']}"))
    [task] = data.tasks.values()
    assert task.suite == "mlflow/dataset" and not task.declared  # MLflow declares no type or direction
    assert len(task.records) == QUESTIONS and task.planned == ("exact", "length")
    by_item = {r.item_id: r for r in task.records}
    for i in range(QUESTIONS):  # the item: MLflow's own inputs hash of the row
        r = by_item[inputs_hash({"question": f"q{i}"})]
        assert r.scores == {"exact": float(i not in WRONG["int8"]), "length": float(len("wrong" if i in WRONG["int8"]
                                                                                         else f"a{i}"))}
        assert r.extra["at"].startswith("trace tr-") and r.extra["request_id"]
    assert data.source.format == "mlflow" and data.source.model == "int8"
    assert [(f.path, f.lines) for f in data.source.files] == [(f"runs:/{ids['int8']}", QUESTIONS)]
    base = MlflowImporter(tracking_uri=uri).read(Path(f"runs:/{ids['bf16']}")).tasks["mlflow/dataset"]
    # the same rows and scorers: the same task; another model (the predict_fn) is shown, not refused
    assert base.identity == task.identity and task.identity["dataset_digest"]
    assert {r.doc_hash for r in base.records} == {r.doc_hash for r in task.records}


def _file(tmp_path: Path, uri: str, ids: dict[str, str], **extra) -> Path:
    return comparison_file(tmp_path, "mlflow", ("bf16", "int8"), f"runs:/{ids['bf16']}", f"runs:/{ids['int8']}", GATES,
                           results={"tracking_uri": uri}, **{"metrics": DECLARED, **extra})


def test_qeval_compare_gates_two_evaluation_runs(runs, tmp_path):
    uri, ids = runs
    metrics = tmp_path / "metrics.yaml"
    metrics.write_text(yaml.safe_dump({"metrics": DECLARED}))
    policy = tmp_path / "gates.yaml"
    policy.write_text(yaml.safe_dump(GATES))
    out = tmp_path / "runs" / "cmp"
    p = subprocess.run([sys.executable, "-m", "qeval.cli", "compare", "--baseline", f"bf16=mlflow:runs:/{ids['bf16']}",
                        "--variant", f"int8=runs:/{ids['int8']}", "--noise", f"bf16-again=runs:/{ids['bf16-again']}",
                        "--tracking-uri", uri, "--policy", str(policy), "--metrics", str(metrics), "--out", str(out),
                        "--no-mlflow"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode in (0, 1), p.stderr + p.stdout
    written = yaml.safe_load((out / "comparison.yaml").read_text())
    assert written["variants"][0]["results"] == {"format": "mlflow", "path": f"runs:/{ids['int8']}", "tracking_uri": uri}
    r = RunRecord.load(out / "run.json")
    exact = next(c for c in r.comparisons if c.metric == "exact")
    # bf16 is wrong on row 2, int8 on 2, 5 and 7: two discordant pairs, both the baseline's
    assert (exact.suite, exact.n_paired, exact.flips_base_only, exact.flips_variant_only) == ("mlflow/dataset", 12, 2, 0)
    assert (exact.base_mean, exact.variant_mean) == pytest.approx((11 / 12, 9 / 12))
    assert exact.binary and exact.higher_is_better and exact.primary
    [g] = r.gates
    assert g.metric == "exact" and p.returncode == (0 if r.verdict == "PASS" else 1)
    length = next(c for c in r.comparisons if c.metric == "length")
    assert not length.primary and not length.binary  # ungated and undeclared: compared as continuous
    assert r.noise_floor is not None and r.noise_floor.figures[0].value == pytest.approx(1 / 12)
    v = next(x for x in r.variants if x.name == "int8")
    assert v.imported.format == "mlflow" and v.imported.tasks["mlflow/dataset"].advisory == {}


def test_an_undeclared_gated_scorer_exits_2_with_the_lines_to_add(runs, tmp_path):
    uri, ids = runs
    refused(_file(tmp_path, uri, ids, metrics=[]), 'match: "mlflow/dataset/exact", type: binary|continuous')


def test_a_run_id_that_is_not_there_exits_2_naming_it(runs, tmp_path):
    uri, ids = runs
    e = refused(_file(tmp_path, uri, {**ids, "int8": "0" * 32}), f"runs:/{'0' * 32}", "no such MLflow run")
    assert isinstance(e, BadResults)


def test_what_is_not_one_value_an_item_is_refused_naming_the_trace(tmp_path):
    from mlflow.genai.scorers import scorer

    @scorer
    def verdict(outputs) -> str:
        return "maybe" if outputs == "wrong" else "yes"

    store = tmp_path / "bad.db"
    ids = _evaluate({"odd": {3}}, store, extra=[verdict])
    with pytest.raises(BadResults) as e:
        MlflowImporter(tracking_uri=f"sqlite:///{store}").read(Path(f"runs:/{ids['odd']}"))
    assert "scorer 'verdict': value 'maybe' is not a score qeval reads" in str(e.value)
    assert e.value.exit_code == EXIT_USAGE and "trace tr-" in str(e.value)
