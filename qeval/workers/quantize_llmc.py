"""Quantize a checkpoint with llm-compressor (runs in the llm-compressor venv, never imports qeval).

Usage: python quantize_llmc.py SPEC.json
SPEC: {"base": dir, "out": dir, "method": gptq|awq|rtn|int8|fp8, "group_size": int, "symmetric": bool,
       "calibration": [text, ...], "samples": int, "seq_len": int, "awq_n_grid": int, "dtype": bfloat16|float32|...,
       and where set: "bits": 2|3|4|8 (gptq, awq, rtn), "ignore": [module, ...], "actorder": static|weight|none}
Writes OUT (compressed-tensors) and OUT/qeval-quantize.json with what was done and how long it took.
"""

import json
import sys
import time
from pathlib import Path

import torch


def _no_pin_without_accelerator() -> None:
    # llm-compressor 0.14's AWQ pins cached activations unconditionally; pinning needs an accelerator
    # and raises on a CPU-only host. Pinning only speeds host->device copies, so skipping it is exact.
    if torch.accelerator.is_available():
        return
    from llmcompressor.pipelines.cache import IntermediatesCache

    IntermediatesCache.pin_memory = lambda self, batch_index, input_names=None: None


def _weight_scheme(bits: int, group_size: int, symmetric: bool):
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    weights = QuantizationArgs(num_bits=bits, type="int", symmetric=symmetric, strategy="group", group_size=group_size)
    return {"group_0": QuantizationScheme(targets=["Linear"], weights=weights)}


DATA_FREE = {"fp8", "rtn"}  # FP8 dynamic and round-to-nearest need no calibration data


def recipe_for(spec: dict):
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier

    method, ignore, bits = spec["method"], spec.get("ignore", ["lm_head"]), spec.get("bits", 4)
    if method == "gptq":
        order = {"actorder": None if spec["actorder"] == "none" else spec["actorder"]} if "actorder" in spec else {}
        return [GPTQModifier(config_groups=_weight_scheme(bits, spec["group_size"], spec["symmetric"]), ignore=ignore,
                             **order)]
    if method == "rtn":  # W<bits>A16 by round-to-nearest: no calibration data
        return [QuantizationModifier(config_groups=_weight_scheme(bits, spec["group_size"], spec["symmetric"]),
                                     ignore=ignore)]
    if method == "awq":
        from llmcompressor.modifiers.transform.awq import AWQModifier

        return [AWQModifier(n_grid=spec["awq_n_grid"]),
                QuantizationModifier(config_groups=_weight_scheme(bits, spec["group_size"], spec["symmetric"]),
                                     ignore=ignore)]
    if method == "int8":
        from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier

        return [SmoothQuantModifier(smoothing_strength=0.8), GPTQModifier(scheme="W8A8", targets=["Linear"], ignore=ignore)]
    if method == "fp8":
        return [QuantizationModifier(scheme="FP8_DYNAMIC", targets=["Linear"], ignore=ignore)]
    raise SystemExit(f"unknown method {method!r}")


def calibration_set(tokenizer, texts: list[str], samples: int, seq_len: int):
    from datasets import Dataset

    ids = tokenizer("\n\n".join(texts), add_special_tokens=False)["input_ids"]
    chunks = [ids[i:i + seq_len] for i in range(0, len(ids) - seq_len + 1, seq_len)][:samples]
    if not chunks:
        raise SystemExit("calibration text is shorter than one sequence")
    return Dataset.from_dict({"input_ids": chunks, "attention_mask": [[1] * len(c) for c in chunks]})


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    trust = spec.get("trust_remote_code", False)  # the campaign's model entry opted in
    torch.manual_seed(0)
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _no_pin_without_accelerator()
    t0 = time.time()
    data_free = spec["method"] in DATA_FREE
    # data-free schemes touch each weight once: on a GPU do it there (an 8B model on the CPU takes minutes);
    # calibrated ones load on the CPU and llm-compressor's sequential pipeline moves one layer at a time
    device_map = "cuda" if data_free and torch.cuda.is_available() else None
    dtype = getattr(torch, spec.get("dtype", "bfloat16"))  # float32 on a CPU without native bf16 (~60x faster there)
    model = AutoModelForCausalLM.from_pretrained(spec["base"], trust_remote_code=trust, dtype=dtype,
                                                 device_map=device_map)
    tok = AutoTokenizer.from_pretrained(spec["base"], trust_remote_code=trust)
    kwargs = {}
    if not data_free:
        ds = calibration_set(tok, spec["calibration"], spec["samples"], spec["seq_len"])
        kwargs = dict(dataset=ds, num_calibration_samples=len(ds), max_seq_length=spec["seq_len"])
    oneshot(model=model, recipe=recipe_for(spec), **kwargs)
    out = Path(spec["out"])
    model.save_pretrained(out, save_compressed=True)
    tok.save_pretrained(out)
    meta = {k: v for k, v in spec.items() if k not in ("calibration",)}
    meta.update(seconds=round(time.time() - t0, 1), calibration_sequences=kwargs and len(kwargs["dataset"]))
    (out / "qeval-quantize.json").write_text(json.dumps(meta, indent=1))
    print(json.dumps(meta))


if __name__ == "__main__":
    main(sys.argv[1])
