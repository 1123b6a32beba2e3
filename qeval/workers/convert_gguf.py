"""Convert a GGUF file to a bf16 safetensors checkpoint (runs in the llm-compressor venv).

Usage: python convert_gguf.py MODEL.gguf OUT_DIR
"""

import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig


def main(gguf: str, out: str) -> None:
    torch.set_num_threads(1)
    src = Path(gguf)
    kwargs = dict(gguf_file=src.name, quantization_config=GgufConfig(dequantize=True))
    model = AutoModelForCausalLM.from_pretrained(src.parent, dtype=torch.bfloat16, **kwargs)
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    # a dequantized GGUF must be saved as a plain checkpoint, not as a "gguf-quantized" one
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tok.save_pretrained(out)
    print(f"saved {sum(p.numel() for p in model.parameters())} parameters to {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
