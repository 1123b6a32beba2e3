"""TensorRT-LLM's OpenAI-compatible server (`trtllm-serve`), started and stopped like vLLM.

Written against TensorRT-LLM's documented CLI (tensorrt_llm/commands/serve.py) and server
(tensorrt_llm/serve/openai_server.py); it could not be run here: TensorRT-LLM installs only from
NVIDIA's own package index. What differs from vLLM, and what qeval does about it:
- /v1/completions returns logprobs for generated tokens only (`echo` pastes the prompt text back), so
  prompt logprobs do not exist: loglikelihood tasks and distribution probes are refused for this
  engine (capabilities.prompt_logprobs is None), never scored wrong;
- with backend "tensorrt" the model is an engine built for one GPU architecture with max_batch_size,
  max_seq_len and max_num_tokens fixed (quantizer "trtllm" builds and caches it); the probe's
  concurrency may not exceed max_batch_size (checked when the campaign file is read);
- /metrics is a JSON list of iteration stats, not Prometheus text;
- memory is VllmEngine's: RSS and NVML (its log has none of vLLM's KV-cache / weights lines).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import MissingEnvError
from .base import ServedVariant
from .capabilities import Capabilities
from .capacity import Capacity
from .registry import ENGINES
from .spec import TrtllmSpec
from .vllm import VllmEngine

if TYPE_CHECKING:
    from ..settings import Runtime, Settings

# the console script `trtllm-serve` is tensorrt_llm.commands.serve:main; run it from the runtime's Python
_SERVE = "from tensorrt_llm.commands.serve import main; main()"


@ENGINES.register("trtllm")
class TrtllmEngine(VllmEngine):
    kind = "trtllm"
    Spec = TrtllmSpec  # type: ignore[assignment]
    # no prompt logprobs; /metrics is JSON (no Prometheus names); memory: RSS and NVML
    capabilities = Capabilities(prompt_logprobs=None, token_prompts=True, tokenize=None, metrics=(),
                                memory=("rss_bytes", "gpu_bytes"))

    label = "TensorRT-LLM"

    @staticmethod
    def default_runtime(settings: "Settings") -> "Runtime":
        return settings.trtllm

    @staticmethod
    def check_plan(spec: "TrtllmSpec", variant: ServedVariant, probe: Any, cpu: Any = None) -> tuple[str, str] | None:
        """What a campaign asks that this engine cannot do: (message, where) or None."""
        too_many = [c for c in probe.concurrency if spec.max_batch_size and c > spec.max_batch_size]
        if probe.enabled and too_many:
            return (f"probe concurrency {too_many} exceeds the engine's max_batch_size {spec.max_batch_size}, "
                    "fixed when the engine was built", "probe.concurrency")
        if spec.backend == "tensorrt" and variant.quantizer != "trtllm" and variant.method != "checkpoint":
            return ("backend tensorrt serves a built engine: use quantizer: trtllm (method fp8), or method: "
                    "checkpoint with an engine folder", "engine.kind")
        return None

    def capacity(self) -> Capacity | None:
        """Its batch as set (max_batch_size); its KV cache is not read: None where it was not set."""
        return Capacity(max_num_seqs=self.spec.max_batch_size) if self.spec.max_batch_size else None

    def missing_runtime(self) -> MissingEnvError:
        return MissingEnvError("the TensorRT-LLM environment", self.runtime.location,
                               "install tensorrt-llm from NVIDIA's index (pypi.nvidia.com), then set "
                               "QEVAL_TRTLLM_PYTHON (and QEVAL_TRTLLM_PYTHONPATH)")

    @property
    def tokenizer(self) -> Path:
        # a built engine folder carries the tokenizer qeval saved next to it; a checkpoint has its own
        return self.checkpoint

    def argv(self, port: int) -> list[str]:
        s = self.spec
        argv = [str(self.runtime.python), "-c", _SERVE, "serve", str(self.checkpoint),
                "--backend", s.backend, "--tokenizer", str(self.tokenizer),
                "--host", s.host, "--port", str(port), "--max_seq_len", str(s.max_model_len)]
        if s.max_batch_size:
            argv += ["--max_batch_size", str(s.max_batch_size)]
        if s.max_num_tokens:
            argv += ["--max_num_tokens", str(s.max_num_tokens)]
        if s.gpu_memory_utilization:  # TensorRT-LLM sizes its KV cache as a share of the free memory
            argv += ["--kv_cache_free_gpu_memory_fraction", str(s.gpu_memory_utilization)]
        return argv + list(s.extra_args)

    def _env(self) -> dict[str, str]:
        import os

        return self.runtime.env(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DO_NOT_TRACK="1")
