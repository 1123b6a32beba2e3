"""The dtype follows the machine: bf16 where it is native, float32 on an AVX2-only CPU; results keyed by it."""

from __future__ import annotations

from pathlib import Path

import pytest

from qeval.campaign import Campaign
from qeval.config import CampaignConfig, load_config
from qeval.engines.vllm import VllmEngine
from qeval.errors import ConfigError
from qeval.hardware import CpuInfo, choose_dtype
from qeval.quantize import quantizer_for
from qeval.settings import Settings

ROOT = Path(__file__).resolve().parents[1]

# abridged /proc/cpuinfo lines of the two kinds seen here (2026-11-30 / 2026-12-01)
SAPPHIRE = ("model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu sse2 avx avx2 fma avx512f avx512dq "
            "avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8\n")
EPYC = "model name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx avx2 fma bmi2\n"


def cpu(text: str, tmp_path: Path) -> CpuInfo:
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\n" + text + "\nprocessor\t: 1\n" + text)
    return CpuInfo.read(f)


def test_the_two_kinds_are_told_apart(tmp_path):
    intel, amd = cpu(SAPPHIRE, tmp_path), cpu(EPYC, tmp_path)
    assert intel.native_bf16 and not amd.native_bf16
    assert amd.kind() == "AMD EPYC 7B13 (avx2)"
    assert "avx512_bf16" in intel.kind() and "amx_bf16" in intel.kind()
    assert choose_dtype("auto", "cpu", intel).dtype == "bfloat16"
    slow = choose_dtype("auto", "cpu", amd)
    assert slow.dtype == "float32" and "no native bf16" in slow.reason and "AMD EPYC" in slow.reason
    assert choose_dtype("auto", "gpu", amd).dtype == "bfloat16"
    assert choose_dtype("bfloat16", "cpu", amd) == choose_dtype("bfloat16", "cpu", intel)  # as the file says
    assert CpuInfo.read(tmp_path / "absent").flags == frozenset()  # not Linux: no flags, float32 (safe)


def test_one_campaign_file_on_both_kinds_keys_its_results_by_dtype(tmp_path):
    cfg = load_config(ROOT / "configs" / "demo.yaml")
    cache = tmp_path / "cache"
    fast = Campaign(cfg, Settings(cache=cache, cpu=cpu(SAPPHIRE, tmp_path)))
    slow = Campaign(cfg, Settings(cache=cache, cpu=cpu(EPYC, tmp_path)))
    for v in cfg.all_variants():
        assert (fast.dtype(v).dtype, slow.dtype(v).dtype) == ("bfloat16", "float32")
        # a bf16 baseline's records are never paired with an fp32 variant's: they live under other keys
        assert fast.variant_key(v, "same-checkpoint") != slow.variant_key(v, "same-checkpoint")
    gptq = cfg.variants[0]
    specs = [quantizer_for(gptq.method, runtime=c.settings.llmc, engine=c.engine_spec(gptq)).spec(Path("b"), gptq)
             for c in (fast, slow)]
    assert [s["dtype"] for s in specs] == ["bfloat16", "float32"]  # quantized in the dtype it is served in
    engine = VllmEngine(variant=gptq, checkpoint=Path("ckpt"), spec=slow.engine_spec(gptq), settings=slow.settings,
                        log_dir=tmp_path)
    argv = engine.argv(8000)
    assert argv[argv.index("--dtype") + 1] == "float32"


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
    f.write_text((ROOT / "configs" / "demo.yaml").read_text().replace(
        "  builtin: smollm2-135m-instruct", "  builtin: smollm2-135m-instruct\n  dtype: fp32"))
    with pytest.raises(ConfigError, match=r"c\.yaml:line 6: model\.dtype"):
        load_config(f)
