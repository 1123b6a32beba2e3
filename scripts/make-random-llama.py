"""Makes the embedded model `llama-3-8b-random` (benchmarks/configs/gpu-llama8b*.yaml): a Llama-3-8B-shaped
checkpoint with random weights, built where it will run (no weights to download).

Usage: python scripts/make-random-llama.py ~/.cache/qeval/models/llama-3-8b-random \
           --tokenizer ~/.cache/qeval/models/smollm2-135m-instruct
For speed and memory figures only: kernels do not care what the weights are, so its quality means nothing.
The vocabulary is the given tokenizer's (no gated Llama-3 tokenizer needed): the embedding and
lm_head are smaller than Llama-3's 128,256 rows; every other shape is Llama-3-8B's.
"""

import argparse
import json
import shutil
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--tiny", action="store_true", help="2 layers, hidden 256: to try the path on a CPU")
    a = ap.parse_args()
    if (a.out / "config.json").is_file():
        print(f"{a.out} exists")
        return
    t0 = time.time()
    vocab = json.loads((a.tokenizer / "config.json").read_text())["vocab_size"]
    shape = (dict(hidden_size=256, intermediate_size=768, num_hidden_layers=2) if a.tiny else
             dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32))
    cfg = LlamaConfig(vocab_size=vocab, **shape, num_attention_heads=32 if not a.tiny else 4,
                      num_key_value_heads=8 if not a.tiny else 2, max_position_embeddings=8192,
                      rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                      bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16")
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = LlamaForCausalLM(cfg)
    tmp = a.out.with_name(a.out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, max_shard_size="5GB")
    for name in TOKENIZER_FILES:
        if (a.tokenizer / name).is_file():
            shutil.copy(a.tokenizer / name, tmp / name)
    tmp.rename(a.out)  # the folder only appears under its name once complete
    n = sum(p.numel() for p in model.parameters())
    print(f"random Llama-3-8B shape: {n / 1e9:.2f} B parameters, vocab {vocab}, {time.time() - t0:.0f} s -> {a.out}")


if __name__ == "__main__":
    main()
