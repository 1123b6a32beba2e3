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
DEFAULT_QUANTIZER = {"gptq": "llmcompressor", "awq": "llmcompressor", "int8": "llmcompressor", "fp8": "llmcompressor"}


def quantizer_for(method: str, **kwargs) -> Quantizer:
    return QUANTIZERS.get(DEFAULT_QUANTIZER[method])(**kwargs)
