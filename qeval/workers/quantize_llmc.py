"""Quantize a checkpoint with llm-compressor (runs in the llm-compressor venv, never imports qeval).

Usage: python quantize_llmc.py SPEC.json
SPEC: {"base": dir, "out": dir, "method": gptq|awq|rtn|int8|fp8, "group_size": int, "symmetric": bool,
       "calibration": [text, ...], "samples": int, "seq_len": int, "awq_n_grid": int, "dtype": bfloat16|float32|...,
       and where set: "bits": 2|3|4|8 (gptq, awq, rtn), "ignore": [module, ...], "actorder": static|weight|none,
       "calibration_path": a JSONL / JSON / Parquet file or a `save_to_disk` folder, read instead of "calibration"
       with "calibration_data": {field: text|messages, samples, seq_len, chat_template, seed, split, sha256},
       "recipe_path": a team's llm-compressor recipe file, applied instead of recipe_for(spec),
       "scheme": a compressed-tensors preset (W8A16, W4A16_ASYM, ...) for gptq / awq / rtn,
       "simulate": true: write the quantized weights dequantized, as a plain checkpoint of the base's dtype}
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


# llm-compressor 0.14 smooths these with its Llama mappings (post_attention_layernorm -> gate/up). Their blocks
# norm the attention's output before the residual add and feed the MLP from pre_feedforward_layernorm, so that
# smoothing is no identity: SmoothQuant alone moved Gemma-3-270M's next tokens by KL 22.5 (top-1 disagreement
# 1.000), these mappings by 2e-9 (benchmarks/smoothquant_mappings.py)
PRE_FEEDFORWARD_NORM = {"Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"}
PRE_FEEDFORWARD_MAPPINGS = [[["re:.*q_proj", "re:.*k_proj", "re:.*v_proj"], "re:.*input_layernorm"],
                            [["re:.*gate_proj", "re:.*up_proj"], "re:.*pre_feedforward_layernorm"]]


def smoothquant_mappings(base: str):
    """SmoothQuant's layer mappings for the base model: ours where llm-compressor's are wrong, else None (its own)."""
    config = json.loads((Path(base) / "config.json").read_text())
    return PRE_FEEDFORWARD_MAPPINGS if set(config.get("architectures") or ()) & PRE_FEEDFORWARD_NORM else None


def recipe_for(spec: dict):
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier

    method, ignore, bits = spec["method"], spec.get("ignore", ["lm_head"]), spec.get("bits", 4)
    if "scheme" in spec:  # a compressed-tensors preset by name: it says bits, group and activations itself
        preset = dict(scheme=spec["scheme"], targets=["Linear"], ignore=ignore)
        if method == "gptq":
            order = {"actorder": None if spec["actorder"] == "none" else spec["actorder"]} if "actorder" in spec else {}
            return [GPTQModifier(**preset, **order)]
        if method == "awq":
            from llmcompressor.modifiers.transform.awq import AWQModifier

            return [AWQModifier(n_grid=spec["awq_n_grid"]), QuantizationModifier(**preset)]
        return [QuantizationModifier(**preset)]
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

        smooth = SmoothQuantModifier(smoothing_strength=0.8, mappings=smoothquant_mappings(spec["base"]))
        return [smooth, GPTQModifier(scheme="W8A8", targets=["Linear"], ignore=ignore)]
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


def load_examples(path: str, split):
    """The user's calibration set through HF datasets: a file by its suffix, else a saved dataset folder."""
    from datasets import DatasetDict, load_dataset, load_from_disk

    p = Path(path)
    kinds = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
    if p.is_file():
        if p.suffix not in kinds:
            raise SystemExit(f"calibration data {p}: a .jsonl, .json or .parquet file, or a save_to_disk folder")
        return load_dataset(kinds[p.suffix], data_files=str(p), split="train")
    ds = load_from_disk(str(p))
    if isinstance(ds, DatasetDict):
        name = split or ("train" if "train" in ds else next(iter(ds)) if len(ds) == 1 else None)
        if name not in ds:
            raise SystemExit(f"calibration data {p}: splits {sorted(ds)}; say which (recipe.calibration.split)")
        ds = ds[name]
    return ds


def calibration_from_data(tokenizer, spec: dict):
    """One sequence per example (cut at seq_len), the first `samples` after a seeded shuffle."""
    from datasets import Dataset

    cal = spec["calibration_data"]
    samples, seq_len = cal.get("samples") or spec["samples"], cal.get("seq_len") or spec["seq_len"]
    ds = load_examples(spec["calibration_path"], cal.get("split"))
    field = cal["field"]
    if field not in ds.column_names:
        raise SystemExit(f"calibration data {spec['calibration_path']}: no column {field!r} "
                         f"(it has {ds.column_names}); set recipe.calibration.field")
    rows = ds.shuffle(seed=cal.get("seed", 0)).select(range(min(samples, len(ds))))
    texts = [tokenizer.apply_chat_template(r[field], tokenize=False) if cal.get("chat_template") else r[field]
             for r in rows]
    ids = [x for x in tokenizer(texts, add_special_tokens=not cal.get("chat_template"), truncation=True,
                                max_length=seq_len)["input_ids"] if x]
    if not ids:
        raise SystemExit(f"calibration data {spec['calibration_path']}: no non-empty example")
    return Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]})


def save_simulated(model, base: str, out: Path, dtype, trust: bool) -> int:
    """The weights as the scheme rounds them (quantize, then dequantize), in a plain checkpoint of the base model:
    no quantization config, so any engine serves it. Returns how many weights were rounded."""
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize
    from transformers import AutoModelForCausalLM

    rounded = {}
    for name, m in model.named_modules():
        args = getattr(getattr(m, "quantization_scheme", None), "weights", None)
        if args is None or not hasattr(m, "weight_scale"):
            continue
        zero = getattr(m, "weight_zero_point", None)
        with torch.no_grad():  # GPTQ left the weight on its grid already: rounding it again changes nothing
            rounded[f"{name}.weight"] = fake_quantize(m.weight, m.weight_scale, zero, args).to(dtype).cpu()
    if not rounded:
        raise SystemExit("simulate: no quantized weights found after the recipe ran")
    plain = AutoModelForCausalLM.from_pretrained(base, trust_remote_code=trust, dtype=dtype)
    missing = set(rounded) - set(plain.state_dict())
    if missing:
        raise SystemExit(f"simulate: {sorted(missing)[:3]} are not weights of the base model")
    plain.load_state_dict(rounded, strict=False)
    plain.save_pretrained(out)
    return len(rounded)


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
        ds = (calibration_from_data(tok, spec) if "calibration_path" in spec
              else calibration_set(tok, spec["calibration"], spec["samples"], spec["seq_len"]))
        longest = max(len(x) for x in ds["input_ids"])
        kwargs = dict(dataset=ds, num_calibration_samples=len(ds), max_seq_length=longest)
    oneshot(model=model, recipe=spec.get("recipe_path") or recipe_for(spec), **kwargs)
    out = Path(spec["out"])
    if spec.get("simulate"):
        spec["simulated_weights"] = save_simulated(model, spec["base"], out, dtype, trust)
    else:
        model.save_pretrained(out, save_compressed=True)
    tok.save_pretrained(out)
    meta = {k: v for k, v in spec.items() if k not in ("calibration",)}
    meta.update(seconds=round(time.time() - t0, 1), calibration_sequences=kwargs and len(kwargs["dataset"]))
    (out / "qeval-quantize.json").write_text(json.dumps(meta, indent=1))
    print(json.dumps(meta))


if __name__ == "__main__":
    main(sys.argv[1])
