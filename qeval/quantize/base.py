"""The quantizer contract: base checkpoint + recipe -> a cached, content-addressed checkpoint folder."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from ..registry import Registry

if TYPE_CHECKING:
    from ..config import VariantSpec


class Quantizer(Protocol):
    name: str

    def cache_key(self, base: Path, variant: "VariantSpec") -> str: ...

    def quantize(self, base: Path, variant: "VariantSpec", out: Path, log: Path,
                 progress: Callable[[str], None] | None = None) -> Path: ...


QUANTIZERS = Registry("quantizer", entry_point_group="qeval.quantizers")

# which quantizer makes which method by default
DEFAULT_QUANTIZER = {m: "llmcompressor" for m in ("gptq", "awq", "rtn", "int8", "fp8")}


def quantizer_for(method: str, name: str | None = None, **kwargs) -> Quantizer:
    return QUANTIZERS.get(name or DEFAULT_QUANTIZER[method])(**kwargs)
