"""What a variant changes against the baseline: its weights, its KV cache, how it is served.

A variant is a checkpoint plus how it is served. Which of the three it changes decides which performance rules
can judge it (verdict/policy.py PerfRule.applies_to: the weights' size says nothing of an FP8 KV cache over the
same weights), and the report and the plan say it ("differs in: kv_cache_dtype auto -> fp8"). Pure: the
checkpoints' own configs come in already read (quantize/describe.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import EngineSpec, VariantSpec
from ..record.run import CHANGES, Change, changes_text

# served from the base checkpoint in the campaign's dtype, unchanged: the same weights whichever is named
_BASE_WEIGHTS = ("bf16", "fp16")
# engine settings that are not how a variant is served but what it is: the campaign's dtype (one for every
# variant), vLLM's --quantization (fp8-online quantizes the weights as they load: a change of weights, said by
# its method), and the KV cache's type (a change of its own)
_NOT_SERVING = frozenset({"dtype", "quantization"})
KV_SETTINGS = frozenset({"kv_cache_dtype"})


@dataclass(frozen=True)
class Served:
    """A variant as `changes` reads it: what the campaign says of it, its effective engine settings, and what
    its checkpoint's config declares (describe's dict; {} where none was read)."""

    variant: VariantSpec
    engine: EngineSpec
    scheme: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Changes:
    """What a variant changes against the baseline, in CHANGES' order, and each engine setting that differs."""

    changes: tuple[Change, ...] = ()
    serving_diff: tuple[str, ...] = ()  # "kv_cache_dtype auto -> fp8", "tensor_parallel_size 1 -> 2"

    def text(self) -> str:
        """"differs in: weights; kv_cache_dtype auto -> fp8", or that it differs in nothing qeval sees."""
        return changes_text(self.changes, self.serving_diff)


def _weights(v: VariantSpec) -> Any:
    """What decides a variant's weights: the base model's as they are, or the method, its maker, recipe and
    checkpoint."""
    if v.method in _BASE_WEIGHTS and v.checkpoint is None:
        return "base"
    if v.method == "external":
        return ("external", v.endpoint, v.served_model)
    return (v.method, v.quantizer, str(v.checkpoint) if v.checkpoint is not None else None,
            v.recipe.model_dump(mode="json") if v.method not in _BASE_WEIGHTS else None)


def _kv_scheme(scheme: Mapping[str, str]) -> dict[str, str]:
    """The KV cache's scheme a checkpoint declares (describe's kv_cache_* keys)."""
    return {k: v for k, v in scheme.items() if k.startswith("kv_cache_")}


def _shown(x: Any) -> str:
    return "unset" if x is None else str(x)


def serving_diff(variant: EngineSpec, baseline: EngineSpec) -> tuple[str, ...]:
    """Each engine setting that sets the variant's serving apart, as "name baseline -> variant": the settings
    that enter a variant's key (a Spec's NEUTRAL ones change no output), the weights' and the dtype aside."""
    neutral = type(variant).NEUTRAL | type(baseline).NEUTRAL | _NOT_SERVING
    a, b = baseline.model_dump(mode="json"), variant.model_dump(mode="json")
    keys = [k for k in dict.fromkeys([*a, *b]) if k not in neutral]
    return tuple(f"{k} {_shown(a.get(k))} -> {_shown(b.get(k))}" for k in keys if a.get(k) != b.get(k))


def changes(variant: Served, baseline: Served) -> Changes:
    """The subset of {weights, kv_cache, serving} the variant changes against the baseline: weights where its
    method, recipe or checkpoint differ; kv_cache where the KV cache's type differs or its checkpoint declares a
    kv_cache_scheme the baseline's does not (vLLM then serves an FP8 KV cache though kv_cache_dtype is auto);
    serving where another setting in its key differs (serving_diff lists them all)."""
    diff = serving_diff(variant.engine, baseline.engine)
    names = {d.split(" ", 1)[0] for d in diff}
    found: set[str] = set()
    if _weights(variant.variant) != _weights(baseline.variant):
        found.add("weights")
    if names & KV_SETTINGS or _kv_scheme(variant.scheme) != _kv_scheme(baseline.scheme):
        found.add("kv_cache")
    if names - KV_SETTINGS:
        found.add("serving")
    return Changes(changes=tuple(c for c in CHANGES if c in found), serving_diff=diff)
