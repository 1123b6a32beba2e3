"""What a variant's `method` and a recipe's `scheme` are: the names the campaign file, the engines (what they can
serve), the quantizers (what they make) and the record's views (MLflow's params) share, below all of them."""

from __future__ import annotations

# fp8-online: the base checkpoint, quantized to FP8 by vLLM as it loads (`--quantization fp8`), GPU only;
# rtn: W<bits>A16 round-to-nearest (llm-compressor, no calibration): speed figures without calibration time;
# results: per-item results another evaluator already wrote (qeval/imports), read, not served
METHODS = ("bf16", "fp16", "gptq", "awq", "rtn", "int8", "fp8", "fp8-online", "checkpoint", "external", "results")
RESULTS = "results"
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


# what each method means for the numbers: scheme, weight bits, activation bits (params in MLflow, columns in reports)
SCHEMES = {"bf16": ("BF16", 16, 16), "fp16": ("FP16", 16, 16), "gptq": ("W4A16", 4, 16), "awq": ("W4A16", 4, 16),
           "rtn": ("W4A16", 4, 16), "int8": ("W8A8-INT8", 8, 8), "fp8": ("W8A8-FP8", 8, 8),
           "fp8-online": ("W8A8-FP8", 8, 8)}


_DTYPE_BITS = {"bfloat16": ("BF16", 16), "float16": ("FP16", 16), "float32": ("FP32", 32)}


def scheme_params(method: str, recipe: dict, dtype: str | None = None) -> dict[str, str]:
    """scheme / weight_bits / activation_bits / group_size, where the method says (not for checkpoints given as is).
    `dtype`: what it was served in: a full-precision baseline is that dtype, 16-bit activations are its width."""
    if method not in SCHEMES:
        return {}
    scheme, w, a = SCHEMES[method]
    if recipe.get("scheme") in PRESETS:  # a preset by name says its own bits
        scheme, (w, a, _) = recipe["scheme"], PRESETS[recipe["scheme"]]
    elif scheme == "W4A16" and recipe.get("bits", 4) != 4:  # the recipe's weight bits (gptq / awq / rtn)
        scheme, w = f"W{recipe['bits']}A16", int(recipe["bits"])
    if dtype in _DTYPE_BITS:
        name, bits = _DTYPE_BITS[dtype]
        scheme, w, a = (name, bits, bits) if method in ("bf16", "fp16") else (scheme, w, bits if a == 16 else a)
    out = {"scheme": scheme, "weight_bits": str(w), "activation_bits": str(a)}
    if recipe.get("simulate"):  # its weights on that grid, stored and served dequantized
        out["simulated"] = "true"
    if scheme.endswith("A16") and scheme.startswith("W") and recipe.get("group_size") and "scheme" not in recipe:
        out["group_size"] = str(recipe["group_size"])
    return out
