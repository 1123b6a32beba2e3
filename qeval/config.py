"""The campaign file: the model, the variants, and each component's own spec composed into one
CampaignConfig, validated at the boundary (errors name the file, the line and the key: qeval/validation.py).

The components' specs live beside them and are re-exported here for callers that import them from here."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (Field, PrivateAttr, SerializeAsAny, ValidationError, ValidationInfo, field_validator,
                      model_serializer, model_validator)

from .engines.spec import (EngineSpec, ExternalSpec, ServedEngineSpec, ServerSpec, TgiSpec, TrtllmSpec, VllmSpec,
                           merged)
from .errors import ConfigError
from .executors.spec import ExecutorSpec, LocalExecutorSpec
from .hashing import content_hash, key_hash
from .methods import CALIBRATED, METHODS, QUANTIZED, RESULTS, WEIGHT_ONLY
from .probe.spec import GridEngineSpec, GridSpec, Positive, ProbeSpec
from .quantize.base import QUANTIZERS
from .quantize.spec import RecipeSpec
from .validation import (Name, Strict, format_validation, known_keys, line_of, non_defaults, parse_model, read_yaml,
                    relocated)
from .suites.spec import (CustomSuiteRef, GenerationSpec, LmEvalSuiteRef, LogprobsSuiteRef,
                          SuiteRef)
from .tracking.spec import MlflowSpec
from .verdict.noise import SUFFIX as NOISE_SUFFIX, NoiseFloorSpec
from .verdict.policy import GatePolicy, GateRule, PerfMetric, PerfRule

__all__ = ["CampaignConfig", "ResultsSpec", "ConfigError", "CustomSuiteRef", "EngineSpec", "ExternalSpec", "GatePolicy", "GateRule",
           "GenerationSpec", "GridEngineSpec", "GridSpec", "LmEvalSuiteRef", "LogprobsSuiteRef", "METHODS",
           "MetricDeclaration", "MlflowSpec", "ModelSpec", "Name", "PerfMetric", "PerfRule", "Positive", "ProbeSpec", "QUANTIZED",
           "RecipeSpec", "ServedEngineSpec", "ServerSpec", "Strict", "SuiteRef", "TgiSpec", "TrtllmSpec",
           "VariantSpec", "VllmSpec", "format_validation", "line_of", "load_config", "load_policy", "parse_model",
           "read_yaml"]


def _made_by_quantizers() -> set[str]:
    """The methods the registered quantizers (plugins too) make."""
    return {m for q in QUANTIZERS.names() for m in QUANTIZERS.get(q).methods}


def _engine_keys(kind: Any) -> list[str] | None:
    """The keys an engine kind takes (for the did-you-mean of an override's unknown key)."""
    try:
        return known_keys(EngineSpec.model_for(str(kind)))
    except (ConfigError, ValueError):
        return None


class ModelSpec(Strict):
    """The base (full-precision) checkpoint: a folder, the embedded one built by `make setup`, or a Hugging Face
    model id resolved through the local Hugging Face cache (qeval/machine/hub.py). Its content is its key, however
    named."""

    path: Path | None = None
    # smollm2-135m-instruct: built by `qeval setup`; llama-3-8b-random: a Llama-3-8B-shaped model with random
    # weights, built where it runs by scripts/make-random-llama.py (speed figures only: its quality means nothing);
    # gemma-3-270m: a second family (Gemma terms of use), built on demand by `qeval setup --model gemma-3-270m`
    builtin: Literal["smollm2-135m-instruct", "llama-3-8b-random", "gemma-3-270m"] | None = None
    # org/name on the Hugging Face hub: its snapshot in the local cache (HF_HOME / HF_HUB_CACHE), downloaded there
    # first unless HF_HUB_OFFLINE is set or the hub cannot be reached
    hf: str | None = None
    revision: str = "main"  # of `hf`: a branch, a tag or a commit hash
    # auto: bfloat16 where bf16 compute is native (GPU, AVX512-BF16 / AMX CPUs), float32 on other CPUs
    # (qeval/machine/hardware.py); results are keyed by the dtype they were computed in
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    # code shipped with a checkpoint runs only when this model's entry says so (engines and quantizers)
    trust_remote_code: bool = False

    @field_validator("hf")
    @classmethod
    def _repo_id(cls, v: str | None) -> str | None:
        from .machine.hub import check_repo_id

        return v if v is None else check_repo_id(v)

    @model_validator(mode="after")
    def _one_source(self) -> "ModelSpec":
        if sum(x is not None for x in (self.path, self.builtin, self.hf)) != 1:
            raise ValueError("give exactly one of `path`, `builtin` or `hf`")
        if self.hf is None and self.revision != "main":
            raise ValueError("`revision` is the revision of `hf` (a Hugging Face model id)")
        return self

    @model_serializer(mode="wrap")
    def _own_keys(self, handler: Any) -> dict[str, Any]:
        # a folder's or an embedded model's entry carries no hub revision (in the record, in the config hash)
        out = handler(self)
        if self.hf is None:
            out.pop("hf", None)
            out.pop("revision", None)
        return out


class ResultsSpec(Strict):
    """Per-item results another evaluator wrote (`method: results`): read by the importer of `format`
    (qeval/imports), never served."""

    format: str  # a registered importer: lm_eval, inspect
    path: Path  # what that evaluator wrote (lm-eval: its --output_path folder, or one results_*.json; inspect: one log)
    tasks: list[str] | None = None  # the tasks to compare (their evaluator's names); None: every task the baseline has
    tracking_uri: str | None = None  # mlflow: the tracking store holding the run (None: MLflow's default)

    @field_validator("format")
    @classmethod
    def _known_format(cls, v: str) -> str:
        from .imports import IMPORTERS

        try:
            IMPORTERS.get(v)
        except ConfigError as e:
            raise ValueError(str(e)) from None
        return v

    @model_validator(mode="after")
    def _uri_for_mlflow(self) -> "ResultsSpec":
        if self.tracking_uri is not None and self.format != "mlflow":
            raise ValueError("tracking_uri is where an MLflow run is stored (format: mlflow)")
        return self

    @property
    def local(self) -> bool:
        """Whether `path` is a file or folder on this machine (an MLflow run's is a URI, runs:/<id>)."""
        from .imports import IMPORTERS

        return IMPORTERS.get(self.format).local


class MetricDeclaration(Strict):
    """What an imported metric is, where its evaluator does not say (`metrics:` of a comparison file): qeval never
    infers it from the values, their type or the name."""

    match: str  # glob over "suite/metric", e.g. "inspect/my_task/judge"
    type: Literal["binary", "continuous"]  # binary: every item's score is 0 or 1
    higher_is_better: bool | None = None  # None: a gate rule's `direction` must say


class VariantSpec(Strict):
    name: Name
    method: str  # one of METHODS, or a method a registered quantizer makes (its `methods`)
    checkpoint: Path | None = None  # an existing (quantized) checkpoint to serve as is
    endpoint: str | None = None  # an already running OpenAI-compatible server
    served_model: str | None = None  # the model name that endpoint expects
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")  # the NAME of a variable holding its key
    recipe: RecipeSpec = RecipeSpec()
    # who makes the checkpoint: llm-compressor by default; modelopt (FP8 HF checkpoint) or trtllm (FP8
    # TensorRT engine, for engine kind trtllm with backend tensorrt) for fp8
    quantizer: str | None = None  # a registered quantizer (entry-point group qeval.quantizers)
    engine: dict[str, Any] = {}  # per-variant overrides of the campaign's engine settings
    results: ResultsSpec | None = None  # method `results`: what another evaluator wrote, compared as it is

    @model_validator(mode="before")
    @classmethod
    def _recipe_file(cls, data: Any) -> Any:
        # `recipe_file: x.yaml`, as teams write it beside the variant, is the recipe's own `file`
        if isinstance(data, Mapping) and "recipe_file" in data:
            data = dict(data)
            recipe = dict(data.get("recipe") or {})
            recipe["file"] = data.pop("recipe_file")
            data["recipe"] = recipe
        return data

    @field_validator("method")
    @classmethod
    def _known_method(cls, v: str) -> str:
        if v in METHODS or v in _made_by_quantizers():
            return v
        known = [*METHODS, *sorted(_made_by_quantizers() - set(METHODS))]
        close = difflib.get_close_matches(v, known, n=1)
        raise ValueError(f"unknown method {v!r}." + (f" Did you mean {close[0]!r}?" if close else "")
                         + f" Known: {', '.join(known)}")

    @field_validator("quantizer")
    @classmethod
    def _known_quantizer(cls, v: str | None) -> str | None:
        try:
            return v if v is None or QUANTIZERS.get(v) else v
        except ConfigError as e:
            raise ValueError(str(e)) from None  # the registry's did-you-mean, with the file's line

    @model_validator(mode="after")
    def _source(self) -> "VariantSpec":
        if self.method == "external" and not self.endpoint:
            raise ValueError("method 'external' needs `endpoint` (e.g. http://127.0.0.1:8000/v1)")
        if self.method != "external" and self.endpoint:
            raise ValueError("`endpoint` is only for method 'external'")
        if (self.method == RESULTS) != (self.results is not None):
            raise ValueError("method 'results' and `results: {format, path}` go together")
        if self.method == RESULTS and (self.checkpoint or self.endpoint or self.engine or self.quantizer
                                       or non_defaults(self.recipe)):
            raise ValueError("a `results` variant is read, not made or served: it takes no checkpoint, endpoint, "
                             "engine, quantizer or recipe")
        if self.method == "checkpoint" and self.checkpoint is None:
            raise ValueError("method 'checkpoint' needs `checkpoint` (a folder)")
        if self.quantizer is not None:
            made = QUANTIZERS.get(self.quantizer).methods  # empty: not declared
            if made and self.method not in made:
                raise ValueError(f"quantizer {self.quantizer} makes method {' / '.join(sorted(made))} only")
        elif self.method not in METHODS:
            raise ValueError(f"method {self.method!r} is made by a plugin's quantizer: name it (quantizer: ...)")
        if self.recipe.bits != 4 and self.method not in WEIGHT_ONLY:  # a record's dump holds the default 4
            raise ValueError(f"recipe.bits is for {' / '.join(sorted(WEIGHT_ONLY))} (W<bits>A16); {self.method} "
                             "fixes its own")
        if self.recipe.actorder is not None and self.method != "gptq":
            raise ValueError(f"recipe.actorder is GPTQ's column order; method {self.method} has none")
        if self.recipe.simulate is True and self.method not in WEIGHT_ONLY:
            raise ValueError(f"recipe.simulate is for {' / '.join(sorted(WEIGHT_ONLY))}; method {self.method} "
                             "quantizes activations too")
        if self.recipe.scheme is not None and self.method not in WEIGHT_ONLY:
            raise ValueError(f"recipe.scheme is for {' / '.join(sorted(WEIGHT_ONLY))}; method {self.method} fixes its own")
        if self.recipe.file is not None and (self.quantizer or "llmcompressor") != "llmcompressor":
            raise ValueError(f"recipe.file is an llm-compressor recipe; quantizer {self.quantizer} takes none")
        if self.recipe.calibration is not None and self.method not in CALIBRATED:
            raise ValueError(f"recipe.calibration is for {' / '.join(sorted(CALIBRATED))}; method {self.method} "
                             "reads no calibration data")
        return self


class CampaignConfig(Strict):
    name: Name
    description: str = ""  # shown under the verdict in every report (e.g. what the figures can and cannot mean)
    model: ModelSpec | None = None  # None only where every variant is `results` (a comparison, `qeval compare`)
    output_dir: Path = Path("runs")
    baseline: VariantSpec
    variants: list[VariantSpec] = Field(min_length=1)
    engine: SerializeAsAny[EngineSpec] = VllmSpec()
    suites: list[SerializeAsAny[SuiteRef]] = []  # may be empty for a speed-only campaign (probe enabled)
    gates: GatePolicy | Path = GatePolicy()  # inline, or a policy file
    mlflow: MlflowSpec = MlflowSpec()
    probe: ProbeSpec = ProbeSpec()
    grid: GridSpec | None = None  # batch size x concurrency (needs engine restarts)
    seed: int = 0
    # the baseline evaluated a second time by a second server under another batch shape (qeval/verdict/noise.py)
    noise_floor: NoiseFloorSpec = NoiseFloorSpec()
    executor: ExecutorSpec = LocalExecutorSpec()  # where variants run; changes no result, so not in the hash
    # imported results only: the baseline's results from a second evaluation of the same model, read as the A/A noise
    # floor (qeval/verdict/noise.py) that a served campaign's noise_floor measures by serving the baseline again
    noise: VariantSpec | None = None
    # imported results' metrics that their evaluator does not declare (a served suite declares its own)
    metrics: list[MetricDeclaration] = []
    # the campaign as its file wrote it (paths relative to the file, the policy file read): what the
    # config hash is taken over, so that a checkout in another folder is the same campaign
    _written: dict[str, Any] | None = PrivateAttr(default=None)

    @field_validator("engine", mode="before")
    @classmethod
    def _engine_of_its_kind(cls, v: Any) -> Any:
        return EngineSpec.of_its_kind(v)  # the campaign's block: every key its kind's own

    @field_validator("baseline")
    @classmethod
    def _baseline_unquantized(cls, v: VariantSpec) -> VariantSpec:
        if v.method in QUANTIZED or v.method not in METHODS:
            raise ValueError(f"the baseline must be full precision, not {v.method!r}")
        return v

    @property
    def imported(self) -> bool:
        """Every variant, the baseline too, is results another evaluator wrote: compared, nothing served."""
        return all(v.method == RESULTS for v in self.all_variants())

    @model_validator(mode="after")
    def _imported_or_served(self) -> "CampaignConfig":
        if self.imported:
            given = [k for k in ("model", "suites", "engine", "probe", "grid", "noise_floor") if k in self.model_fields_set]
            if given:
                raise ValueError(f"every variant is `results` (compared, not served): {', '.join(given)} "
                                 "come from the results themselves; remove them")
            return self
        if self.noise is not None:
            raise ValueError("noise: is the baseline's imported results read again (every variant `method: results`); "
                             "a campaign that serves its variants measures its noise floor with `noise_floor: true`")
        if self.metrics:
            raise ValueError("metrics: declares what imported results' metrics are (every variant `method: results`); "
                             "a served suite declares its own")
        if any(v.method == RESULTS for v in self.all_variants()):
            raise ValueError("a campaign either serves its variants or compares results another evaluator wrote: "
                             "make every variant, the baseline too, `method: results`, or none")
        if self.model is None:
            raise ValueError("model: required (the base checkpoint the variants are made from)")
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> "CampaignConfig":
        if self.imported:
            if self.noise is not None and self.noise.method != RESULTS:
                raise ValueError("noise: the baseline's results from a second evaluation: `method: results` with "
                                 "`results: {format, path}`")
            names = [self.baseline.name] + [v.name for v in self.variants] + ([self.noise.name] if self.noise else [])
            if (dup := {n for n in names if names.count(n) > 1}):
                raise ValueError(f"variant names must be unique; repeated: {sorted(dup)}")
            return self
        names = [self.baseline.name] + [v.name for v in self.variants]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"variant names must be unique; repeated: {sorted(dup)}")
        if self.noise_floor.enabled and (aa := self.baseline.name + NOISE_SUFFIX) in names:
            raise ValueError(f"noise_floor: its evaluation is named {aa!r}, which a variant already is; rename that one")
        if self.engine.trust_remote_code or any("trust_remote_code" in v.engine for v in self.all_variants()):
            raise ValueError("trust_remote_code belongs to the model it trusts: set model.trust_remote_code")
        if self.engine.dtype or any("dtype" in v.engine for v in self.all_variants()):
            raise ValueError("the dtype belongs to the model: set model.dtype (auto follows the machine)")
        extra_args = getattr(self.engine, "extra_args", [])  # an endpoint someone else runs takes none
        if any(a.startswith("--dtype") for a in extra_args):
            raise ValueError("engine.extra_args: --dtype is set from model.dtype, not here")
        if any("--trust-remote-code" in a for a in extra_args):
            raise ValueError("engine.extra_args: --trust-remote-code is set by model.trust_remote_code, not here")
        for loc, v in [(("baseline",), self.baseline), *((("variants", i), v) for i, v in enumerate(self.variants))]:
            if v.engine:  # a per-variant override is held to its kind's rules, and keeps its line
                try:
                    spec = merged(self.engine, v.engine)
                except ValidationError as e:
                    raise relocated(e, (*loc, "engine"), _engine_keys(v.engine.get("kind", self.engine.kind))) from None
            else:
                spec = self.engine
            if isinstance(spec, ExternalSpec) and spec.kind == "external" and v.method != "external":
                raise ValueError(f"variant {v.name}: engine kind external is an endpoint someone else runs: "
                                 "give it as method: external with its endpoint")
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
        varied = {k for k, vals in g.engine.model_dump().items() if vals}  # the settings its rows change
        other = [v.name for v in chosen
                 if not varied <= set(known_keys(EngineSpec.model_for(v.engine.get("kind", engine.kind))))]
        device = {v.name: v.engine.get("device", getattr(engine, "device", "cpu")) for v in chosen}
        if other:
            raise ValueError(f"grid: its settings ({', '.join(sorted(varied))}) are not settings of {other}'s "
                             "engine; name the variants whose engine has them in grid.variants")
        if g.engine.gpu_memory_utilization and any(device[v.name] == "cpu" for v in chosen):
            raise ValueError("grid.engine.gpu_memory_utilization is for device: gpu (on a CPU, vary max_num_seqs or "
                             "max_num_batched_tokens)")
        cells = len(chosen) * g.rows() * len(g.concurrency)
        if cells > g.max_cells:
            raise ValueError(f"grid: {len(chosen)} variant(s) x {g.rows()} engine setting(s) x {len(g.concurrency)} "
                             f"concurrencies = {cells} cells, more than max_cells ({g.max_cells})")
        return g

    @property
    def aa_name(self) -> str | None:
        """The A/A evaluation's name in the record: the imported one (`noise`), else the baseline's second
        evaluation (`noise_floor`); None without either."""
        if self.noise is not None:
            return self.noise.name
        return self.baseline.name + NOISE_SUFFIX if self.noise_floor.enabled else None

    def all_variants(self) -> list[VariantSpec]:
        return [self.baseline, *self.variants]

    def grid_variants(self) -> list[VariantSpec]:
        """The variants the grid runs on: those it names, else every one qeval serves itself."""
        g = self.grid
        return [] if g is None else [v for v in self.all_variants()
                                     if v.method != "external" and (g.variants is None or v.name in g.variants)]

    def config_hash(self) -> str:
        """The campaign's identity: what its file says beyond the defaults (non_defaults), so that a setting or
        an engine kind added to qeval later changes no existing campaign's hash unless the file sets it; a
        changed default that changes results bumps qeval.hashing.KEY_VERSION instead."""
        data = json.loads(json.dumps(self._written)) if self._written is not None else non_defaults(self)
        data.pop("mlflow", None)  # where results are logged changes no result: `run --no-mlflow` then `finish`
        data.pop("executor", None)  # where the variants ran changes no result
        inputs = {v.name: v.recipe for v in self.all_variants()}
        for v in [data.get("baseline") or {}, *(data.get("variants") or [])]:
            if isinstance(v.get("recipe"), dict):
                _content_not_place(v["recipe"], inputs.get(v.get("name")))
        return key_hash(data)


def _content_not_place(written: dict[str, Any], recipe: RecipeSpec | None) -> None:
    """A recipe file or calibration set enters the hash by its content: edited, another campaign; moved, the same."""
    if recipe is None:
        return
    if written.get("file") is not None and recipe.file is not None and recipe.file.is_file():
        written["file"] = content_hash(recipe.file)
    cal = written.get("calibration")
    if isinstance(cal, dict) and recipe.calibration is not None and recipe.calibration.path.exists():
        written["calibration"] = {**cal, "path": content_hash(recipe.calibration.path)}


def _resolve(p: Path | None, base: Path) -> Path | None:
    return None if p is None else (p if p.is_absolute() else (base / p).resolve())


def _resolve_recipe(recipe: RecipeSpec, base: Path) -> RecipeSpec:
    cal = recipe.calibration
    update: dict[str, Any] = {"file": _resolve(recipe.file, base)}
    if cal is not None:
        update["calibration"] = cal.model_copy(update={"path": _resolve(cal.path, base)})
    return recipe.model_copy(update=update)


def _resolve_results(results: ResultsSpec | None, base: Path) -> ResultsSpec | None:
    if results is None or not results.local:
        return results
    return results.model_copy(update={"path": _resolve(results.path, base)})


def load_policy(path: Path) -> GatePolicy:
    data, node = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping (a gate policy)", file=str(path))
    return parse_model(GatePolicy, data, str(path), node)


def load_config(path: str | Path) -> CampaignConfig:
    """Read and validate a campaign file. Relative paths are taken from the file's folder."""
    path = Path(path)
    data, node = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of campaign settings at the top level", file=str(path))
    cfg: CampaignConfig = parse_model(CampaignConfig, data, str(path), node)
    written = non_defaults(cfg)  # before any path is made absolute
    base = path.resolve().parent
    suites = [s.located(base) for s in cfg.suites]
    variants = [v.model_copy(update={"checkpoint": _resolve(v.checkpoint, base), "recipe": _resolve_recipe(v.recipe, base),
                                     "results": _resolve_results(v.results, base)})
                for v in cfg.variants]
    baseline = cfg.baseline.model_copy(update={"checkpoint": _resolve(cfg.baseline.checkpoint, base),
                                               "results": _resolve_results(cfg.baseline.results, base)})
    model = None if cfg.model is None else cfg.model.model_copy(update={"path": _resolve(cfg.model.path, base)})
    noise = None if cfg.noise is None else cfg.noise.model_copy(update={"results": _resolve_results(cfg.noise.results, base)})
    cfg = cfg.model_copy(update={"suites": suites, "variants": variants, "baseline": baseline, "model": model,
                                 "noise": noise, "output_dir": _resolve(cfg.output_dir, base)})
    if isinstance(cfg.gates, Path):
        policy_file = _resolve(cfg.gates, base)
        if not policy_file.is_file():
            raise ConfigError(f"gate policy {policy_file} does not exist", file=str(path), where="gates")
        cfg = cfg.model_copy(update={"gates": load_policy(policy_file)})
    written.pop("gates", None)  # the policy's content, wherever its file lies
    written |= {"gates": gates} if (gates := non_defaults(cfg.gates)) else {}
    cfg._written = written
    for v in cfg.all_variants() + ([cfg.noise] if cfg.noise is not None else []):
        if v.checkpoint is not None and not (v.checkpoint / "config.json").is_file():
            where = f"variant {v.name}: checkpoint"
            what = "has no config.json" if v.checkpoint.is_dir() else "does not exist"
            raise ConfigError(f"{v.checkpoint} {what}", file=str(path), where=where)
        if v.recipe.file is not None and not v.recipe.file.is_file():
            raise ConfigError(f"recipe file {v.recipe.file} does not exist", file=str(path),
                              where=f"variant {v.name}: recipe.file")
        if v.results is not None and v.results.local and not v.results.path.exists():
            raise ConfigError(f"{v.results.path} does not exist", file=str(path), where=f"variant {v.name}: results.path")
        cal = v.recipe.calibration
        if cal is not None and not cal.path.exists():
            raise ConfigError(f"calibration data {cal.path} does not exist", file=str(path),
                              where=f"variant {v.name}: recipe.calibration.path")
    if cfg.model is not None and cfg.model.path is not None and not (cfg.model.path / "config.json").is_file():
        raise ConfigError(f"{cfg.model.path} is not a checkpoint folder (no config.json)", file=str(path), where="model.path")
    for s in cfg.suites:
        s.check_files(str(path))
    return cfg
