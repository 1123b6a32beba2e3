"""FP8 quantization and a TensorRT engine build with TensorRT-LLM's LLM API, for the GPU it runs on.
Runs in a Python with tensorrt_llm (NVIDIA's index only; not run on the machines this was written on).

Usage: python build_trtllm.py SPEC.json
SPEC: {"base": dir, "out": dir, "method": "fp8", "calibration": [text, ...], "samples": int, "seq_len": int,
       "max_batch_size": int, "max_seq_len": int, "max_num_tokens": int | null}
Writes OUT (config.json + rank0.engine, as LLM.save writes them, plus the tokenizer) and
OUT/qeval-build.json last, so that a folder with it is complete.
"""

import json
import subprocess
import sys
import time
from pathlib import Path


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    from tensorrt_llm import BuildConfig, __version__
    from tensorrt_llm._tensorrt_engine import LLM
    from tensorrt_llm.llmapi import CalibConfig, QuantAlgo, QuantConfig
    from transformers import AutoTokenizer

    t0 = time.time()
    build = BuildConfig(max_batch_size=spec["max_batch_size"], max_seq_len=spec["max_seq_len"],
                        **({"max_num_tokens": spec["max_num_tokens"]} if spec.get("max_num_tokens") else {}))
    # the LLM API calibrates on its own dataset loader; the spec's texts are qeval's calibration set
    calib = CalibConfig(calib_batches=spec["samples"], calib_max_seq_length=spec["seq_len"])
    llm = LLM(model=spec["base"], quant_config=QuantConfig(quant_algo=QuantAlgo.FP8, kv_cache_quant_algo=QuantAlgo.FP8),
              calib_config=calib, build_config=build)
    out = Path(spec["out"])
    llm.save(str(out))
    AutoTokenizer.from_pretrained(spec["base"]).save_pretrained(out)
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().splitlines()[0]
    meta = {k: v for k, v in spec.items() if k != "calibration"}
    meta.update(seconds=round(time.time() - t0, 1), tensorrt_llm=__version__, gpu=gpu)
    (out / "qeval-build.json").write_text(json.dumps(meta, indent=1))  # the engine's config.json has no SM version
    print(json.dumps(meta))


if __name__ == "__main__":
    main(sys.argv[1])
