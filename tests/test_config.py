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


def test_a_probe_field_added_later_keys_stored_probes_only_where_set():
    from qeval.config import ProbeSpec

    class Later(ProbeSpec):  # as if a newer qeval added a knob
        new_knob: int = 3

    assert ProbeSpec.KEYED <= set(ProbeSpec.model_fields)
    base = ProbeSpec(enabled=True, concurrency=[1, 4])
    keyed = {k: v for k, v in base.model_dump(mode="json").items() if k in ProbeSpec.KEYED}
    assert Later(enabled=True, concurrency=[1, 4]).key() == base.key() == keyed
    assert set(ProbeSpec.LATER) == set(ProbeSpec.model_fields) - ProbeSpec.KEYED  # the real later ones
    steady = ProbeSpec(enabled=True, concurrency=[1, 4], warmup_until_steady=0.05)
    assert steady.key() == {**keyed, "warmup_until_steady": 0.05}
    assert Later(enabled=True, concurrency=[1, 4], new_knob=4).key() == {**base.key(), "new_knob": 4}
    assert ProbeSpec(enabled=True, concurrency=[1, 8]).key() != base.key()


@pytest.mark.parametrize("engine, old_hash", [
    ("", "80011d8bc0e58cd5"),
    ("engine: {kind: trtllm, device: gpu, backend: tensorrt, max_batch_size: 8}\n", "1ea03594e963cf45"),
])
def test_a_campaign_keeps_the_hash_it_had_when_one_model_held_every_engine_kind(tmp_path, engine, old_hash):
    # the hashes qeval gave these files before each engine kind had a model of its own: their runs still resume
    (tmp_path / "capitals.yaml").write_text((ROOT / "suites/custom/capitals.yaml").read_text())
    text = GOOD.replace(f"{ROOT}/suites/custom/capitals.yaml", "capitals.yaml")
    if engine:
        text = text.replace("{name: q, method: gptq}", "{name: q, method: fp8, quantizer: trtllm}") + engine
    assert load_config(write(tmp_path, text)).config_hash() == old_hash


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


def test_a_policy_without_recommend_keeps_its_hash_and_one_with_it_changes_it(tmp_path):
    # the hash qeval gave this campaign (no description, a policy file without `recommend`) before either existed
    (tmp_path / "capitals.yaml").write_text((ROOT / "suites/custom/capitals.yaml").read_text())
    text = GOOD.replace(f"{ROOT}/suites/custom/capitals.yaml", "capitals.yaml") + "gates: policy.yaml\n"
    (tmp_path / "policy.yaml").write_text(POLICY)
    cfg = load_config(write(tmp_path, text))
    assert cfg.config_hash() == "f2bd8d1ab877da40" and cfg.gates.recommend is None
    assert "recommend" not in cfg.model_dump(mode="json")["gates"]  # what the run record keeps, as before
    (tmp_path / "policy.yaml").write_text(POLICY + "recommend: {by: throughput_at_slo}\n")
    by_tp = load_config(write(tmp_path, text))
    assert by_tp.gates.recommend.by == "throughput_at_slo" and by_tp.config_hash() != cfg.config_hash()
    (tmp_path / "policy.yaml").write_text(POLICY + "recommend: {by: cheapest}\n")
    with pytest.raises(ConfigError, match=r"line 5: recommend.by"):
        load_config(write(tmp_path, text))


def test_a_campaign_built_in_code_keeps_its_hash_without_description_or_recommend():
    from qeval.config import CampaignConfig

    data = dict(name="t", model={"builtin": "smollm2-135m-instruct"}, baseline={"name": "base", "method": "bf16"},
                variants=[{"name": "q", "method": "gptq"}], suites=[{"kind": "custom", "path": "/x/capitals.yaml"}])
    assert CampaignConfig.model_validate(data).config_hash() == "4f0ca8f227c71672"
    gated = data | {"gates": {"rules": [{"match": "*", "margin": 0.1}],
                              "performance": [{"metric": "weights_bytes", "max_ratio": 0.5}]}}
    assert CampaignConfig.model_validate(gated).config_hash() == "e10be1256938b614"
