"""What a quantized checkpoint says it is: format, scheme, bits, group size, read from its own config.json.

A checkpoint a team brings (AutoAWQ, GPTQModel / AutoGPTQ's GPTQ v1, llm-compressor's compressed-tensors,
ModelOpt, FP8) is then described in the record, the report and MLflow as well as one qeval made. Pure but for
`describe_checkpoint`, which reads the file. Formats are read as their tools write them (transformers'
`quantization_config`); an unknown one is named, not guessed at.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _s(x: Any) -> str:
    return str(x).lower() if isinstance(x, bool) else str(x)


def _scheme(w: Any, a: Any) -> str:
    return f"W{w}A{a}" if w not in (None, "") else ""


def _kv_cache(q: Mapping[str, Any]) -> dict[str, str]:
    """The KV cache's scheme a compressed-tensors checkpoint declares (vLLM then serves an FP8 KV cache with its
    scales); {} where it declares none."""
    kv = q.get("kv_cache_scheme")
    if not isinstance(kv, Mapping):
        return {}
    out = {"kv_cache_bits": _s(kv.get("num_bits", "")), "kv_cache_type": _s(kv.get("type", "")),
           "kv_cache_strategy": _s(kv.get("strategy", ""))}
    return {k: v for k, v in out.items() if v not in ("", "None")}


def _compressed_tensors(q: Mapping[str, Any]) -> dict[str, str]:
    groups = [g for g in (q.get("config_groups") or {}).values() if isinstance(g, Mapping)]
    if not groups:  # a KV-cache-only checkpoint: its weights are the model's
        return {"format": "compressed-tensors", **_kv_cache(q)}
    g = groups[0]  # llm-compressor's presets have one group; more are listed by their count
    w, a = g.get("weights") or {}, g.get("input_activations") or {}
    out = {"format": "compressed-tensors", "weight_bits": _s(w.get("num_bits", "")),
           "weight_type": _s(w.get("type", "")), "strategy": _s(w.get("strategy", "")),
           "symmetric": _s(w.get("symmetric", "")), "activation_bits": _s(a.get("num_bits", 16)),
           "activation_dynamic": _s(a.get("dynamic", "")) if a else ""}
    if w.get("group_size"):
        out["group_size"] = _s(w["group_size"])
    if w.get("actorder"):
        out["actorder"] = _s(w["actorder"])
    if len(groups) > 1:
        out["config_groups"] = str(len(groups))
    if q.get("ignore"):
        out["ignore"] = ",".join(map(str, q["ignore"]))
    out |= _kv_cache(q)
    out["scheme"] = _scheme(out["weight_bits"], out["activation_bits"])
    return {k: v for k, v in out.items() if v != ""}


def describe(config: Mapping[str, Any]) -> dict[str, str]:
    """The scheme a model config's `quantization_config` declares; {} for a full-precision checkpoint."""
    q = config.get("quantization_config")
    if not isinstance(q, Mapping):
        return {}
    method = str(q.get("quant_method", "")).lower()
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    if method == "gptq":  # AutoGPTQ / GPTQModel (v1 format); desc_act is GPTQ's activation order
        out = {"format": "gptq", "weight_bits": _s(q.get("bits", "")), "group_size": _s(q.get("group_size", "")),
               "symmetric": _s(q.get("sym", "")), "actorder": _s(q.get("desc_act", "")),
               "checkpoint_format": _s(q.get("checkpoint_format", ""))}
    elif method == "awq":  # AutoAWQ: zero_point means asymmetric
        zp = q.get("zero_point")
        out = {"format": "awq", "weight_bits": _s(q.get("bits", q.get("w_bit", ""))),
               "group_size": _s(q.get("group_size", q.get("q_group_size", ""))),
               "symmetric": "" if zp is None else _s(not zp), "version": _s(q.get("version", ""))}
    elif method == "fp8":
        out = {"format": "fp8", "weight_bits": "8", "weight_type": "float",
               "activation_scheme": _s(q.get("activation_scheme", ""))}
    elif method == "modelopt":
        algo = str(q.get("quant_algo", "") or (q.get("quantization") or {}).get("quant_algo", ""))
        out = {"format": "modelopt", "quant_algo": algo, "weight_bits": "8" if "FP8" in algo.upper() else ""}
    else:
        return {"format": method or "unknown", "note": "a quantization_config qeval does not read"}
    out["scheme"] = _scheme(out.get("weight_bits"), 8 if method == "fp8" and q.get("activation_scheme") else 16)
    return {k: v for k, v in out.items() if v not in ("", "None")}


def describe_checkpoint(path: Path | None) -> dict[str, str]:
    """`describe` of a checkpoint folder's config.json ({} where there is none to read)."""
    cfg = path / "config.json" if path is not None else None
    if cfg is None or not cfg.is_file():
        return {}
    try:
        return describe(json.loads(cfg.read_text()))
    except (OSError, ValueError):
        return {}
