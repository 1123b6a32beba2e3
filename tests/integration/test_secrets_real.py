"""An endpoint's API key comes from the environment and is written nowhere: planted, then grepped for."""

from __future__ import annotations

import httpx
import pytest

from qeval.config import VariantSpec
from qeval.engines.vllm import VllmEngine

from ..conftest import campaign_file
from .conftest import ROOT, run_qeval, subprocess_env

pytestmark = pytest.mark.slow

SECRET = "qeval-planted-secret-7f3a9c1e"


def test_api_key_is_used_and_never_written(spawn, settings, base_model, engine_spec, tmp_path):
    spec = engine_spec.model_copy(update={"extra_args": ["--api-key", SECRET]})
    engine = VllmEngine(variant=VariantSpec(name="guarded", method="bf16"), checkpoint=base_model, spec=spec,
                        settings=settings, log_dir=tmp_path / "server")
    with engine as ep:
        assert httpx.get(ep.base_url + "/models", timeout=10).status_code == 401  # the key is really required
        ext = {"method": "external", "endpoint": ep.base_url, "served_model": "guarded", "checkpoint": base_model,
               "api_key_env": "QEVAL_TEST_KEY"}
        cfg = campaign_file(
            tmp_path, model={"path": base_model}, name="secrets", output_dir=tmp_path / "runs",
            baseline={"name": "base", **ext}, variants=[{"name": "again", **ext}],
            suites=[{"kind": "custom", "path": ROOT / "suites/custom/capitals.yaml"},
                    {"kind": "logprobs", "chunks": 3, "top_k": 5},
                    {"kind": "lm_eval", "include_path": ROOT / "suites/lmeval", "tasks": ["oe_arc_easy"], "limit": 8}],
            probe={"enabled": True, "concurrency": [1, 2], "prompt_tokens": 16, "output_tokens": 8,
                   "requests_per_step": 4, "warmup_requests": 1},
            gates={"rules": [{"match": "*", "margin": 0.5}]})
        missing = run_qeval(spawn, "run", str(cfg),
                            env={k: v for k, v in subprocess_env().items() if k != "QEVAL_TEST_KEY"})
        assert missing.returncode == 2 and "QEVAL_TEST_KEY" in missing.stderr
        r = run_qeval(spawn, "run", str(cfg), env=subprocess_env(QEVAL_TEST_KEY=SECRET))
    assert r.returncode in (0, 1), r.stderr[-3000:]
    assert SECRET not in r.stdout + r.stderr
    run_dir = tmp_path / "runs"
    assert (run_dir / "secrets" / "report.html").exists() and (run_dir / "mlflow.db").exists()
    written = [p for p in run_dir.rglob("*") if p.is_file()]
    assert len(written) > 10
    leaked = [str(p) for p in written if SECRET.encode() in p.read_bytes()]
    assert leaked == []
