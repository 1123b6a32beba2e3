"""NVIDIA's FP8 routes: Model Optimizer (an FP8 Hugging Face checkpoint, which vLLM and trtllm-serve's
PyTorch backend both serve) and TensorRT-LLM (an engine built for one GPU architecture).

Each runs in a Python of its own: Model Optimizer in the modelopt env (an overlay on llm-compressor's), or
QEVAL_MODELOPT_PYTHON[PATH]; TensorRT-LLM, whose wheel comes from NVIDIA's own index, not PyPI alone, in
QEVAL_TRTLLM_PYTHON[PATH].
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ..engines.spec import TrtllmSpec
from ..errors import QuantizeError
from .base import QUANTIZERS, QuantizeTarget
from .worker import WORKERS, WorkerQuantizer


def gpu_architecture() -> str:
    """The compute capability of GPU 0 (e.g. "9.0" for a Hopper GPU): a TensorRT engine runs only there."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise QuantizeError("a TensorRT-LLM engine is built for the GPU it runs on, and this machine has none")
    out = subprocess.run([smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"], capture_output=True,
                         text=True, timeout=30)
    first = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    if not first:
        raise QuantizeError(f"nvidia-smi could not name the GPU: {out.stderr.strip()[:200]}")
    return first.replace(", ", "/")  # e.g. "NVIDIA H100 80GB HBM3/9.0"


@QUANTIZERS.register("modelopt")
class ModelOpt(WorkerQuantizer):
    name = "modelopt"
    runtime_of = staticmethod(lambda settings: settings.modelopt)  # the installed tool it runs in
    worker = WORKERS / "quantize_modelopt.py"
    version = "0.47.0"
    dist = "nvidia-modelopt"
    methods = frozenset({"fp8"})
    install_hint = "qeval setup --only modelopt"

    def spec(self, base: Path, variant: QuantizeTarget) -> dict:
        if variant.method != "fp8":
            raise QuantizeError(f"variant {variant.name!r}: quantizer modelopt makes fp8 only, not {variant.method!r}")
        r = variant.recipe
        return {"method": "fp8", "samples": r.calibration_samples, "seq_len": r.calibration_seq_len}


@QUANTIZERS.register("trtllm")
class TrtllmBuild(WorkerQuantizer):
    """FP8 quantization (TensorRT-LLM's LLM API, through Model Optimizer) and an engine build, in one step."""

    name = "tensorrt-llm"
    runtime_of = staticmethod(lambda settings: settings.trtllm)
    worker = WORKERS / "build_trtllm.py"
    version = "1.2.1"
    dist = "tensorrt_llm"
    methods = frozenset({"fp8"})
    done_file = "qeval-build.json"
    needs_gpu = True  # a TensorRT engine is built for the GPU it will run on
    install_hint = "install tensorrt-llm from NVIDIA's index (pypi.nvidia.com), then set QEVAL_TRTLLM_PYTHON"

    def spec(self, base: Path, variant: QuantizeTarget) -> dict:
        if variant.method != "fp8":
            raise QuantizeError(f"variant {variant.name!r}: the trtllm builder makes fp8 only, not {variant.method!r}")
        e = self.engine
        if not isinstance(e, TrtllmSpec) or e.max_batch_size is None:
            raise QuantizeError(f"variant {variant.name!r}: a TensorRT engine fixes max_batch_size at build time; "
                                "give engine.max_batch_size")
        r = variant.recipe
        return {"method": "fp8", "samples": r.calibration_samples, "seq_len": r.calibration_seq_len,
                "max_batch_size": e.max_batch_size, "max_seq_len": e.max_model_len,
                "max_num_tokens": e.max_num_tokens}

    def cache_extra(self) -> dict:
        return {"gpu": gpu_architecture()}  # an engine from another GPU architecture will not load
