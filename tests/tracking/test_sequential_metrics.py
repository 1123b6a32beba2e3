"""Sequential gates in MLflow, from a real record (conftest.stopped_campaign) logged to a SQLite store: each
variant's run has the items its sequential and skipped suites evaluated, planned and saved (and the engine
seconds saved, an estimate); each sequential gate the items it used, beside its gate/ metric."""

from __future__ import annotations

import pytest

from qeval.tracking.mlflow import default_tracking_uri, log_record, variant_metrics


def test_variant_runs_carry_the_items_saved(stopped_campaign, tmp_path):
    from mlflow.tracking import MlflowClient

    rec, run_dir = stopped_campaign.record, stopped_campaign.run_dir
    uri = default_tracking_uri(tmp_path)
    out = log_record(rec, run_dir, uri)
    client = MlflowClient(tracking_uri=uri)
    runs = {r.info.run_name: r for r in client.search_runs(
        [out["experiment_id"]], filter_string=f"tags.mlflow.parentRunId = '{out['parent_run_id']}'")}
    kids = {name: r.data.metrics for name, r in runs.items()}
    bad, same = kids["bad"], kids["same"]
    # what each gate's data showed, beside its 0/1 gate/ metric
    assert runs["bad"].data.tags["finding.custom/facts/contains"] == "shown_worse"
    assert runs["bad"].data.tags["finding.custom/sums/numeric"] == "not_run"
    assert runs["same"].data.tags["finding.custom/sums/numeric"] == "shown_within"
    assert (bad["sequential/items_evaluated"], bad["sequential/items_planned"], bad["sequential/items_saved"]) == \
        (100, 800, 700)  # custom/sums was skipped: its 400 items are saved too
    assert (same["sequential/items_evaluated"], same["sequential/items_saved"]) == (400, 400)
    eval_s = {v.name: v.eval_seconds for v in rec.variants}
    assert bad["sequential/eval_s_saved_estimate"] == pytest.approx(eval_s["bad"] / 100 * 700)
    assert bad["gate/custom/facts/contains"] == 0.0 and bad["items_used/custom/facts/contains"] == 100
    assert bad["items_planned/custom/facts/contains"] == 400
    assert "items_used/custom/sums/numeric" not in bad and bad["gate/custom/sums/numeric"] == 0.0  # NOT_RUN
    assert same["items_used/custom/sums/numeric"] == 200
    assert not any(k.startswith(("sequential/", "items_")) for k in kids["base"])  # the baseline reads every item


def test_fixed_n_gates_log_no_items(stopped_campaign):
    rec = stopped_campaign.record
    fixed = rec.model_copy(update={
        "gates": [g.model_copy(update={"sequential": None, "items_used": None, "items_planned": None})
                  for g in rec.gates if g.verdict != "NOT_RUN"],
        "variants": [v.model_copy(update={"not_run": {}, "suites": [s.model_copy(update={"planned": None})
                                                                     for s in v.suites]}) for v in rec.variants]})
    m = variant_metrics(fixed, "bad")
    assert "gate/custom/facts/contains" in m and not any(k.startswith(("sequential/", "items_")) for k in m)


def test_mlflow_reads_the_record_and_the_files_beside_it_not_the_store(stopped_campaign, tmp_path):
    """Each evaluated variant's per-item table is the file the publish stage exported beside run.json; a run
    folder without its results.sqlite is logged whole."""
    import shutil

    import mlflow
    import pandas as pd
    from mlflow.tracking import MlflowClient

    rec = stopped_campaign.record
    run_dir = tmp_path / "copy"
    shutil.copytree(stopped_campaign.run_dir, run_dir, ignore=shutil.ignore_patterns("results.sqlite*"))
    assert not list(run_dir.glob("results.sqlite*"))
    uri = default_tracking_uri(tmp_path)
    out = log_record(rec, run_dir, uri)
    client = MlflowClient(tracking_uri=uri)
    kids = {r.info.run_name: r.info.run_id for r in client.search_runs(
        [out["experiment_id"]], filter_string=f"tags.mlflow.parentRunId = '{out['parent_run_id']}'")}
    assert not (run_dir / "results.sqlite").exists()  # nothing opened (nor made) a store
    for v in rec.variants:
        assert [a.path for a in client.list_artifacts(kids[v.name], "items")] == [f"items/items-{v.name}.parquet"]
        got = pd.read_parquet(mlflow.artifacts.download_artifacts(
            run_id=kids[v.name], artifact_path=f"items/items-{v.name}.parquet", tracking_uri=uri))
        assert len(got) == sum(s.n for s in v.suites) > 0 and set(got.variant) == {v.name}
        assert sorted(set(got.suite)) == sorted(s.suite for s in v.suites)
