"""A checkpoint described from its own config.json: the formats as their tools write them. The
compressed-tensors configs are llm-compressor 0.14's own output for this model (INT8 W8A8, FP8), trimmed to
the fields read; GPTQ v1 and AWQ as AutoGPTQ / GPTQModel and AutoAWQ write them."""

from __future__ import annotations

import json

from qeval.quantize.describe import describe, describe_checkpoint

INT8 = {"quant_method": "compressed-tensors", "format": "int-quantized", "ignore": ["lm_head"], "kv_cache_scheme": None,
        "config_groups": {"group_0": {
            "input_activations": {"dynamic": True, "num_bits": 8, "strategy": "token", "symmetric": True, "type": "int"},
            "weights": {"actorder": "static", "dynamic": False, "group_size": None, "num_bits": 8,
                        "strategy": "channel", "symmetric": True, "type": "int"}, "targets": ["Linear"]}}}
FP8 = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
    "input_activations": {"dynamic": False, "num_bits": 8, "type": "float"},
    "weights": {"dynamic": False, "num_bits": 8, "type": "float"}, "targets": ["Linear"]}}}
W4 = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
    "input_activations": None, "weights": {"group_size": 64, "num_bits": 4, "strategy": "group", "symmetric": True,
                                           "type": "int", "actorder": "weight"}}}}
GPTQ_V1 = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True, "sym": True,
           "checkpoint_format": "gptq", "damp_percent": 0.01}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def test_llm_compressor_schemes():
    assert describe({"quantization_config": INT8}) == {
        "format": "compressed-tensors", "scheme": "W8A8", "weight_bits": "8", "weight_type": "int",
        "strategy": "channel", "symmetric": "true", "activation_bits": "8", "activation_dynamic": "true",
        "actorder": "static", "ignore": "lm_head"}
    fp8 = describe({"quantization_config": FP8})
    assert (fp8["scheme"], fp8["weight_type"], fp8["activation_dynamic"]) == ("W8A8", "float", "false")
    w4 = describe({"quantization_config": W4})
    assert (w4["scheme"], w4["group_size"], w4["actorder"], w4["activation_bits"]) == ("W4A16", "64", "weight", "16")


def test_checkpoints_from_other_tools():
    assert describe({"quantization_config": GPTQ_V1}) == {
        "format": "gptq", "scheme": "W4A16", "weight_bits": "4", "group_size": "128", "symmetric": "true",
        "actorder": "true", "checkpoint_format": "gptq"}
    assert describe({"quantization_config": AWQ}) == {
        "format": "awq", "scheme": "W4A16", "weight_bits": "4", "group_size": "128", "symmetric": "false",
        "version": "gemm"}


def test_full_precision_and_unknown_formats():
    assert describe({"model_type": "llama"}) == {}
    assert describe({"quantization_config": {"quant_method": "bitsandbytes"}})["format"] == "bitsandbytes"


def test_a_given_checkpoint_is_described_in_the_record(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": GPTQ_V1}))
    assert describe_checkpoint(tmp_path)["scheme"] == "W4A16"
    assert describe_checkpoint(tmp_path / "missing") == {} and describe_checkpoint(None) == {}


def test_a_campaigns_given_checkpoint_is_described_in_its_record_and_report(tmp_path):
    """method: checkpoint on the fake engine, its config.json carrying AutoGPTQ's quantization_config."""
    from qeval.config import load_config
    from qeval.pipeline import campaign
    from qeval.progress import PlainReporter
    from qeval.settings import Settings
    from tests.pipeline.test_sequential_pipeline import _campaign

    config = _campaign(tmp_path, "{rules: [{match: '*', margin: 0.05}]}")
    cfg_file = tmp_path / "ck" / "bad" / "config.json"
    cfg_file.write_text(json.dumps(json.loads(cfg_file.read_text()) | {"quantization_config": GPTQ_V1}))
    done = campaign.run(load_config(config), Settings(cache=tmp_path / "cache", share_records=False),
                        reporter=PlainReporter(lambda s: None), config_file=str(config))
    bad = next(v for v in done.record.variants if v.name == "bad")
    assert bad.scheme["scheme"] == "W4A16" and bad.scheme["group_size"] == "128"
    assert next(v for v in done.record.variants if v.name == "same").scheme == {}
    assert "its config declares W4A16 (format gptq" in done.report_path.read_text()
