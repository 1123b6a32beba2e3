"""Campaign files: good ones load, bad ones name the file, the line and the key."""

import textwrap
from pathlib import Path

import pytest

from qeval.config import load_config
from qeval.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(textwrap.dedent(text))
    return p


# written by hand, not by tests.conftest.campaign_file: the errors below name its lines
GOOD = f"""\
name: t
model: {{builtin: smollm2-135m-instruct}}
baseline: {{name: base, method: bf16}}
variants:
  - {{name: q, method: gptq}}
suites:
  - {{kind: custom, path: {ROOT}/suites/custom/capitals.yaml}}
"""


def test_demo_config_loads():
    cfg = load_config(ROOT / "examples" / "demo.yaml")
    assert [v.name for v in cfg.all_variants()] == ["bf16", "gptq-w4a16", "awq-w4a16", "int8-w8a8"]
    assert cfg.engine.host == "127.0.0.1"
    assert cfg.output_dir.is_absolute()


def test_good_config(tmp_path):
    cfg = load_config(write(tmp_path, GOOD))
    assert cfg.variants[0].recipe.group_size == 64
    assert len(cfg.config_hash()) == 16


def test_misspelled_key_names_file_line_and_key(tmp_path):
    p = write(tmp_path, GOOD.replace("  - {name: q, method: gptq}", "  - {name: q, methd: gptq}"))
    with pytest.raises(ConfigError) as e:
        load_config(p)
    msg = str(e.value)
    assert str(p) in msg and "line 5" in msg and "variants.0.methd" in msg and "unknown key" in msg


def test_wrong_type(tmp_path):
    p = write(tmp_path, GOOD + "engine: {kv_cache_gib: lots}\n")
    with pytest.raises(ConfigError, match=r"line 8: engine.kv_cache_gib"):
        load_config(p)


def test_missing_checkpoint_path(tmp_path):
    p = write(tmp_path, GOOD.replace("{name: q, method: gptq}", "{name: q, method: checkpoint, checkpoint: nope}"))
    with pytest.raises(ConfigError, match=r"variant q: checkpoint.*does not exist"):
        load_config(p)


def test_checkpoint_without_config_json(tmp_path):
    (tmp_path / "ck").mkdir()
    p = write(tmp_path, GOOD.replace("{name: q, method: gptq}", "{name: q, method: checkpoint, checkpoint: ck}"))
    with pytest.raises(ConfigError, match="has no config.json"):
        load_config(p)


def test_quantized_baseline_is_refused(tmp_path):
    p = write(tmp_path, GOOD.replace("{name: base, method: bf16}", "{name: base, method: awq}"))
    with pytest.raises(ConfigError, match="baseline must be full precision"):
        load_config(p)


def test_duplicate_variant_names(tmp_path):
    p = write(tmp_path, GOOD.replace("{name: q, method: gptq}", "{name: base, method: gptq}"))
    with pytest.raises(ConfigError, match="unique"):
        load_config(p)


def test_not_yaml(tmp_path):
    p = write(tmp_path, "name: [unclosed\n")
    with pytest.raises(ConfigError, match=r"c.yaml:line 2: not valid YAML"):
        load_config(p)


def test_unset_environment_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("QEVAL_NOPE", raising=False)
    p = write(tmp_path, GOOD.replace("name: t", "name: ${QEVAL_NOPE}"))
    with pytest.raises(ConfigError, match=r"\$\{QEVAL_NOPE\} is not set"):
        load_config(p)


def test_external_needs_endpoint(tmp_path):
    p = write(tmp_path, GOOD.replace("{name: q, method: gptq}", "{name: q, method: external}"))
    with pytest.raises(ConfigError, match="needs `endpoint`"):
        load_config(p)


def test_not_utf8(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(p)


def test_the_retry_backoff_is_the_engines_and_at_its_default_keeps_the_hash(tmp_path):
    plain = load_config(write(tmp_path, GOOD))
    assert plain.engine.retry_backoff_s == 1.0
    assert load_config(write(tmp_path, GOOD + "engine: {retry_backoff_s: 1.0}\n")).config_hash() == plain.config_hash()
    quick = load_config(write(tmp_path, GOOD + "engine: {retry_backoff_s: 0.05}\n"))
    assert quick.engine.retry_backoff_s == 0.05 and quick.config_hash() != plain.config_hash()
    with pytest.raises(ConfigError, match=r"line 8: engine.retry_backoff_s"):
        load_config(write(tmp_path, GOOD + "engine: {retry_backoff_s: 0}\n"))


def test_an_unknown_key_anywhere_names_the_closest_key_and_its_line(tmp_path):
    p = write(tmp_path, GOOD.replace("{name: q, method: gptq}", "{name: q, method: gptq, recipe: {group_sise: 32}}"))
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value) == f"{p}:line 5: variants.0.recipe.group_sise: unknown key (did you mean 'group_size'?)"


def test_an_error_in_a_variants_engine_override_keeps_its_line(tmp_path):
    p = write(tmp_path, GOOD.replace("  - {name: q, method: gptq}",
                                     "  - name: q\n    method: gptq\n    engine:\n      max_model_len: x"))
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value) == (f"{p}:line 8: variants.0.engine.max_model_len: Input should be a valid integer, unable "
                            "to parse string as an integer")


def test_a_validators_message_has_no_pydantic_prefix(tmp_path):
    p = write(tmp_path, GOOD.replace("{name: base, method: bf16}", "{name: base, method: external}"))
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value) == (f"{p}:line 3: baseline: method 'external' needs `endpoint` (e.g. "
                            "http://127.0.0.1:8000/v1)")


def test_each_engine_kind_has_its_own_settings_and_a_variant_of_another_kind_leaves_the_rest(tmp_path):
    p = write(tmp_path, GOOD.replace("  - {name: q, method: gptq}", "  - {name: q, method: fp8, engine: {kind: trtllm}}")
              + "engine: {device: gpu, kv_cache_gib: 4, max_model_len: 1024}\n")
    cfg = load_config(p)
    from qeval.engines.spec import TrtllmSpec, VllmSpec, merged

    assert type(cfg.engine) is VllmSpec and cfg.engine.kv_cache_gib == 4
    trt = merged(cfg.engine, cfg.variants[0].engine)
    assert type(trt) is TrtllmSpec and trt.max_model_len == 1024 and trt.device == "gpu"
    assert "kv_cache_gib" not in trt.model_dump() and "backend" not in cfg.engine.model_dump()


POLICY = """\
rules:
  - {match: "*", margin: 0.1}
performance:
  - {metric: weights_bytes, max_ratio: 0.5}
"""


def test_a_policy_file_enters_the_hash_by_what_it_says_and_recommend_changes_it(tmp_path):
    (tmp_path / "capitals.yaml").write_text((ROOT / "suites/custom/capitals.yaml").read_text())
    plain = GOOD.replace(f"{ROOT}/suites/custom/capitals.yaml", "capitals.yaml")
    (tmp_path / "policy.yaml").write_text(POLICY)
    cfg = load_config(write(tmp_path, plain + "gates: policy.yaml\n"))
    assert cfg.gates.recommend is None
    inline = load_config(write(tmp_path, plain + "gates: {rules: [{match: '*', margin: 0.1}], performance: "
                                                 "[{metric: weights_bytes, max_ratio: 0.5}]}\n"))
    assert inline.config_hash() == cfg.config_hash()  # the policy's content, wherever it is written
    (tmp_path / "policy.yaml").write_text("recommend: null\n")  # a policy file of defaults only
    assert load_config(write(tmp_path, plain + "gates: policy.yaml\n")).config_hash() == load_config(
        write(tmp_path, plain)).config_hash()
    (tmp_path / "policy.yaml").write_text(POLICY + "recommend: {by: throughput_at_slo}\n")
    by_tp = load_config(write(tmp_path, plain + "gates: policy.yaml\n"))
    assert by_tp.gates.recommend.by == "throughput_at_slo" and by_tp.config_hash() != cfg.config_hash()
    (tmp_path / "policy.yaml").write_text(POLICY + "recommend: {by: cheapest}\n")
    with pytest.raises(ConfigError, match=r"line 5: recommend.by"):
        load_config(write(tmp_path, plain + "gates: policy.yaml\n"))


def test_a_campaign_built_in_code_hashes_what_it_says():
    from qeval.config import CampaignConfig

    data = dict(name="t", model={"builtin": "smollm2-135m-instruct"}, baseline={"name": "base", "method": "bf16"},
                variants=[{"name": "q", "method": "gptq"}], suites=[{"kind": "custom", "path": "/x/capitals.yaml"}])
    plain = CampaignConfig.model_validate(data).config_hash()
    defaults = data | {"description": "", "gates": {"recommend": None}, "engine": {"kind": "vllm"}, "grid": None}
    assert CampaignConfig.model_validate(defaults).config_hash() == plain
    assert CampaignConfig.model_validate(data | {"description": "why"}).config_hash() != plain
    gated = data | {"gates": {"rules": [{"match": "*", "margin": 0.1}]}}
    assert CampaignConfig.model_validate(gated).config_hash() != plain


def test_metric_declarations_are_for_imported_results_only(tmp_path):
    p = write(tmp_path, GOOD + "metrics:\n  - {match: \"custom/*/contains\", type: binary, higher_is_better: true}\n")
    with pytest.raises(ConfigError, match="a served suite declares its own"):
        load_config(p)
    log = tmp_path / "a.json"
    log.write_text("{}")
    comparison = f"""\
name: t
baseline: {{name: a, method: results, results: {{format: inspect, path: {log}}}}}
variants:
  - {{name: b, method: results, results: {{format: inspect, path: {log}}}}}
metrics:
  - {{match: "inspect/t/judge", type: %s, higher_is_better: true}}
"""
    cfg = load_config(write(tmp_path, comparison % "continuous"))
    assert [(d.match, d.type, d.higher_is_better) for d in cfg.metrics] == [("inspect/t/judge", "continuous", True)]
    # the snippet qeval prints for an undeclared metric leaves the choice to the user: pasted as is, it is refused
    with pytest.raises(ConfigError, match="metrics.0.type"):
        load_config(write(tmp_path, comparison % "binary|continuous"))
