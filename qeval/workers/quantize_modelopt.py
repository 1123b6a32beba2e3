"""FP8 with NVIDIA Model Optimizer: a Hugging Face checkpoint (quant_method "modelopt") that vLLM and
trtllm-serve's PyTorch backend serve. Runs in a Python with nvidia-modelopt; never imports qeval.

Usage: python quantize_modelopt.py SPEC.json
SPEC: {"base": dir, "out": dir, "method": "fp8", "calibration": [text, ...], "samples": int, "seq_len": int}
"""

import json
import sys
import time
from pathlib import Path

import torch


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    trust = spec.get("trust_remote_code", False)  # the campaign's model entry opted in
    import modelopt.torch.quantization as mtq
    from modelopt.torch.export import export_hf_checkpoint
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    t0 = time.time()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(spec["base"], trust_remote_code=trust, dtype=torch.bfloat16)
    model = model.to(device).eval()
    tok = AutoTokenizer.from_pretrained(spec["base"], trust_remote_code=trust)
    ids = tok("\n\n".join(spec["calibration"]), add_special_tokens=False, return_tensors="pt")["input_ids"][0]
    n = spec["seq_len"]
    chunks = [ids[i:i + n] for i in range(0, len(ids) - n + 1, n)][:spec["samples"]]
    if not chunks:
        raise SystemExit("calibration text is shorter than one sequence")

    def forward_loop(m):  # static FP8 scales come from the activations seen here
        with torch.no_grad():
            for c in chunks:
                m(c.unsqueeze(0).to(device))

    mtq.quantize(model, mtq.FP8_DEFAULT_CFG, forward_loop)
    out = Path(spec["out"])
    export_hf_checkpoint(model, export_dir=str(out))
    tok.save_pretrained(out)
    meta = {k: v for k, v in spec.items() if k != "calibration"}
    meta.update(seconds=round(time.time() - t0, 1), calibration_sequences=len(chunks), device=device)
    (out / "qeval-quantize.json").write_text(json.dumps(meta, indent=1))
    print(json.dumps(meta))


if __name__ == "__main__":
    main(sys.argv[1])
