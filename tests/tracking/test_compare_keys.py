"""MLflow's own comparison vocabulary, from a real record (conftest.stopped_campaign) logged to a SQLite store:
each variant's run carries compare/<baseline's run id[:8]>/<suite>/<metric>/<stat> (the keys and stats
`mlflow.genai.compare_evaluations` logs) with qeval's extras beside them and a compare/<id8>.json artifact,
every value the record's; and the requests in flight each suite ran with as params."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from qeval.record.run import VariantResult
from qeval.tracking.compare import INTERVAL, MLFLOW_STATS, QEVAL_STATS, compare_artifact
from qeval.tracking.mlflow import compare_metrics, default_tracking_uri, log_record, metric_name, variant_params

# MLflow 3.18's mlflow/genai/evaluation/comparison.py: _LOGGED_STATS, and _comparison_key's shape
LOGGED_STATS = ("diff", "ci_low", "ci_high", "p_value", "effect_size", "n_paired")


def _mlflow_key(baseline_run_id: str, *parts: str) -> str:
    try:  # the library's own, where the installed MLflow has it
        from mlflow.genai.evaluation.comparison import _comparison_key
    except ImportError:
        return "/".join(["compare", baseline_run_id[:8], *parts])
    return _comparison_key(baseline_run_id, *parts)


def _children(client, out) -> dict:
    return {r.info.run_name: r for r in client.search_runs(
        [out["experiment_id"]], filter_string=f"tags.mlflow.parentRunId = '{out['parent_run_id']}'")}


def test_mlflow_stats_are_those_compare_evaluations_logs():
    try:
        from mlflow.genai.evaluation.comparison import _LOGGED_STATS
    except ImportError:
        _LOGGED_STATS = LOGGED_STATS
    assert MLFLOW_STATS == _LOGGED_STATS and not set(QEVAL_STATS) & set(MLFLOW_STATS)


def test_each_variant_run_carries_mlflows_comparison_keys(stopped_campaign, tmp_path):
    import mlflow
    from mlflow.tracking import MlflowClient

    rec, run_dir = stopped_campaign.record, stopped_campaign.run_dir
    uri = default_tracking_uri(tmp_path)
    out = log_record(rec, run_dir, uri)
    client = MlflowClient(tracking_uri=uri)
    kids = _children(client, out)
    base = kids["base"].info.run_id
    assert any(c.effect_size is not None for c in rec.comparisons)
    assert not any(k.startswith("compare/") for k in kids["base"].data.metrics)  # the baseline compares to nothing
    for name in ("bad", "same"):
        got = kids[name].data.metrics
        mine = [c for c in rec.comparisons if c.variant == name]
        assert mine
        for c in mine:
            key = lambda stat: _mlflow_key(base, f"{c.suite}/{c.metric}", stat)  # noqa: E731
            want = {"diff": c.delta, "ci_low": c.ci_low, "ci_high": c.ci_high, "p_value": c.p_value,
                    "effect_size": c.effect_size, "n_paired": c.n_paired, "mde": c.mde, "confidence": c.confidence}
            for stat, value in want.items():
                if value is None:  # undefined (differences that do not vary have no d_z): not logged, as MLflow
                    assert key(stat) not in got
                else:
                    assert got[key(stat)] == pytest.approx(value, rel=1e-12), (name, c.suite, c.metric, stat)
            assert c.confidence == pytest.approx(0.9)  # the gate's (1 - 2 alpha) interval, not a 95% one
            g = next((g for g in rec.gates if (g.variant, g.suite, g.metric) == (name, c.suite, c.metric)), None)
            if g is None:  # a secondary metric no rule names
                assert key("gate_pass") not in got and key("margin") not in got
            else:
                assert got[key("margin")] == g.margin and got[key("gate_pass")] == float(g.verdict == "PASS")
                assert got[key("lower_bound")] == pytest.approx(g.lower_bound)
        gated = {(g.suite, g.metric) for g in rec.gates if g.variant == name and g.verdict != "NOT_RUN"}
        assert gated and gated <= {(c.suite, c.metric) for c in mine}

        # the artifact, in the shape of MLflow's ComparisonResult, with qeval's verdict, margin and interval
        path = f"compare/{base[:8]}.json"
        assert path in {a.path for a in client.list_artifacts(kids[name].info.run_id, "compare")}
        art = json.loads(open(mlflow.artifacts.download_artifacts(
            run_id=kids[name].info.run_id, artifact_path=path, tracking_uri=uri)).read())
        assert (art["baseline_run_id"], art["candidate_run_id"]) == (base, kids[name].info.run_id)
        assert (art["baseline"], art["candidate"], art["verdict"]) == ("base", name, rec.verdicts[name])
        assert art["correction"] == rec.multiplicity and "not a 95%" in art["interval"]
        assert art["items"] == f"items/items-{name}.parquet"
        assert set(art["scorers"]) == {f"{c.suite}/{c.metric}" for c in mine}
        for c in mine:
            s = art["scorers"][f"{c.suite}/{c.metric}"]
            assert (s["diff"], s["ci_low"], s["ci_high"], s["p_value"], s["n_paired"]) == \
                (c.delta, c.ci_low, c.ci_high, c.p_value, c.n_paired)
            assert (s["effect_size"], s["confidence"], s["interval_method"]) == \
                (c.effect_size, c.confidence, c.interval_method)
            assert s["value_type"] == ("binary" if c.binary else "numeric") and s["greater_is_better"] is True
            g = next((g for g in rec.gates if (g.variant, g.suite, g.metric) == (name, c.suite, c.metric)), None)
            assert s["verdict"] == (g.verdict if g else "NOT_GATED")
            if g is not None:
                assert (s["gate"]["margin"], s["gate"]["mode"], s["gate"]["sequential"]) == \
                    (g.margin, g.mode, g.sequential)
            if c.binary:
                assert s["ties"] == c.n_paired - c.flips_base_only - c.flips_variant_only

    again = log_record(rec, run_dir, uri)  # a re-sync: the same runs, the same figures, one artifact
    assert again["parent_run_id"] == out["parent_run_id"]
    kids2 = _children(client, again)
    assert {n: r.data.metrics for n, r in kids2.items()} == {n: r.data.metrics for n, r in kids.items()}
    assert [a.path for a in client.list_artifacts(kids2["bad"].info.run_id, "compare")] == [f"compare/{base[:8]}.json"]


def test_the_effect_size_is_d_z_of_the_items_as_exported(stopped_campaign):
    """The record's effect size, recomputed from the per-item tables the publish stage exported."""
    rec, run_dir = stopped_campaign.record, stopped_campaign.run_dir
    tables = {v.name: pd.read_parquet(run_dir / f"items-{v.name}.parquet") for v in rec.variants}
    checked = 0
    for c in rec.comparisons:
        b, v = (tables[n][tables[n].suite == c.suite].set_index(["item_id", "sample"])[f"score.{c.metric}"]
                for n in ("base", c.variant))
        both = pd.concat([b, v], axis=1, join="inner", keys=["b", "v"])
        assert len(both) == c.n_paired
        d = (both.v - both.b).to_numpy(dtype=float)
        if np.allclose(d, d[0]):
            assert c.effect_size is None
        else:
            assert c.effect_size == pytest.approx(d.mean() / d.std(ddof=1), rel=1e-9)
            checked += 1
    assert checked


def test_requests_in_flight_are_params_of_the_variant_run(stopped_campaign, tmp_path):
    from mlflow.tracking import MlflowClient

    rec = stopped_campaign.record
    uri = default_tracking_uri(tmp_path)
    kids = _children(MlflowClient(tracking_uri=uri), log_record(rec, stopped_campaign.run_dir, uri))
    for v in rec.variants:
        params = kids[v.name].data.params
        assert v.concurrency and {f"concurrency.{s}": str(n) for s, n in v.concurrency.items()}.items() <= params.items()
        assert params.get("max_num_seqs") == (str(v.max_num_seqs) if v.max_num_seqs is not None else None)


def test_params_and_keys_are_names_mlflow_takes():
    """A suite or metric name with characters MLflow refuses is cleaned as every other qeval key is."""
    from mlflow.utils.validation import _validate_metric_name, _validate_param_name

    from qeval.record.run import Comparison, RunRecord

    v = VariantResult(name="q", method="gptq", role="variant", concurrency={"lm_eval/arc:easy": 12, "custom/caps": 8},
                      max_num_seqs=256, engine="vllm", engine_version="0.26.0")
    params = variant_params(v)
    assert (params["concurrency.lm_eval/arc_easy"], params["concurrency.custom/caps"], params["max_num_seqs"]) == \
        (12, 8, 256)
    for k in params:
        _validate_param_name(k)
    c = Comparison(variant="q", suite="lm_eval/arc:easy", metric="acc,none", primary=True, n_paired=40,
                   unpaired_base=0, unpaired_variant=0, base_mean=0.7, variant_mean=0.65, delta=-0.05, ci_low=-0.1,
                   ci_high=0.0, interval_method="newcombe", confidence=0.9, t_ci_low=-0.1, t_ci_high=0.0, binary=True,
                   higher_is_better=True, p_value=0.2, effect_size=math.nan)
    rec = RunRecord(run_id="r", campaign="c", config_hash="h", config={}, config_file="c.yaml", command=[],
                    started_at="now", variants=[VariantResult(name="b", method="bf16", role="baseline"), v],
                    comparisons=[c])
    m = compare_metrics(rec, "q", "0123456789abcdef")
    assert set(m) == {metric_name("compare", "01234567", "lm_eval/arc_easy", "acc_none", s)
                      for s in ("diff", "ci_low", "ci_high", "p_value", "n_paired", "confidence")}  # NaN: left out
    for k in m:
        _validate_metric_name(k)
    art = compare_artifact(rec, "q", "0123456789abcdef", "fedcba")
    assert art["scorers"]["lm_eval/arc:easy/acc,none"]["effect_size"] is None  # JSON has no NaN
    assert art["scorers"]["lm_eval/arc:easy/acc,none"]["verdict"] == "NOT_GATED" and art["interval"] == INTERVAL
    json.dumps(art, allow_nan=False)


def test_the_noise_floor_and_older_records_get_the_keys_too():
    """Records earlier qeval versions wrote (no effect size) log what they have; the A/A of the noise floor is
    compared with the baseline as a variant is, never gated."""
    from pathlib import Path

    from qeval.record.run import RunRecord

    records = [RunRecord.load(p) for p in sorted((Path(__file__).resolve().parents[1] / "fixtures" / "records")
                                                 .glob("*.json"))]
    floors = [r for r in records if r.noise_floor is not None and r.noise_floor.comparisons]
    assert floors
    for rec in records:
        for v in rec.variants:
            m = compare_metrics(rec, v.name, "abcdef0123456789")
            mine = [c for c in [*rec.comparisons, *(rec.noise_floor.comparisons if rec.noise_floor else [])]
                    if c.variant == v.name]
            assert {k.rsplit("/", 1)[0] for k in m if k.endswith("/diff")} == \
                {metric_name("compare", "abcdef01", c.suite, c.metric) for c in mine}
            assert not any(k.endswith("/effect_size") for k in m)  # these records predate it
    for rec in floors:
        aa = rec.noise_floor.variant
        art = compare_artifact(rec, aa, "abcdef0123456789", "aa-run")
        assert art["verdict"] == "NOISE_FLOOR" and art["scorers"]
        assert {s["verdict"] for s in art["scorers"].values()} == {"NOT_GATED"}
        assert not any(k.endswith(("/gate_pass", "/margin")) for k in compare_metrics(rec, aa, "abcdef0123456789"))
