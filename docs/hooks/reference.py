"""MkDocs hook: the reference pages rendered from the code at build time, so they cannot drift.

A page holds a marker (`<!-- qeval:cli -->`, `<!-- qeval:campaign -->`, `<!-- qeval:record -->`) that is
replaced by the rendering: the CLI from the typer app, the campaign file's keys from CampaignConfig and the
models it nests, the run record's fields from RunRecord. A field's description is its pydantic
`description`, else the comment written beside or above it in the source, else the model's docstring."""

from __future__ import annotations

import ast
import inspect
import io
import json
import sys
import textwrap
import tokenize
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any, Iterator

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

# the checkout this hook lives in documents its own code, whichever qeval the Python running MkDocs has installed
ROOT = Path(__file__).resolve().parents[2]
if (ROOT / "qeval" / "__init__.py").is_file() and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MARKERS = {"cli": "<!-- qeval:cli -->", "campaign": "<!-- qeval:campaign -->", "record": "<!-- qeval:record -->"}


# -- descriptions from the source ------------------------------------------------------------------------------

def _field_comments(cls: type) -> dict[str, str]:
    """Each field of `cls`'s own body and the comment that explains it: the comment lines right above it, then
    the comment at the end of its line(s)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        text = tok.string.lstrip("#").strip()
        if tok.type == tokenize.COMMENT and not text.startswith(("type:", "noqa", "pragma")):
            comments[tok.start[0]] = text
    lines = source.splitlines()
    body = ast.parse(source).body[0]
    out: dict[str, str] = {}
    for node in getattr(body, "body", []):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line >= 1 and line in comments and lines[line - 1].lstrip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        beside = [comments[n] for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
                  if n in comments and not lines[n - 1].lstrip().startswith("#")]
        text = " ".join(above + beside).strip()
        if text:
            out[node.target.id] = text
    return out


def _description(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    if field.description:
        return field.description
    for cls in model.__mro__:  # the class that declares the field holds its comment
        if name in getattr(cls, "__annotations__", {}):
            text = _field_comments(cls).get(name)
            if text:
                return text
    return ""


def _docstring(model: type) -> str:
    doc = model.__dict__.get("__doc__")
    return " ".join(inspect.cleandoc(doc).split()) if doc else ""


# -- types and defaults -----------------------------------------------------------------------------------------

def _models_in(tp: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation admits, through Annotated, Optional, unions and containers."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [m for arg in typing.get_args(tp) for m in _models_in(arg)]


def type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        names = [type_name(a) for a in args if a is not type(None)]
        return " | ".join(names) + (" | null" if type(None) in args else "")
    if origin in (list, tuple, set, frozenset):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {type_name(args[0])} to {type_name(args[1])}" if args else "mapping"
    if getattr(tp, "__name__", None) == "SerializeAsAny" or origin is not None and not args:
        return type_name(args[0]) if args else str(tp)
    if tp is Any:
        return "any"
    if isinstance(tp, type):
        if issubclass(tp, BaseModel):
            return tp.__name__
        if issubclass(tp, Path):
            return "path"
        if issubclass(tp, Enum):
            return " | ".join(json.dumps(m.value) for m in tp)
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(tp.__name__, tp.__name__)
    return str(tp).replace("typing.", "")


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def default_text(model: type[BaseModel], name: str) -> str:
    field = model.model_fields[name]
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        return "(its defaults)"
    text = json.dumps(_plain(value))
    return f"`{text}`" if len(text) <= 60 else "(see the source)"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# -- models: one table per model, nested models flattened under their key path ---------------------------------

def _kinds(family: type[BaseModel]) -> list[tuple[str, type[BaseModel]]]:
    """The registered kinds of a family whose `kind` picks the model (engines, suites, executors), built-in
    ones only: a plugin installed beside qeval documents itself."""
    from qeval.engines.registry import ENGINES
    from qeval.engines.spec import EngineSpec
    from qeval.executors.spec import EXECUTORS, ExecutorSpec
    from qeval.suites.spec import SUITES, SuiteRef

    registry = {EngineSpec: ENGINES, SuiteRef: SUITES, ExecutorSpec: EXECUTORS}.get(family)
    if registry is None:
        return []
    names = set(registry.names()) | set(getattr(registry, "_modules", {}))
    out = []
    for kind in sorted(names):
        try:
            obj = registry.get(kind)
            model = family.model_for(kind)
        except Exception:  # an optional dependency absent where the docs are built: that kind is left out
            continue
        if (getattr(obj, "__module__", "") or "").startswith("qeval.") or getattr(model, "__module__", "").startswith("qeval."):
            out.append((kind, model))
    return out


def _is_family(model: type[BaseModel]) -> bool:
    from qeval.validation import Kinded

    return issubclass(model, Kinded) and bool(_kinds(model))


# the few top-level keys whose declaration carries no comment: what the campaign file means by them
SAID = {
    "CampaignConfig.name": "the campaign's name: its run folder (`output_dir/NAME`) and, by default, its MLflow "
                           "experiment",
    "CampaignConfig.output_dir": "where run folders go; relative: to the campaign file",
    "CampaignConfig.baseline": "the full-precision variant every delta is taken against",
    "CampaignConfig.variants": "the quantized (or otherwise served) variants, each compared with the baseline",
    "CampaignConfig.suites": "what every variant is evaluated on; `kind` picks the suite's settings (below)",
    "CampaignConfig.engine": "how variants are served; `kind` picks the engine's settings (below); a variant's "
                             "`engine` overrides keys of it",
    "CampaignConfig.mlflow": "where and how the run is logged to MLflow (not part of the config hash)",
    "CampaignConfig.seed": "seeds the item order of sequential gates, sampling and the bootstrap",
    "ModelSpec.path": "a checkpoint folder (with config.json); relative: to the campaign file",
    "VariantSpec.name": "the variant's name in the record, the reports and MLflow",
    "RecipeSpec.group_size": "columns per quantization group (weight-only and int schemes)",
    "RecipeSpec.symmetric": "symmetric integer weights (no zero point)",
    "RecipeSpec.calibration_samples": "calibration sequences (gptq, awq, int8)",
    "RecipeSpec.calibration_seq_len": "tokens per calibration sequence",
    "GateRule.mode": "noninferiority (the default), equivalence (TOST) or superiority",
    "GateRule.margin": "the drop accepted (delta = variant - baseline), in the metric's units, or a fraction of "
                       "the baseline's score with `relative`",
    "GateRule.alpha": "the one-sided error rate: the bound read is the (1 - alpha) confidence bound",
    "GateRule.planning_sd": "the assumed sd of a continuous metric's paired differences, for the planned MDE",
    "GateRule.action": "fail: the verdict and the exit code; warn: reported as WARN, never fails the run",
    "PerfRule.metric": "a performance figure of the variant, compared as a ratio to the baseline's",
    "PerfRule.min_ratio": "the variant's figure must be at least this times the baseline's",
    "PerfRule.max_ratio": "the variant's figure must be at most this times the baseline's",
    "GatePolicy.bootstrap_resamples": "resamples of the paired bootstrap interval",
    "GatePolicy.seed": "the bootstrap's seed",
    "PerfRule.action": "fail: the verdict and the exit code; warn: reported as WARN",
    "MlflowSpec.enabled": "log the record to MLflow (the record is written locally either way)",
    "ProbeSpec.enabled": "run the latency probe on every variant's server after its suites",
    "ProbeSpec.concurrency": "the concurrency levels of the sweep",
    "ProbeSpec.prompt_tokens": "random-token prompt length",
    "ProbeSpec.output_tokens": "tokens generated per request (ignore_eos)",
    "ProbeSpec.requests_per_step": "requests per concurrency level",
    "ProbeSpec.warmup_requests": "requests sent first and not counted",
    "ProbeSpec.max_seconds_per_step": "a step stops here",
    "ProbeSpec.stop_after_saturation": "stop the sweep once throughput flattens and p95 latency jumps",
    "GridEngineSpec.max_num_seqs": "vLLM's max_num_seqs values, one server start each",
    "GridEngineSpec.max_num_batched_tokens": "vLLM's max_num_batched_tokens values, one server start each",
    "GridSpec.concurrency": "client concurrency levels, one probe step (cell) each",
    "GridSpec.requests_per_cell": "requests per cell",
    "GridSpec.max_seconds_per_cell": "a cell stops here",
    "NoiseFloorSpec.enabled": "evaluate the baseline a second time (an A/A) to measure the engine's own noise",
    "EngineSpec.kind": "the engine kind: a built-in one or a plugin's (entry-point group qeval.engines)",
    "EngineSpec.request_timeout_s": "requests running this long with no token made mean a hung engine",
    "ServerSpec.startup_timeout_s": "an engine not healthy by then failed to start",
    "ServerSpec.max_model_len": "the engine's context length",
    "ServerSpec.device": "cpu or gpu",
    "ServerSpec.extra_args": "more command-line arguments for the server",
    "VllmSpec.enforce_eager": "no CUDA graphs / compilation (vLLM's --enforce-eager)",
    "VllmSpec.max_num_seqs": "vLLM's --max-num-seqs: sequences per batch",
    "TrtllmSpec.backend": "pytorch: serve a checkpoint; tensorrt: serve an engine built by quantizer trtllm",
    "TrtllmSpec.max_batch_size": "trtllm-serve's --max_batch_size",
    "TrtllmSpec.max_num_tokens": "trtllm-serve's --max_num_tokens",
    "SuiteRef.kind": "the suite kind: a built-in one or a plugin's (entry-point group qeval.suites)",
    "LmEvalSuiteRef.tasks": "lm-eval task names (its own, or YAML tasks under include_path)",
    "LmEvalSuiteRef.limit": "the first N docs of each task",
    "LmEvalSuiteRef.num_fewshot": "lm-eval's num_fewshot; None: the task's own",
    "LmEvalSuiteRef.fewshot_seed": "lm-eval's few-shot sampling seed",
    "LmEvalSuiteRef.apply_chat_template": "prompts through the model's chat template",
    "LmEvalSuiteRef.num_concurrent": "requests lm-eval keeps in flight, or `auto`: sized from the engine "
                                     "(see Latency and memory)",
    "LmEvalSuiteRef.batch_size": "lm-eval's batch size",
    "LogprobsSuiteRef.name": "the suite's name: its metrics are logprobs/NAME/...",
    "LogprobsSuiteRef.chunks": "text chunks sent",
    "LogprobsSuiteRef.chunk_chars": "characters per chunk",
    "RunRecord.schema_version": "the record's schema (see above)",
    "RunRecord.run_id": "this run's id (kept by a resume)",
    "RunRecord.campaign": "the campaign's name",
    "RunRecord.config_hash": "a hash of what decides the results: the campaign as written, its policy's content, "
                             "recipe files and calibration data by content; not where it runs or logs",
    "RunRecord.config": "the campaign as validated",
    "RunRecord.config_file": "the campaign file it was read from",
    "RunRecord.command": "the command line",
    "RunRecord.started_at": "ISO 8601, UTC",
    "RunRecord.finished_at": "ISO 8601, UTC; null while running or when cut",
    "RunRecord.environment": "the machine (CPU kind, GPUs), the tools' versions as installed, and qeval's own "
                             "version (`qeval`) and commit (`qeval_commit`)",
    "RunRecord.variants": "every variant evaluated, the baseline first",
    "RunRecord.comparisons": "one per (variant, suite, metric): the paired statistics against the baseline",
    "RunRecord.gates": "one per (variant, rule): the verdict with its bound, margin and MDE",
    "RunRecord.verdicts": "per variant",
    "RunRecord.verdict": "the campaign's: PASS only when every variant passed",
    "RunRecord.multiplicity": "the correction applied across the campaign's p-values",
    "RunRecord.inconclusive": "what an INCONCLUSIVE gate did to the exit code",
    "RunRecord.tracking": "where it was logged (MLflow run ids and URI)",
    "VariantResult.name": "the variant's name",
    "VariantResult.method": "its method (bf16, gptq, ...)",
    "VariantResult.key": "its content key: checkpoint, engine build and settings, dtype",
    "VariantResult.checkpoint": "the checkpoint folder served",
    "VariantResult.checkpoint_hash": "the checkpoint's content hash",
    "VariantResult.weights_bytes": "the checkpoint's bytes on disk",
    "VariantResult.recipe": "the recipe it was made with",
    "VariantResult.quantize_seconds": "time to make the checkpoint",
    "VariantResult.engine": "the engine kind that served it",
    "VariantResult.engine_version": "that engine's installed version",
    "VariantResult.startup_seconds": "the engine's last start, spawn to healthy",
    "VariantResult.engine_rss_bytes": "the engine's process-tree RSS",
    "VariantResult.kv_cache_tokens": "as the engine reports it",
    "VariantResult.eval_seconds": "the engine busy with suites (start and probe apart)",
    "VariantResult.concurrency": "per suite, the requests in flight it was evaluated with",
    "VariantResult.max_num_seqs": "sequences the engine schedules at once, as set or its default (what `auto` "
                                  "is bounded by)",
    "VariantResult.status": "ok, error, skipped, or partial (cut while being evaluated)",
    "VariantResult.error": "why it could not be evaluated",
    "VariantResult.suites": "one summary per suite: its key, n, primary metric and means",
    "ExecutorSpec.kind": "where the variants run: local (one after another here) or ray",
}


def _said(model: type, name: str) -> str:
    return next((SAID[k] for c in model.__mro__ if (k := f"{c.__name__}.{name}") in SAID), "")


class Table:
    def __init__(self, title: str, model: type[BaseModel], note: str = ""):
        self.title, self.model, self.note = title, model, note
        self.rows: list[tuple[str, str, str, str]] = []


def walk(model: type[BaseModel], prefix: str = "", title: str = "", note: str = "",
         seen: tuple[type, ...] = ()) -> Iterator[Table]:
    """Tables for `model` under key path `prefix`: its fields (nested models flattened into the same table), then
    one table per kind of each family field (a `kind` that picks the model)."""
    table = Table(title or (prefix or model.__name__), model, note or _docstring(model))
    later: list[Iterator[Table]] = []

    def add(m: type[BaseModel], path: str, stack: tuple[type, ...]) -> None:
        for name, field in m.model_fields.items():
            key = field.alias or name
            full = f"{path}.{key}" if path else key
            nested = [n for n in _models_in(field.annotation) if n not in stack]
            many = typing.get_origin(field.annotation) in (list, tuple) or any(
                typing.get_origin(a) in (list, tuple) for a in typing.get_args(field.annotation))
            desc = (_description(m, name) or _said(m, name)
                    or next((_docstring(n) for n in _models_in(field.annotation) if _docstring(n)), ""))
            table.rows.append((full, type_name(field.annotation), default_text(m, name), desc))
            for n in nested:
                sub = f"{full}[]" if many else full
                if _is_family(n):
                    for kind, km in _kinds(n):
                        later.append(walk(km, sub, f"{sub} (kind: {kind})", _docstring(km) or _docstring(n),
                                          (*stack, n, km)))
                else:
                    add(n, sub, (*stack, n))

    add(model, prefix, (*seen, model))
    yield table
    for tables in later:
        yield from tables


def render_tables(tables: list[Table], level: int = 2) -> str:
    out = []
    for t in tables:
        out.append(f"{'#' * level} `{t.title}`\n")
        if t.note:
            out.append(t.note + "\n")
        out.append("| key | type | default | description |\n| --- | --- | --- | --- |")
        for key, tp, default, desc in t.rows:
            out.append(f"| `{key}` | {_cell(tp)} | {_cell(default)} | {_cell(desc)} |")
        out.append("")
    return "\n".join(out)


def campaign_tables() -> list[Table]:
    from qeval.config import CampaignConfig

    return list(walk(CampaignConfig, title="campaign file (top level)",
                     note="Every key of a campaign file. Unknown keys are errors that name the file, the line and "
                          "the key, with a did-you-mean."))


def render_campaign() -> str:
    return render_tables(campaign_tables())


def record_tables() -> list[Table]:
    from qeval.record.run import RunRecord

    return list(walk(RunRecord, title="run.json (top level)", note="The run record, `runs/NAME/run.json`."))


def render_record() -> str:
    from qeval.record.run import SCHEMA_VERSION

    return f"The current `schema_version` is **{SCHEMA_VERSION}**.\n\n" + render_tables(record_tables())


# -- the CLI ----------------------------------------------------------------------------------------------------
# typer carries its own copy of click, so commands and parameters are told apart by what they have, not by class

def _is_group(cmd: Any) -> bool:
    return hasattr(cmd, "list_commands")


def _is_argument(p: Any) -> bool:
    return getattr(p, "param_type_name", "") == "argument"


def cli_commands(group: Any = None, prefix: str = "qeval") -> list[tuple[str, Any]]:
    """Every command and subcommand of the app, by its full name, in the app's order."""
    if group is None:
        import typer

        from qeval.cli import app

        group = typer.main.get_command(app)
    out = []
    ctx = group.context_class(group, info_name=prefix)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden:
            continue
        full = f"{prefix} {name}"
        out.append((full, cmd))
        if _is_group(cmd):
            out.extend(cli_commands(cmd, full))
    return out


def _param_default(p: Any) -> str:
    if p.required:
        return "required"
    d = p.default
    if callable(d) or d is None or d == () or d == []:
        return ""
    if getattr(p, "is_flag", False) and d is False:
        return ""
    return f"`{_plain(d)}`"


def _param_type(p: Any) -> str:
    if getattr(p, "is_flag", False):
        return "flag"
    descriptor = getattr(p, "type_descriptor", None)
    if descriptor is not None:
        return type_name(descriptor.annotation)
    t = p.type
    if hasattr(t, "choices"):
        return " | ".join(f"`{c}`" for c in t.choices)
    return str(getattr(t, "name", t)).lower()


def _arg_name(p: Any) -> str:
    return (getattr(p, "metavar", None) or p.name).upper()


def render_cli() -> str:
    out = []
    for full, cmd in cli_commands():
        out.append(f"## `{full}`\n")
        args = " ".join(_arg_name(p) if p.required else f"[{_arg_name(p)}]"
                        for p in cmd.params if _is_argument(p))
        options = " [OPTIONS]" if any(not _is_argument(p) for p in cmd.params) else ""
        sub = " COMMAND" if _is_group(cmd) else ""
        out.append(f"```\n{full}{options}{' ' + args if args else ''}{sub}\n```\n")
        if cmd.help:
            out.append(inspect.cleandoc(cmd.help).split("\f")[0].strip() + "\n")
        params = [p for p in cmd.params if p.name != "help"]
        if params:
            out.append("| argument / option | type | default | help |\n| --- | --- | --- | --- |")
            for p in params:
                if _is_argument(p):
                    name = f"`{_arg_name(p)}`"
                else:
                    name = ", ".join(f"`{f}`" for f in [*p.opts, *p.secondary_opts])
                help_text = getattr(p, "help", None) or ""
                out.append(f"| {name} | {_cell(_param_type(p))} | {_cell(_param_default(p))} | {_cell(help_text)} |")
            out.append("")
        if _is_group(cmd):
            names = cmd.list_commands(cmd.context_class(cmd, info_name=full))
            out.append("Subcommands: " + ", ".join(f"`{full} {n}`" for n in names) + ".\n")
    return "\n".join(out)


# -- the hook ---------------------------------------------------------------------------------------------------

RENDER = {"cli": render_cli, "campaign": render_campaign, "record": render_record}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    for name, marker in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, RENDER[name]())
    return markdown
