"""What a variant's `method` and `recipe` mean to the quantizers that make it."""

from __future__ import annotations

from pydantic import Field

from ..specs import Strict

# fp8-online: the base checkpoint, quantized to FP8 by vLLM as it loads (`--quantization fp8`), GPU only;
# rtn: W4A16 round-to-nearest (llm-compressor, no calibration): speed figures without calibration time
METHODS = ("bf16", "fp16", "gptq", "awq", "rtn", "int8", "fp8", "fp8-online", "checkpoint", "external")
QUANTIZED = {"gptq", "awq", "rtn", "int8", "fp8", "fp8-online"}


class RecipeSpec(Strict):
    """How llm-compressor makes the variant. Defaults fit a 135M model on a CPU."""

    group_size: int = Field(64, gt=0)
    symmetric: bool = True
    calibration_samples: int = Field(64, gt=0)
    calibration_seq_len: int = Field(256, gt=0)
    awq_n_grid: int = Field(10, gt=1)  # AWQ's grid search dominates its run time on a CPU
