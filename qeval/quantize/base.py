"""The quantizer contract: base checkpoint + recipe -> a cached, content-addressed checkpoint folder."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar, Protocol

from ..registry import Registry
from ..methods import PRESETS
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

# what each method means for the numbers: scheme, weight bits, activation bits (params in MLflow, columns in reports)
SCHEMES = {"bf16": ("BF16", 16, 16), "fp16": ("FP16", 16, 16), "gptq": ("W4A16", 4, 16), "awq": ("W4A16", 4, 16),
           "rtn": ("W4A16", 4, 16), "int8": ("W8A8-INT8", 8, 8), "fp8": ("W8A8-FP8", 8, 8),
           "fp8-online": ("W8A8-FP8", 8, 8)}


_DTYPE_BITS = {"bfloat16": ("BF16", 16), "float16": ("FP16", 16), "float32": ("FP32", 32)}


def scheme_params(method: str, recipe: dict, dtype: str | None = None) -> dict[str, str]:
    """scheme / weight_bits / activation_bits / group_size, where the method says (not for checkpoints given as is).
    `dtype`: what it was served in: a full-precision baseline is that dtype, 16-bit activations are its width."""
    if method not in SCHEMES:
        return {}
    scheme, w, a = SCHEMES[method]
    if recipe.get("scheme") in PRESETS:  # a preset by name says its own bits
        scheme, (w, a, _) = recipe["scheme"], PRESETS[recipe["scheme"]]
    elif scheme == "W4A16" and recipe.get("bits", 4) != 4:  # the recipe's weight bits (gptq / awq / rtn)
        scheme, w = f"W{recipe['bits']}A16", int(recipe["bits"])
    if dtype in _DTYPE_BITS:
        name, bits = _DTYPE_BITS[dtype]
        scheme, w, a = (name, bits, bits) if method in ("bf16", "fp16") else (scheme, w, bits if a == 16 else a)
    out = {"scheme": scheme, "weight_bits": str(w), "activation_bits": str(a)}
    if recipe.get("simulate"):  # its weights on that grid, stored and served dequantized
        out["simulated"] = "true"
    if scheme.endswith("A16") and scheme.startswith("W") and recipe.get("group_size") and "scheme" not in recipe:
        out["group_size"] = str(recipe["group_size"])
    return out


# which quantizer makes which method by default
DEFAULT_QUANTIZER = {m: "llmcompressor" for m in ("gptq", "awq", "rtn", "int8", "fp8")}


def quantizer_for(method: str, name: str | None = None, **kwargs) -> Quantizer:
    return QUANTIZERS.get(name or DEFAULT_QUANTIZER[method])(**kwargs)
