"""What sets two variants of one method apart, in words: a reviewer who sees one GPTQ pass and another fail
should read that they differ only in their calibration data (and which), not diff two recipe dicts."""

from __future__ import annotations

import itertools
from typing import Any

from ..record.run import VariantResult

# the record's recipe keys a reader knows by another name
NAMES = {"samples": "calibration samples", "seq_len": "calibration sequence length", "awq_n_grid": "AWQ grid",
         "calibration_data": "calibration data", "recipe_file": "recipe file", "dtype": "the quantizer's dtype"}


def _calibration(value: Any) -> str:
    if not isinstance(value, dict):
        return "CPython's pydoc text (the default)"
    name = value.get("file") or "a set"
    extra = [f"field {value['field']}"] + [f"{k} {value[k]}" for k in ("split", "samples", "seq_len") if value.get(k)]
    return f"{name} (sha256 {str(value.get('sha256', ''))[:12]}, {', '.join(extra)})"


def _shown(key: str, value: Any) -> str:
    if key == "calibration_data":
        return _calibration(value)
    if key == "recipe_file":
        return value.get("name", "a file") if isinstance(value, dict) else "none"
    return "-" if value is None else str(value)


def _facts(v: VariantResult) -> dict[str, Any]:
    """What decides a variant's outputs beside its base model: its recipe, and how it is served."""
    return {**v.recipe, "KV cache": v.kv_cache_dtype or "the model's dtype", "served dtype": v.dtype}


def differences(variants: list[VariantResult]) -> list[str]:
    """One sentence per pair of variants of one method whose recipes differ; the pairs in campaign order."""
    out = []
    made = [v for v in variants if v.role == "variant" and v.recipe]
    for a, b in itertools.combinations(made, 2):
        if a.recipe.get("method") != b.recipe.get("method"):
            continue
        fa, fb = _facts(a), _facts(b)
        keys = [k for k in dict.fromkeys([*fa, *fb]) if fa.get(k) != fb.get(k)]
        if not keys:
            out.append(f"{a.name} and {b.name} ({a.recipe['method']}) have the same recipe and are served alike")
            continue
        said = [f"{NAMES.get(k, k)}: {_shown(k, fa.get(k))} against {_shown(k, fb.get(k))}" for k in keys]
        only = "only in " if len(keys) == 1 else "in "
        out.append(f"{a.name} and {b.name} ({a.recipe['method']}) differ {only}" + "; ".join(said))
    return out
