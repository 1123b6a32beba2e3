"""What a variant's `method` and a recipe's `scheme` are: the names the campaign file, the engines (what they can
serve) and the quantizers (what they make) share, below all three."""

from __future__ import annotations

# fp8-online: the base checkpoint, quantized to FP8 by vLLM as it loads (`--quantization fp8`), GPU only;
# rtn: W<bits>A16 round-to-nearest (llm-compressor, no calibration): speed figures without calibration time
METHODS = ("bf16", "fp16", "gptq", "awq", "rtn", "int8", "fp8", "fp8-online", "checkpoint", "external")
QUANTIZED = {"gptq", "awq", "rtn", "int8", "fp8", "fp8-online"}
CALIBRATED = {"gptq", "awq", "int8"}  # the methods that read calibration data
WEIGHT_ONLY = {"gptq", "awq", "rtn"}  # the methods whose weight bits `bits` sets

# compressed-tensors 0.19's PRESET_SCHEMES (llm-compressor 0.14.0.1), as (weight bits, activation bits, weight type):
# written out so that a campaign file is checked without importing the tool, and so that a scheme an engine cannot
# serve is refused by name at plan time
PRESETS: dict[str, tuple[int, int, str]] = {
    "W4A16": (4, 16, "int"), "W4A16_ASYM": (4, 16, "int"), "W8A16": (8, 16, "int"), "W2A16": (2, 16, "int"),
    "W3A16": (3, 16, "int"), "W5A16": (5, 16, "int"), "W6A16": (6, 16, "int"), "W7A16": (7, 16, "int"),
    "W8A8": (8, 8, "int"), "INT8": (8, 8, "int"), "W4A8": (4, 8, "int"), "W4A4": (4, 4, "int"),
    "W4AFP8": (4, 8, "int"), "FP8": (8, 8, "float"), "FP8_DYNAMIC": (8, 8, "float"), "FP8_BLOCK": (8, 8, "float"),
    "NVFP4A16": (4, 16, "float"), "NVFP4": (4, 4, "float"), "MXFP4A16": (4, 16, "float"), "MXFP4": (4, 4, "float"),
    "MXFP8A16": (8, 16, "float"), "MXFP8": (8, 8, "float"),
}


def integer_weights_only(scheme: str | None) -> bool:
    """Whether a preset (None: the knobs' W<bits>A16) quantizes integer weights only, activations left in the
    model's dtype: what a simulated checkpoint can stand for."""
    return scheme is None or PRESETS[scheme][1:] == (16, "int")
