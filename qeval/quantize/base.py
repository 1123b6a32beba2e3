"""The quantizer contract: base checkpoint + recipe -> a cached, content-addressed checkpoint folder."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar, Protocol

from ..registry import Registry
from .spec import RecipeSpec

if TYPE_CHECKING:
    from ..engines.spec import EngineSpec
    from ..settings import Runtime, Settings


class QuantizeTarget(Protocol):
    """What a quantizer reads of the variant it makes (a campaign's VariantSpec is one)."""

    name: str
    method: str
    recipe: RecipeSpec


class Quantizer(Protocol):
    """What the pipeline, `qeval doctor` and the campaign file's checks call on a quantizer. `quantizer_for`
    constructs it; QuantizerBase gives every member a plugin may leave out its default: a quantizer class
    subclasses it."""

    name: ClassVar[str]
    # the methods it makes (a variant naming it with another method is refused); empty: not declared, any
    methods: ClassVar[frozenset[str]]
    install_hint: ClassVar[str]  # how to build its runtime, where it is missing
    needs_gpu: ClassVar[bool]  # it makes its output for (and on) the machine's NVIDIA GPU
    test_double: ClassVar[bool]  # a stand-in for tests: `qeval doctor` lists it apart

    def __init__(self, runtime: "Runtime", engine: "EngineSpec | None" = None, dtype: str = "bfloat16") -> None: ...

    @staticmethod
    def runtime_of(settings: "Settings") -> "Runtime":
        """The installed tool it runs in, picked from the machine's settings (a plugin names its own)."""
        ...

    def spec(self, base: Path, variant: QuantizeTarget) -> dict:
        """What decides its output for this variant, as recorded in the variant's facts (`recipe`)."""
        ...

    def cache_key(self, base: Path, variant: QuantizeTarget) -> str:
        """The key its checkpoint is cached under: whatever decides the output, through qeval.hashing.key_hash."""
        ...

    def quantize(self, base: Path, variant: QuantizeTarget, out: Path, log: Path,
                 progress: Callable[[str], None] | None = None) -> Path: ...


class QuantizerBase:
    """The defaults of what a quantizer may leave out; every quantizer class subclasses it (the registry refuses
    a plugin's that does not), so its callers ask any quantizer directly."""

    name: ClassVar[str]
    methods: ClassVar[frozenset[str]] = frozenset()
    install_hint: ClassVar[str] = "qeval setup"
    needs_gpu: ClassVar[bool] = False
    test_double: ClassVar[bool] = False


QUANTIZERS = Registry("quantizer", entry_point_group="qeval.quantizers", base="qeval.quantize.base:QuantizerBase")

# which quantizer makes which method by default
DEFAULT_QUANTIZER = {m: "llmcompressor" for m in ("gptq", "awq", "rtn", "int8", "fp8")}


def quantizer_for(method: str, name: str | None = None, **kwargs) -> Quantizer:
    return QUANTIZERS.get(name or DEFAULT_QUANTIZER[method])(**kwargs)
