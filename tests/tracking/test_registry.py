"""The model registry on a SQLite MLflow store (the default when no server is configured): one version per
variant with its verdict, none added by a re-sync, registering turned on after a first sync, tags following
the record."""

from __future__ import annotations

from pathlib import Path

from qeval.record import RunRecord, VariantResult
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
