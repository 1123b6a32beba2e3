"""`qeval setup`: the tool envs of one device and the embedded assets, then tools.json naming the envs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..machine import tool_envs
from ..errors import ConfigError
from ..progress import Reporter
from .assets import MODEL, MODELS, AssetBuilder
from .build import EnvBuilder, Source
from .envs import PYTHON_OF, envs_for


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
          models: list[str] | None = None, base_python: str = sys.executable) -> SetupResult:
    """`models`: embedded models beyond the default one (gemma-3-270m), made even with assets off."""
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
    entries = {}
    for env in envs:
        result.envs[env.name] = builder.build(env, by_tool)
        entries[env.tool] = tool_envs.ToolEntry(env.name, str(builder.python_of(env, by_tool)),
                                            str(builder.folder(env)) if env.overlay_of else None)
    result.tools_json = tool_envs.write(cache, device, entries)
    made = AssetBuilder(cache, reporter, source)
    llmc_python = builder.python_of(by_tool["llmc"], by_tool)
    if assets:
        result.assets = [made.model(llmc_python), made.data()]
    result.assets += [made.model(llmc_python, m) for m in models or () if m != MODEL]
    reporter.log(f"tools: {result.tools_json}")
    return result


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
