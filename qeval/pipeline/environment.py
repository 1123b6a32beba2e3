"""What the record says of the machine and the software a run used: versions as installed, not as pinned."""

from __future__ import annotations

import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version

from ..machine.provenance import provenance
from ..settings import Settings


def _ver(pkg: str) -> str:
    try:
        return version(pkg)
    except PackageNotFoundError:
        return ""


def environment(settings: Settings) -> dict[str, str]:
    made_by = provenance()  # installed or run from a source tree: never empty
    return {"python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine(),
            "cpus": str(os.cpu_count()), "qeval": made_by.version, "qeval_commit": made_by.commit,
            "mlflow": _ver("mlflow"), "numpy": _ver("numpy"), "scipy": _ver("scipy"), "vllm_env": settings.vllm.name,
            "llmcompressor_env": settings.llmc.name,
            "lm_eval": settings.vllm.version_of("lm_eval"), "hostname": platform.node(),
            "cpu": settings.cpu.kind()}
