"""The KV-cache decision end to end: the shipped examples plan (the CPU one refused on an AVX2-only CPU, the GPU one
anywhere), and a reduced KV campaign on the fake engine (long documents by depth, needles, a short suite, the
probe) whose verdict output, report, summary and record say of each KV or serving variant whether it may be
turned on."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from qeval.config import LmEvalSuiteRef, load_config
from qeval.engines.fake import FakeEngineSpec
from qeval.errors import ConfigError
from qeval.pipeline import campaign
from qeval.pipeline.plan import changes_lines, plan, planned_changes
from qeval.progress import PlainReporter
from qeval.record.run import RunRecord
from qeval.settings import Settings
from tests.conftest import campaign_file, fake_checkpoint
from tests.test_hardware import EPYC, SKYLAKE, cpu

ROOT = Path(__file__).resolve().parents[2]
WORDS = "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega river north city number".split()


def _local(path: Path, tmp_path: Path):
    """A shipped example with a local model folder for the embedded one, and without lm-eval tasks (whose data
    `qeval setup` fetches): what the plan checks of it needs nothing else of this machine."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text('{"hidden_size": 576, "intermediate_size": 1536}')
    cfg = load_config(path)
    return cfg.model_copy(update={"model": cfg.model.model_copy(update={"builtin": None, "path": model}),
                                  "suites": [s for s in cfg.suites if not isinstance(s, LmEvalSuiteRef)]})


def test_the_cpu_kv_example_plans_on_avx512_and_is_refused_on_avx2(tmp_path):
    cfg = _local(ROOT / "examples" / "kv-cache.yaml", tmp_path)
    assert [v.engine for v in cfg.variants] == [{"kv_cache_dtype": "fp8"}] * 2
    assert cfg.gates.recommend.by == "kv_capacity"
    p = plan(cfg, Settings(cache=tmp_path / "cache", cpu=cpu(SKYLAKE, tmp_path)), "kv-cache.yaml")
    long, needle, _ = p.suites  # lm-eval's left out
    assert long.document_tokens == 4095 and needle.lengths == (1024, 2048) and len(needle.items) == 2 * 16 * 5
    lines = changes_lines(cfg, planned_changes(cfg, p.base_checkpoint))
    assert lines[0].startswith("kv-fp8: differs in: kv_cache_dtype auto -> fp8; weights_bytes <= 0.75x: not applicable")
    assert lines[1] == "int8-kv-fp8: differs in: weights; kv_cache_dtype auto -> fp8"
    with pytest.raises(ConfigError, match="FP8 KV cache") as e:
        plan(cfg, Settings(cache=tmp_path / "cache", cpu=cpu(EPYC, tmp_path)), "kv-cache.yaml")
    assert e.value.where == "variant kv-fp8: engine.kv_cache_dtype"


def test_the_gpu_kv_example_plans_anywhere_and_says_what_sets_each_variant_apart(tmp_path):
    cfg = _local(ROOT / "examples" / "gpu-kv-cache.yaml", tmp_path)
    assert cfg.engine.device == "gpu" and len(cfg.suites) == 4  # no lm-eval task: nothing to fetch
    for kind in (EPYC, SKYLAKE):  # the host CPU's kind says nothing of a GPU's KV cache
        p = plan(cfg, Settings(cache=tmp_path / "cache", cpu=cpu(kind, tmp_path)), "gpu-kv-cache.yaml")
    said = {line.split(":", 1)[0]: line for line in changes_lines(cfg, planned_changes(cfg, p.base_checkpoint))}
    assert said["triton"].startswith("triton: differs in: attention_backend unset -> TRITON_ATTN; "
                                     "kv_cache_tokens >= 1.8x: not applicable")
    assert said["kv-fp8-triton"].startswith("kv-fp8-triton: differs in: kv_cache_dtype auto -> fp8; "
                                            "attention_backend unset -> TRITON_ATTN;")
    assert said["fp8-kv-fp8"] == "fp8-kv-fp8: differs in: weights; kv_cache_dtype auto -> fp8"


def _campaign(root: Path) -> Path:
    """The KV example reduced for the fake engine: its baseline; kv-fp8 (the same checkpoint with an FP8 KV cache:
    the same answers, twice the KV cache's tokens); lossy-kv (another checkpoint with an FP8 KV cache, whose
    next-token distributions drift and whose needles fade past 100 tokens); flash (the baseline under another
    attention backend: a serving setting alone)."""
    folder = root / "docs"
    folder.mkdir()
    for k in range(6):
        rng = random.Random(k)
        (folder / f"d{k}.txt").write_text(" ".join(rng.choice(WORDS) for _ in range(500)))
    items = [{"id": f"f{i}", "prompt": f"Name fact {i}.", "reference": f"fact-{i}"} for i in range(30)]
    (root / "facts.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
    (root / "facts.yaml").write_text("name: facts\nitems: facts.jsonl\nscorers: [{kind: contains}]\n")
    answers = [Path("../../facts.jsonl")]
    fake_checkpoint(root, "base", FakeEngineSpec(answers=answers, kv_cache_tokens=1000))
    lossy = fake_checkpoint(root, "lossy", FakeEngineSpec(model="lossy", answers=answers, kv_cache_tokens=1000,
                                                          logprob_noise=1.5, needle_reach=100))
    return campaign_file(
        root, name="kv",
        variants=[{"name": "kv-fp8", "method": "bf16", "engine": {"kv_cache_dtype": "fp8"}},
                  {"name": "lossy-kv", "method": "checkpoint", "checkpoint": lossy,
                   "engine": {"kv_cache_dtype": "fp8"}},
                  {"name": "flash", "method": "bf16", "engine": {"attention_backend": "FLASH_ATTN"}}],
        engine={"kind": "fake", "startup_timeout_s": 30, "max_model_len": 2048},
        suites=[{"kind": "logprobs", "name": "long", "corpus": "docs", "document_tokens": 300, "documents": 6,
                 "buckets": [100, 200], "min_bucket_documents": 4, "min_bucket_tokens": 100, "top_k": 5},
                {"kind": "needle", "lengths": [128, 512], "depths": [0.1, 0.5, 0.9], "haystacks": 4},
                {"kind": "custom", "path": "facts.yaml"}],
        probe={"enabled": True, "concurrency": [1, 2], "requests_per_step": 4, "warmup_requests": 1,
               "prompt_tokens": 8, "output_tokens": 4},
        # t: six documents are too few for interval auto to vouch for any interval on a skewed KL
        gates={"rules": [{"match": "*", "margin": 0.4}, {"match": "logprobs/long/kl@*", "margin": 0.05,
                                                         "direction": "lower"},
                         {"match": "needle/*", "margin": 0.2}],  # 8 haystacks support 0.2
               "interval": "t",
               "performance": [{"metric": "kv_cache_tokens", "min_ratio": 1.8},
                               {"metric": "max_output_throughput", "min_ratio": 0.01, "action": "warn"}],
               "recommend": {"by": "kv_capacity"}},
        mlflow={"enabled": False})


def test_a_kv_campaign_says_of_each_kv_and_serving_variant_whether_it_may_be_turned_on(tmp_path):
    config = _campaign(tmp_path)
    said: list[str] = []
    res = campaign.run(load_config(config), Settings(cache=tmp_path / "cache", share_records=False),
                       reporter=PlainReporter(said.append), config_file=str(config))
    rec = RunRecord.model_validate_json((res.run_dir / "run.json").read_text())
    by = {v.name: v for v in rec.variants}
    assert (by["base"].kv_cache_tokens, by["kv-fp8"].kv_cache_tokens) == (1000, 2000)
    assert by["kv-fp8"].decision.outcome == "turn_on", by["kv-fp8"].decision
    kv = by["kv-fp8"].decision.text
    assert kv.startswith("kv-fp8 (changes: kv_cache_dtype auto -> fp8): may be turned on — every quality gate passes")
    assert "incl. logprobs/long/kl@200-300" in kv and "KV capacity 2.00x the baseline's (2,000 vs 1,000 tokens)" in kv
    assert "output throughput at saturation" in kv
    lossy = by["lossy-kv"].decision
    assert lossy.outcome == "shown_worse" and lossy.text.startswith(
        "lossy-kv (changes: weights; kv_cache_dtype auto -> fp8): do not turn it on — logprobs/long/kl@")
    flash = by["flash"].decision
    assert flash.text.startswith("flash (changes: attention_backend unset -> FLASH_ATTN): may be turned on")
    assert "KV capacity 1.00x" in flash.text and by["base"].decision is None
    # `qeval run`'s output under the verdict table, the run's log, the report and the CI summary say the same
    # lines; the recommendation ranks by KV capacity
    from qeval.cli import decision_lines

    assert decision_lines(rec) == [f"decision: {by[n].decision.text}" for n in ("kv-fp8", "lossy-kv", "flash")]
    for d in (by["kv-fp8"].decision, lossy, flash):
        assert f"decision: {d.text}" in said
        assert f"- {d.text}" in Path(res.report_path).read_text()
        assert f"- {d.text}" in (res.run_dir / "summary.md").read_text()
    assert "Recommended: kv-fp8 (the most KV cache tokens" in (res.run_dir / "summary.md").read_text()
    html = (res.run_dir / "report.html").read_text()
    assert "may be turned on" in html and "do not turn it on" in html
    # MLflow: each KV or serving variant's run is tagged with its outcome and its line
    from mlflow.tracking import MlflowClient

    from qeval.tracking.mlflow import default_tracking_uri, log_record

    uri = default_tracking_uri(tmp_path)
    out = log_record(rec, res.run_dir, uri)
    runs = {r.info.run_name: r.data.tags for r in MlflowClient(tracking_uri=uri).search_runs(
        [out["experiment_id"]], filter_string=f"tags.mlflow.parentRunId = '{out['parent_run_id']}'")}
    assert (runs["kv-fp8"]["qeval.decision"], runs["lossy-kv"]["qeval.decision"]) == ("turn_on", "shown_worse")
    assert runs["flash"]["qeval.decision_text"] == flash.text and "qeval.decision" not in runs["base"]
