"""`qeval setup`: the tool envs of one device and the embedded assets, then tools.json naming the envs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from ..machine import tool_envs
from ..errors import ConfigError
from ..progress import Reporter
from .assets import MODEL, MODELS, AssetBuilder
from .build import EnvBuilder, Source
from .envs import PYTHON_OF, envs_for
from .steps import Step, run_steps


def detect_device() -> str:
    """cuda where `nvidia-smi` lists a GPU, else cpu."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "cpu"
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "cpu"
    return "cuda" if out.returncode == 0 and "GPU" in out.stdout else "cpu"


@dataclass
class SetupResult:
    device: str
    envs: dict[str, str] = field(default_factory=dict)  # env name -> "current" | "adopted" | "built"
    assets: list[Path] = field(default_factory=list)
    tools_json: Path | None = None


def setup(cache: Path, reporter: Reporter, *, device: str = "auto", wheelhouse: Path | None = None,
          system_site_packages: bool = False, assets: bool = True, only: list[str] | None = None,
          models: list[str] | None = None, base_python: str = sys.executable, jobs: int | None = None) -> SetupResult:
    """`models`: embedded models beyond the default one (gemma-3-270m), made even with assets off. `jobs`: steps
    at once (None: `setup_workers()`)."""
    device = detect_device() if device == "auto" else device
    unknown = sorted(set(models or ()) - set(MODELS))
    if unknown:
        raise ConfigError(f"unknown embedded model {unknown[0]!r}: one of {', '.join(MODELS)}", where="--model")
    envs = envs_for(device, only)
    _check_python(device, base_python)
    source = Source(wheelhouse.resolve() if wheelhouse else None)
    reporter.log(f"qeval setup: device {device}, cache {cache}" + (f", offline from {source.wheelhouse}"
                                                                   if source.wheelhouse else ""))
    builder = EnvBuilder(cache, reporter, source, system_site_packages, base_python)
    by_tool = {e.tool: e for e in envs_for(device)}
    result = SetupResult(device)
    made = AssetBuilder(cache, reporter, source)
    llmc_python = builder.python_of(by_tool["llmc"], by_tool)
    building = {e.tool for e in envs}
    steps = [Step(f"env:{e.name}", partial(builder.build, e, by_tool),
                  (f"env:{by_tool[e.overlay_of].name}",) if e.overlay_of in building else ()) for e in envs]
    llmc_step = ("env:" + by_tool["llmc"].name,) if "llmc" in building else ()  # the converter's env
    extras = [m for m in models or () if m != MODEL]
    steps += [Step(f"model:{m}", partial(made.model, llmc_python, m), llmc_step)
              for m in ([MODEL] if assets else []) + extras]
    if assets:
        steps.append(Step("data", made.data))
    done = run_steps(steps, workers=jobs or setup_workers())
    result.envs = {e.name: done[f"env:{e.name}"] for e in envs}
    entries = {e.tool: tool_envs.ToolEntry(e.name, str(builder.python_of(e, by_tool)),
                                           str(builder.folder(e)) if e.overlay_of else None) for e in envs}
    result.tools_json = tool_envs.write(cache, device, entries)
    result.assets = ([done[f"model:{MODEL}"], done["data"]] if assets else []) + [done[f"model:{m}"] for m in extras]
    reporter.log(f"tools: {result.tools_json}")
    return result


def setup_workers() -> int:
    """Steps at once: one per two cores, at least one, at most four (the envs and assets of one device)."""
    return max(1, min(4, (os.cpu_count() or 1) // 2))


def _check_python(device: str, base_python: str) -> None:
    """The envs are made from `base_python`: a device whose locks name one Python refuses another up front,
    before pip fails half-way on a wheel of the wrong ABI."""
    want = PYTHON_OF.get(device)
    if want is None:
        return
    out = subprocess.run([base_python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True)
    have = out.stdout.strip()
    if have != want:
        raise ConfigError(f"the {device} tool envs are locked for Python {want}; qeval runs on Python {have or '?'} "
                          f"({base_python}): install qeval into a Python {want} and run `qeval setup` from there",
                          where="--device")
