"""The model registry on a SQLite MLflow store (the default when no server is configured): one version per
variant with its verdict, none added by a re-sync, registering turned on after a first sync, tags following
the record."""

from __future__ import annotations

from pathlib import Path

from qeval.record.run import RunRecord, VariantResult
from qeval.tracking.mlflow import default_tracking_uri, log_record
from qeval.tracking.registry import passed_filter


def _record(verdicts: dict[str, str]) -> RunRecord:
    variants = [VariantResult(name="bf16", method="bf16", role="baseline", checkpoint="/m/base", checkpoint_hash="b0")]
    variants += [VariantResult(name=n, method="gptq", role="variant", checkpoint=f"/m/{n}", checkpoint_hash=f"h-{n}")
                 for n in verdicts]
    return RunRecord(run_id="rid-1", campaign="reg", config_hash="c", config={}, config_file="c.yaml", command=[],
                     started_at="now", variants=variants, verdicts=verdicts, verdict="FAIL")


def _versions(uri: str) -> dict[str, dict[str, str]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    return {mv.tags["qeval.variant"]: mv.tags for mv in client.search_model_versions("name = 'reg-model'")}


def test_registry_on_a_sqlite_store(tmp_path: Path):
    from mlflow.tracking import MlflowClient

    run_dir = tmp_path / "runs" / "reg"
    run_dir.mkdir(parents=True)
    uri = default_tracking_uri(tmp_path / "runs")
    rec = _record({"a": "PASS", "b": "FAIL", "c": "INCONCLUSIVE"})

    first = log_record(rec, run_dir, uri)  # registry off: no versions
    assert "registered_model" not in first and _versions(uri) == {}
    again = log_record(rec, run_dir, uri, register_as="reg-model")  # turned on later: the re-sync registers
    assert again["parent_run_id"] == first["parent_run_id"]
    tags = _versions(uri)
    assert {n: t["qeval.verdict"] for n, t in tags.items()} == {"a": "PASS", "b": "FAIL", "c": "INCONCLUSIVE"}
    assert (tags["b"]["checkpoint_hash"], tags["b"]["method"], tags["b"]["qeval.run_id"]) == ("h-b", "gptq", "rid-1")

    rec.verdicts["c"] = "PASS"  # e.g. the record was finished again with more evidence
    log_record(rec, run_dir, uri, register_as="reg-model")
    tags = _versions(uri)
    assert len(tags) == 3 and tags["c"]["qeval.verdict"] == "PASS"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    passed = client.search_model_versions(passed_filter("reg-model"))  # what deployment tooling asks
    assert sorted(mv.tags["qeval.variant"] for mv in passed) == ["a", "c"]


def _comparison(variant: str, p_adjusted: float):
    from qeval.record.run import Comparison

    return Comparison(variant=variant, suite="custom/caps", metric="exact", primary=True, n_paired=40,
                      unpaired_base=0, unpaired_variant=0, base_mean=0.7, variant_mean=0.65, delta=-0.05,
                      ci_low=-0.1, ci_high=0.0, interval_method="newcombe", confidence=0.9, t_ci_low=-0.1,
                      t_ci_high=0.0, binary=True, higher_is_better=True, p_value=0.2, p_adjusted=p_adjusted)


def test_a_resumed_run_updates_what_it_logged_before(tmp_path: Path):
    """`--max-minutes` (or a kill after logging) leaves a variant NOT_EVALUATED in MLflow; the resumed run
    (same run id) must bring the same parent and child runs up to the finished record: new params,
    metrics (Holm-adjusted p-values change with more comparisons), verdicts, status and model version."""
    import json

    from mlflow.tracking import MlflowClient

    run_dir = tmp_path / "runs" / "reg"
    run_dir.mkdir(parents=True)
    uri = default_tracking_uri(tmp_path / "runs")
    rec = _record({"a": "PASS", "b": "NOT_EVALUATED"})
    rec.variants[2].status, rec.variants[2].checkpoint, rec.variants[2].checkpoint_hash = "skipped", None, None
    rec.comparisons, rec.environment = [_comparison("a", 0.2)], {"host": "one"}
    first = log_record(rec, run_dir, uri, register_as="reg-model")
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    kids = {r.info.run_name: r for r in client.search_runs(
        [first["experiment_id"]], filter_string=f"tags.mlflow.parentRunId = '{first['parent_run_id']}'")}
    assert kids["b"].info.status == "FAILED" and "checkpoint_hash" not in kids["b"].data.params

    rec.variants[2].status, rec.variants[2].checkpoint, rec.variants[2].checkpoint_hash = "ok", "/m/b", "h-b"
    rec.comparisons = [_comparison("a", 0.4), _comparison("b", 0.4)]  # two comparisons now: Holm doubles p
    rec.verdicts, rec.verdict = {"a": "PASS", "b": "FAIL"}, "FAIL"
    rec.environment = {"host": "another"}  # a param MLflow will not change: kept, named in a tag
    second = log_record(rec, run_dir, uri, register_as="reg-model")
    assert second["parent_run_id"] == first["parent_run_id"]
    assert len(client.search_runs([first["experiment_id"]])) == 4  # parent + 3 children, none added
    again = {r.info.run_name: client.get_run(r.info.run_id) for r in kids.values()}
    assert again["a"].data.metrics["p_holm/custom/caps/exact"] == 0.4
    assert again["b"].data.metrics["p_holm/custom/caps/exact"] == 0.4
    assert again["b"].info.status == "FINISHED" and again["b"].data.params["checkpoint_hash"] == "h-b"
    assert again["b"].data.tags["qeval.verdict"] == "FAIL" and again["b"].data.tags["qeval.status"] == "ok"
    parent = client.get_run(first["parent_run_id"])
    assert parent.data.tags["qeval.verdict"] == "FAIL" and parent.data.tags["verdict.b"] == "FAIL"
    assert parent.data.tags["qeval.params_not_updated"] == "env.host"
    assert parent.data.tags["qeval.recommendation"].startswith("Recommended: a (")  # b failed: a alone passes
    mv = {m.tags["qeval.variant"]: m for m in client.search_model_versions("name = 'reg-model'")}
    assert len(mv) == 2 and mv["b"].tags["qeval.verdict"] == "FAIL" and mv["b"].run_id == kids["b"].info.run_id
    info = client.download_artifacts(kids["b"].info.run_id, "model/qeval-variant.json", str(tmp_path))
    assert json.loads(Path(info).read_text())["checkpoint_hash"] == "h-b"  # the reference follows the record
