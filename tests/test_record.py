"""Run records of older schemas (tests/fixtures/records: records earlier qeval versions wrote, cut to a few
variants) still load, render and round-trip; the probe, grid and distributions the producers write reach the
record as typed models, their JSON as written."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pytest

from qeval.config import EngineSpec, GridEngineSpec, GridSpec, ProbeSpec, VariantSpec
from qeval.engines import build_engine
from qeval.engines.fake import write_checkpoint
from qeval.executors.outcome import VariantOutcome
from qeval.pipeline.judge import load_probe
from qeval.probe.client import RequestResult, StepRun
from qeval.probe.grid import GridRow, assemble, best_cell, cell_probe
from qeval.probe.grid_run import load_rows, run_row, save_row, serve_row
from qeval.probe.latency import ProbeResult, run_probe, summarize
from qeval.record.run import SCHEMA_VERSION, Measured, Named, RunRecord, VariantResult, prior_facts
from qeval.record.measurements import BaselineDistribution, Distribution, Grid, GridCell, Probe
from qeval.report import html, markdown
from qeval.settings import Settings
from qeval.suites.logprobs import LogprobsSuite, chunk_record
from qeval.tracking.mlflow import grid_metrics, metric_name, probe_history, variant_metrics
from tests.conftest import MARK, sees_marked

ROOT = Path(__file__).resolve().parents[1]
RECORDS = sorted((ROOT / "tests" / "fixtures" / "records").glob("*.json"))


def _added(dumped, stored, path: str = "") -> dict[str, object]:
    """What a dump holds that the stored data lacks (path -> value); what the stored data holds is there, in
    its order, equal and of the same type (an int stays an int)."""
    if isinstance(stored, dict):
        assert isinstance(dumped, dict) and list(stored) == [k for k in dumped if k in stored], path
        out = {f"{path}.{k}": v for k, v in dumped.items() if k not in stored}
        for k in stored:
            out |= _added(dumped[k], stored[k], f"{path}.{k}")
        return out
    if isinstance(stored, list):
        assert isinstance(dumped, list) and len(dumped) == len(stored), path
        return {k: v for i, (d, s) in enumerate(zip(dumped, stored)) for k, v in _added(d, s, f"{path}[{i}]").items()}
    assert dumped == stored and type(dumped) is type(stored), (path, dumped, stored)
    return {}


def _names_mlflow_takes(m: dict[str, float]) -> bool:
    return all(metric_name(*k.split("/")) == k for k in m)


def test_the_old_records_cover_each_schema_and_what_records_carry():
    """The records below span schemas 2 and 3 and hold each part a record may carry, so that loading any of
    them breaking fails a test."""
    docs = [json.loads(p.read_text()) for p in RECORDS]
    assert {d["schema_version"] for d in docs} == {2, 3}
    variants = [v for d in docs for v in d["variants"]]
    carried = {k for v in variants for k in ("probe", "distribution", "flips", "scheme", "reused", "not_run") if v.get(k)}
    assert carried == {"probe", "distribution", "flips", "scheme", "reused", "not_run"}
    assert any(v["status"] != "ok" for v in variants)  # a variant not evaluated
    assert any(d.get("noise_floor") for d in docs) and any(d["tracking"] for d in docs)
    assert any(g.get("sequential") for d in docs for g in d["gates"])
    assert {d["config"].get("engine", {}).get("device", "cpu") for d in docs} == {"cpu", "gpu"}


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.stem)
def test_an_old_record_loads_renders_and_round_trips(path):
    text = path.read_text()
    rec = RunRecord.load(path)
    assert rec.schema_version <= SCHEMA_VERSION and rec.variants
    # records before `reused` have its default; later ones name suites the variant has, with whole counts
    assert all(set(v.reused) <= {s.suite for s in v.suites} and all(n > 0 for n in v.reused.values())
               for v in rec.variants)
    probed = [v for v in rec.variants if v.probe]
    probe_on = (rec.config.get("probe") or {}).get("enabled", True)  # a campaign may leave the probe off
    assert bool(probed) == probe_on and all(isinstance(v.probe, Probe) for v in probed)
    for v in rec.variants:
        want = BaselineDistribution if v.role == "baseline" else Distribution
        assert all(type(d) is want for d in v.distribution.values())
    md = markdown.render(rec)
    assert rec.campaign in md and rec.verdict in md and ("## Performance" in md) == probe_on
    assert ("## Next-token distributions" in md) == any(v.distribution for v in rec.variants)
    page = html.render(rec)
    assert f"<strong>{rec.verdict}</strong>" in page
    assert ("Latency and throughput against concurrency" in page) == probe_on
    for v in rec.variants:  # the metrics MLflow would get, by the names it would get them under
        m = variant_metrics(rec, v.name)
        assert _names_mlflow_takes(m)
        if v.probe:
            conc = [s for s in v.probe.steps if s.kind == "concurrency"]
            assert m["perf/max_output_throughput"] == max(s.output_throughput for s in conc)
            hist = probe_history(rec, v.name)
            assert {step for _, _, step in hist} == {int(s.load) for s in conc}
            assert _names_mlflow_takes({k: x for k, x, _ in hist})
        for suite, d in v.distribution.items():
            assert m[metric_name("dist", suite, "chunks")] == d.chunks
            assert m[metric_name("dist", suite, "perplexity")] == d.perplexity
    # what was read is what is written: the file byte for byte, and a full dump only adds the fields the
    # file predates, at their defaults
    assert rec.model_dump_json(indent=1, exclude_unset=True) == text
    assert all(x in (None, {}, []) for x in _added(rec.model_dump(mode="json"), json.loads(text)).values())
    assert RunRecord.model_validate_json(rec.model_dump_json()) == rec


def test_the_probe_and_grid_as_produced_reach_the_record_typed_and_as_written(tmp_path, monkeypatch):
    """A real (fake-engine) server: the latency probe's JSON as pipeline/variant.py stores it, and grid rows
    run on that server and on one of their own, stored, assembled, carried by a variant's outcome."""
    token = uuid.uuid4().hex
    monkeypatch.setenv(MARK, token)
    ck = write_checkpoint(tmp_path / "ck", None)
    v = VariantSpec(name="m", method="checkpoint", checkpoint=ck)

    def engine(logs: str):
        return build_engine("fake", v, ck, EngineSpec(kind="fake"), Settings(cache=tmp_path), tmp_path / logs)

    probe = ProbeSpec(enabled=True, concurrency=[1, 2], rates=[20.0], requests_per_step=4, warmup_requests=0,
                      prompt_tokens=8, output_tokens=4, slo={"ttft_p95_ms": 60_000})
    spec = GridSpec(engine=GridEngineSpec(max_num_seqs=[2, 8, 16]), concurrency=[1, 2], requests_per_cell=4)
    on, own = (GridRow(setting={"max_num_seqs": n}, spec=EngineSpec(kind="fake"), on_server=n == 8,
                       path=tmp_path / "grid" / f"{n}.json") for n in (8, 2))
    served, alone = engine("logs"), engine("logs-2")
    try:
        with served as ep:
            live = sees_marked(token, "fake_server.py")  # the search below sees the server while it runs
            swept = run_probe(probe, ep)
            save_row(on.path, run_row(on, cell_probe(spec, probe), ep, served))
        save_row(own.path, serve_row(own, cell_probe(spec, probe), alone))
    finally:
        served.stop(grace_s=2)
        alone.stop(grace_s=2)
    live.assert_gone()

    stored = tmp_path / "probe.json"
    stored.write_text(json.dumps(swept.to_json()))  # as pipeline/variant.py writes it
    g = assemble(spec, dict(probe.slo), load_rows([on, own]), {"mns=16": "vLLM exited during start-up"})
    out = VariantOutcome(name="m", status="ok", measured=Measured(engine="fake"), evaluated=True, grid=g)
    # as the campaign makes it
    res = VariantResult.of(out.measured, name=out.name, method="bf16", role="baseline", status=out.status, grid=out.grid)
    assert load_probe(res, stored)
    assert isinstance(res.probe, Probe) and isinstance(res.grid, Grid)
    assert [(s.kind, s.load) for s in res.probe.steps] == [("concurrency", 1), ("concurrency", 2), ("rate", 20.0)]
    assert [type(s.load) for s in res.probe.steps] == [int, int, float]  # a concurrency stays an int
    assert _added(res.probe.model_dump(), swept.to_json()) == {} and _added(res.grid.model_dump(), g) == {}
    assert [c.row for c in res.grid.cells] == ["mns=8", "mns=8", "mns=2", "mns=2"]
    assert res.grid.served["mns=2"].startup_seconds is not None and res.grid.served["mns=8"].on_server

    # the grid's views read the record's model as they read the stored dicts
    assert grid_metrics(res.grid) == grid_metrics(g) and _names_mlflow_takes(grid_metrics(g))
    assert res.grid.table() == Grid.model_validate(g).table() and res.grid.matrix() == Grid.model_validate(g).matrix()
    best = best_cell(res.grid.cells, res.grid.slo)
    assert isinstance(best, GridCell) and g["best"] == {"row": best.row, "concurrency": best.concurrency,
                                                        "output_throughput": best.output_throughput}
    rec = RunRecord(run_id="r", campaign="c", config_hash="h", config={}, config_file="c.yaml", command=[],
                    started_at="now", variants=[res])
    rec.save(tmp_path / "run.json")
    again = RunRecord.load(tmp_path / "run.json")
    assert again == rec
    md = markdown.render(again)
    assert md == markdown.render(rec) and "## Performance" in md and "## Batch size x concurrency" in md
    assert "- mns=16: no cells (vLLM exited during start-up)" in md
    assert html.render(again).count("data:image/png") == 2  # the latency figure and the grid's heat map
    assert variant_metrics(again, "m") == variant_metrics(rec, "m")


def _lp(tokens: list[str]) -> dict:
    """Prompt logprobs in vLLM's echo shape."""
    return {"tokens": tokens, "token_logprobs": [None] + [-0.5] * (len(tokens) - 1),
            "top_logprobs": [None] + [{t: -0.5, "x": -1.5} for t in tokens[1:]]}


def test_nan_figures_load_back(tmp_path):
    """A probe step with no request timed and a distribution of no tokens (every chunk's tokens differ): NaN
    in memory, null in the record's JSON, None when read back."""
    failed = StepRun(results=[RequestResult(ok=False, start=0.0, error="timed out")] * 2, wall=1.0, client_cpu=0.0)
    stored = tmp_path / "probe.json"
    stored.write_text(json.dumps(ProbeResult(steps=[summarize("concurrency", 1, failed)], saturation_concurrency=None,
                                             max_concurrency_within_slo=None, requests=[]).to_json()))
    suite = LogprobsSuite(name="c", chunks=["t0", "t1"], top_k=2, key="lp")
    rec = RunRecord(run_id="r", campaign="t", config_hash="h", config={}, config_file="", command=[],
                    started_at="now", variants=[VariantResult(name="base", method="external", role="baseline"),
                                                VariantResult(name="q", method="external", role="variant")])
    base = [chunk_record(i, f"t{i}", 2, _lp(["a", "b", "c"])) for i in range(2)]
    cand = [chunk_record(i, f"t{i}", 2, _lp(["a", "z", "c"])) for i in range(2)]
    rec.variants[1].distribution["logprobs/c"], rec.variants[0].distribution["logprobs/c"] = \
        suite.pair(suite.parts[0], base, cand).distribution
    assert load_probe(rec.variants[1], stored)
    d, b = rec.variants[1].distribution["logprobs/c"], rec.variants[0].distribution["logprobs/c"]
    assert isinstance(d, Distribution) and isinstance(b, BaselineDistribution)
    assert d.tokens == 0 and d.mismatched_chunks == 2 and math.isnan(d.kl_mean) and math.isnan(d.top1_agreement)
    assert math.isnan(rec.variants[1].probe.steps[0].ttft_ms.p50)
    rec.save(tmp_path / "run.json")
    again = RunRecord.load(tmp_path / "run.json")
    d2, step = again.variants[1].distribution["logprobs/c"], again.variants[1].probe.steps[0]
    assert (d2.kl_mean, d2.top1_agreement, step.ttft_ms.p50, step.errors) == (None, None, None, 2)
    assert again.model_dump_json(indent=1) == (tmp_path / "run.json").read_text()
    assert json.loads((tmp_path / "run.json").read_text())["variants"][0]["distribution"] == {
        "logprobs/c": {"perplexity": b.perplexity, "chunks": 2}}  # the baseline's: its own figures only
    # and the reloaded record still renders: the failed step's percentiles show as "-"
    md = markdown.render(again)
    row = next(line for line in md.splitlines() if line.startswith("| q | concurrency 1 |"))
    assert "| - / - / - |" in row


def test_what_a_run_measured_is_declared_once():
    """A fact of a variant's run is a field of Measured: the outcome carries one, the record's entry extends it
    (its fields where the record has always had them), and a name it does not declare is refused, not lost."""
    own = ["status", "error", "suites", "distribution", "flips", "probe", "probe_requests", "grid", "changes",
           "serving_diff", "perf_not_applicable", "imported", "strata", "decision"]
    assert list(VariantResult.model_fields) == [*Named.model_fields, *Measured.model_fields, *own]
    assert list(Named.model_fields) == ["name", "method", "role"]
    assert Measured.served() == ("quantize_seconds", "engine", "engine_version", "startup_seconds", "restarts",
                                 "engine_rss_bytes", "engine_gpu_bytes", "gpus", "model_memory_bytes",
                                 "kv_cache_bytes", "kv_cache_tokens", "eval_seconds", "idle_seconds",
                                 "lease_wait_seconds", "concurrency", "max_num_seqs")
    with pytest.raises(ValueError):
        Measured(engin="vllm")  # a misspelt fact
    m = Measured(key="k", engine="fake", restarts=1, recipe={"bits": 4})
    with pytest.raises(ValueError):
        m.engine = "other"  # type: ignore[misc]  # frozen: the outcome's facts are as the run found them
    res = VariantResult.of(m, name="v", method="rtn", role="variant")
    assert {f: getattr(res, f) for f in Measured.model_fields} == m.model_dump()
    # a resume keeps what an earlier record measured while serving, those it set only
    earlier = {"variants": [res.model_dump(mode="json"), {**res.model_dump(mode="json"), "key": "x", "status": "error"}]}
    assert {k: (f.model_fields_set, f.engine) for k, f in prior_facts(earlier).items()} == {
        "k": ({"engine", "restarts"}, "fake")}
