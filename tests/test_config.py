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
    cfg = load_config(ROOT / "configs" / "demo.yaml")
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
    assert Later(enabled=True, concurrency=[1, 4]).key() == base.key() == base.model_dump(mode="json")
    assert Later(enabled=True, concurrency=[1, 4], new_knob=4).key() == {**base.key(), "new_knob": 4}
    assert ProbeSpec(enabled=True, concurrency=[1, 8]).key() != base.key()
