"""What a variant's `method` and `recipe` mean to the quantizers that make it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..specs import Strict

# fp8-online: the base checkpoint, quantized to FP8 by vLLM as it loads (`--quantization fp8`), GPU only;
# rtn: W<bits>A16 round-to-nearest (llm-compressor, no calibration): speed figures without calibration time
METHODS = ("bf16", "fp16", "gptq", "awq", "rtn", "int8", "fp8", "fp8-online", "checkpoint", "external")
QUANTIZED = {"gptq", "awq", "rtn", "int8", "fp8", "fp8-online"}


class RecipeSpec(Strict):
    """How llm-compressor makes the variant. Defaults fit a 135M model on a CPU."""

    group_size: int = Field(64, gt=0)
    symmetric: bool = True
    calibration_samples: int = Field(64, gt=0)
    calibration_seq_len: int = Field(256, gt=0)
    awq_n_grid: int = Field(10, gt=1)  # AWQ's grid search dominates its run time on a CPU
    # weight bits of gptq / awq / rtn (W<bits>A16); int8 and fp8 fix their own
    bits: Literal[2, 3, 4, 8] = 4
    # modules left in full precision: names or llm-compressor's "re:" patterns
    ignore: list[str] = Field(default_factory=lambda: list(DEFAULT_IGNORE))
    # GPTQ's column order: static (= weight: by activation, llm-compressor's default) or none; None: the tool's default
    actorder: Literal["static", "weight", "none"] | None = None

    def changed(self) -> dict:
        """The knobs added after checkpoints were first cached, where they differ from their defaults: what a
        quantizer's cache key takes, so that a recipe that sets none of them keeps its cached checkpoint."""
        default = RecipeSpec.model_construct()
        return {k: getattr(self, k) for k in LATER_KNOBS if getattr(self, k) != getattr(default, k)}


DEFAULT_IGNORE = ("lm_head",)
LATER_KNOBS = ("bits", "ignore", "actorder")  # RecipeSpec.changed
WEIGHT_ONLY = {"gptq", "awq", "rtn"}  # the methods whose weight bits `bits` sets
