"""What a variant changes against the baseline (weights, KV cache, serving), and the performance rules that apply
to it: an FP8 KV cache over the same weights is not judged by the weights' size."""

import json
from pathlib import Path

import pytest

from qeval.config import CampaignConfig
from qeval.pipeline.campaign import judged
from qeval.pipeline.changes import Served, changes
from qeval.pipeline.judge import judge
from qeval.pipeline.plan import Plan, engine_spec, planned_changes
from qeval.record.run import RunRecord, VariantResult
from qeval.record.store import ResultsStore
from qeval.verdict.gates import evaluate_performance, perf_not_applicable
from qeval.verdict.policy import GatePolicy, PerfRule


def _cfg(tmp_path: Path, variants: list[dict], **engine) -> CampaignConfig:
    return CampaignConfig.model_validate({
        "name": "kv", "model": {"path": str(tmp_path)}, "baseline": {"name": "bf16", "method": "bf16"},
        "variants": variants, "engine": {"device": "gpu", **engine}, "probe": {"enabled": True},
        "gates": {"performance": [{"metric": "weights_bytes", "max_ratio": 0.75},
                                  {"metric": "kv_cache_tokens", "min_ratio": 1.8},
                                  {"metric": "max_output_throughput", "min_ratio": 1.0, "action": "warn"}]}})


def _changes(cfg: CampaignConfig, name: str, scheme: dict | None = None, base_scheme: dict | None = None):
    v = next(x for x in cfg.variants if x.name == name)
    return changes(Served(v, engine_spec(cfg, v), scheme or {}),
                   Served(cfg.baseline, engine_spec(cfg, cfg.baseline), base_scheme or {}))


def test_what_each_variant_changes(tmp_path):
    cfg = _cfg(tmp_path, [
        {"name": "kv-fp8", "method": "bf16", "engine": {"kv_cache_dtype": "fp8"}},
        {"name": "w4", "method": "rtn"},
        {"name": "w4-kv", "method": "rtn", "engine": {"kv_cache_dtype": "fp8"}},
        {"name": "tp2", "method": "bf16", "engine": {"tensor_parallel_size": 2}},
        {"name": "fi", "method": "bf16", "engine": {"attention_backend": "FLASHINFER"}},
        {"name": "fp8", "method": "fp8-online"},
        {"name": "same", "method": "fp16", "engine": {"request_timeout_s": 60, "gpu_memory_utilization": 0.5}},
        {"name": "w3", "method": "rtn", "recipe": {"bits": 3}}])
    kv = _changes(cfg, "kv-fp8")
    assert kv.changes == ("kv_cache",) and kv.serving_diff == ("kv_cache_dtype auto -> fp8",)
    assert kv.text() == "differs in: kv_cache_dtype auto -> fp8"
    assert _changes(cfg, "w4").changes == ("weights",) and _changes(cfg, "w4").text() == "differs in: weights"
    assert _changes(cfg, "w4-kv").changes == ("weights", "kv_cache")
    tp2 = _changes(cfg, "tp2")
    assert tp2.changes == ("serving",) and tp2.serving_diff == ("tensor_parallel_size 1 -> 2",)
    assert _changes(cfg, "fi").serving_diff == ("attention_backend unset -> FLASHINFER",)
    # vLLM's --quantization is how fp8-online makes its weights, said by its method: not a serving setting
    assert _changes(cfg, "fp8").changes == ("weights",) and _changes(cfg, "fp8").serving_diff == ()
    # the base weights in the campaign's dtype, settings that change no output: nothing qeval sees
    assert _changes(cfg, "same").changes == () and _changes(cfg, "same").text() == "differs in nothing qeval sees"
    assert _changes(cfg, "w3").changes == ("weights",)
    # two recipes of one method differ in their weights
    assert changes(Served(cfg.variants[7], engine_spec(cfg, cfg.variants[7])),
                   Served(cfg.variants[1], engine_spec(cfg, cfg.variants[1]))).changes == ("weights",)


def test_a_checkpoint_that_declares_a_kv_cache_scheme_is_a_kv_variant(tmp_path):
    """vLLM serves an FP8 KV cache from a checkpoint's kv_cache_scheme though kv_cache_dtype is auto."""
    ckpt = tmp_path / "kv-only"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"quantization_config": {
        "quant_method": "compressed-tensors", "config_groups": {},
        "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True}}}))
    (tmp_path / "config.json").write_text("{}")
    cfg = _cfg(tmp_path, [{"name": "kv-cal", "method": "checkpoint", "checkpoint": str(ckpt)}])
    found = planned_changes(cfg, tmp_path)["kv-cal"]
    assert found.changes == ("weights", "kv_cache")
    assert "KV cache (its checkpoint's kv_cache_scheme)" in found.text()
    # a made checkpoint's scheme, read once made: the judge's
    c = _changes(cfg, "kv-cal", scheme={"kv_cache_bits": "8"})
    assert "kv_cache" in c.changes


def test_applies_to_auto_by_metric_and_as_written():
    w = PerfRule(metric="weights_bytes", max_ratio=0.75)
    kv = PerfRule(metric="kv_cache_tokens", min_ratio=1.8)
    tput = PerfRule(metric="max_output_throughput", min_ratio=1.0)
    assert w.scope == ("weights",) and kv.scope == ("weights", "kv_cache")
    assert tput.scope == ("weights", "kv_cache", "serving")
    assert "answers for a change of weights" in w.not_applicable(["kv_cache"])
    assert w.not_applicable(["weights", "kv_cache"]) is None and kv.not_applicable(["kv_cache"]) is None
    assert kv.not_applicable(["serving"]) is not None and tput.not_applicable(["serving"]) is None
    # nothing qeval sees changed, or nothing known: every rule gates, as before
    assert w.not_applicable([]) is None and w.not_applicable(None) is None
    forced = PerfRule(metric="weights_bytes", max_ratio=0.75, applies_to="any")
    assert forced.not_applicable(["kv_cache"]) is None
    listed = PerfRule(metric="max_output_throughput", min_ratio=1.0, applies_to=["kv_cache"])
    assert listed.scope == ("kv_cache",) and "applies_to" in listed.not_applicable(["serving"])
    with pytest.raises(ValueError, match="at least one"):
        PerfRule(metric="weights_bytes", max_ratio=0.75, applies_to=[])
    with pytest.raises(ValueError):
        PerfRule(metric="weights_bytes", max_ratio=0.75, applies_to=["activations"])


def test_an_fp8_kv_variant_of_the_same_weights_is_not_failed_by_the_weights_rule():
    """The same weights with an FP8 KV cache are 1.00x the baseline's bytes: `weights_bytes <= 0.75x` says
    nothing of it (not applicable, never FAIL), while its KV capacity is gated. A weight scheme still FAILs it."""
    policy = GatePolicy(performance=[PerfRule(metric="weights_bytes", max_ratio=0.75),
                                     PerfRule(metric="kv_cache_tokens", min_ratio=1.8)])
    base = {"weights_bytes": 269e6, "kv_cache_tokens": 372_816.0}
    kv = {"weights_bytes": 269e6, "kv_cache_tokens": 745_648.0}
    before = evaluate_performance(policy, "kv-fp8", base, kv)
    assert [g.verdict for g in before] == ["FAIL", "PASS"]  # what a rule for weight schemes did to it
    after = evaluate_performance(policy, "kv-fp8", base, kv, changes=("kv_cache",))
    assert [(g.metric, g.verdict) for g in after] == [("kv_cache_tokens", "PASS")]
    assert list(perf_not_applicable(policy, ("kv_cache",))) == ["weights_bytes <= 0.75x"]
    w4 = evaluate_performance(policy, "w4", base, {"weights_bytes": 269e6, "kv_cache_tokens": 380_000.0},
                              changes=("weights",))
    assert [g.verdict for g in w4] == ["FAIL", "FAIL"]


def _result(name: str, role: str, method: str, **facts) -> VariantResult:
    return VariantResult(name=name, role=role, method=method, key=f"k-{name}", status="ok", **facts)


def test_the_judge_gates_a_kv_variant_by_what_it_changes_and_the_record_says_so(tmp_path):
    cfg = _cfg(tmp_path, [{"name": "kv-fp8", "method": "bf16", "engine": {"kv_cache_dtype": "fp8"}},
                          {"name": "w4", "method": "rtn"}])
    record = RunRecord(run_id="r", campaign="kv", config_hash="h", config={}, config_file="", command=[],
                       started_at="t", variants=[
                           _result("bf16", "baseline", "bf16", weights_bytes=1000, kv_cache_tokens=372_816),
                           _result("kv-fp8", "variant", "bf16", weights_bytes=1000, kv_cache_tokens=745_648),
                           _result("w4", "variant", "rtn", weights_bytes=300, kv_cache_tokens=380_000)])
    store = ResultsStore(tmp_path / "store.sqlite")
    try:
        j = judge(cfg, record, store, {}, Plan(suites=(), base_checkpoint=tmp_path))
    finally:
        store.close()
    kv_gates = {g.metric: g.verdict for g in j.gates if g.variant == "kv-fp8"}
    assert kv_gates == {"kv_cache_tokens": "PASS", "max_output_throughput": "WARN"}  # no weights_bytes gate
    assert {g.metric: g.verdict for g in j.gates if g.variant == "w4"}["weights_bytes"] == "PASS"
    out = judged(record, j)
    kv = next(v for v in out.variants if v.name == "kv-fp8")
    assert kv.changes == ["kv_cache"] and kv.serving_diff == ["kv_cache_dtype auto -> fp8"]
    assert list(kv.perf_not_applicable) == ["weights_bytes <= 0.75x"]
    w4 = next(v for v in out.variants if v.name == "w4")
    assert w4.changes == ["weights"] and w4.perf_not_applicable == {}
    assert next(v for v in out.variants if v.name == "bf16").changes == []
    # an older record, without the fields, still loads
    data = json.loads(out.model_dump_json())
    for v in data["variants"]:
        for k in ("changes", "serving_diff", "perf_not_applicable"):
            v.pop(k)
    assert RunRecord.model_validate(data).variants[1].changes == []


def test_the_report_says_what_each_variant_changes_and_which_rules_do_not_apply():
    from qeval.report import html, markdown

    rec = RunRecord.load(Path(__file__).parents[1] / "fixtures" / "records" / "schema2-gpu.json")
    assert "What each variant changes" not in markdown.render(rec)  # a record without the fields: nothing said
    v = next(x for x in rec.variants if x.role == "variant")
    v = v.model_copy(update={"changes": ["kv_cache"], "serving_diff": ["kv_cache_dtype auto -> fp8"],
                             "perf_not_applicable": {"weights_bytes <= 0.75x": "answers for weights"}})
    rec = rec.model_copy(update={"variants": [v if x.name == v.name else x for x in rec.variants]})
    md = markdown.render(rec)
    assert (f"- {v.name}: differs in: kv_cache_dtype auto -> fp8; `weights_bytes <= 0.75x` not applicable "
            "(answers for weights)") in md
    assert "differs in: kv_cache_dtype auto -&gt; fp8" in html.render(rec)
