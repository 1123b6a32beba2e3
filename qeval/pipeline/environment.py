"""What the record says of the machine and the software a run used: versions as installed, not as pinned."""

from __future__ import annotations

import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ..settings import Runtime, Settings


def _ver(pkg: str) -> str:
    try:
        return version(pkg)
    except PackageNotFoundError:
        return ""


def installed_version(runtime: Runtime, dist: str) -> str:
    """A package's version in another interpreter's environment, read from its dist-info folder (starting
    that interpreter to ask would cost seconds); "" where it is not found."""
    roots = [Path(p) for p in (runtime.pythonpath or "").split(os.pathsep) if p]
    venv = runtime.python.parent.parent
    roots += sorted(venv.glob("lib/python*/site-packages"))
    norm = dist.replace("-", "_").lower()
    for root in roots:
        for info in root.glob("*.dist-info"):
            name, _, ver = info.name[:-len(".dist-info")].partition("-")
            if name.replace("-", "_").lower() == norm:
                return ver
    return ""


def environment(settings: Settings) -> dict[str, str]:
    return {"python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine(),
            "cpus": str(os.cpu_count()), "qeval": _ver("qeval"), "mlflow": _ver("mlflow"), "numpy": _ver("numpy"),
            "scipy": _ver("scipy"), "vllm_env": settings.vllm.name, "llmcompressor_env": settings.llmc.name,
            "lm_eval": installed_version(settings.vllm, "lm_eval"), "hostname": platform.node(),
            "cpu": settings.cpu.kind()}
