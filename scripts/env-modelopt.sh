#!/usr/bin/env bash
# NVIDIA Model Optimizer as an overlay on the llm-compressor venv (it reuses its torch and transformers):
# `pip --target` keeps it out of that venv, whose pins it would otherwise disturb. Pure Python; ~70 MB.
set -euo pipefail
llmc=$1; out=$2
. "$(dirname "$0")/stamp.sh" "$out" "$0"
rm -rf "$out"
# --no-deps: its torch / transformers / numpy are the llmc venv's; these are what that venv lacks
"$llmc/bin/python" -m pip install -q --no-deps --target "$out" nvidia-modelopt==0.47.0 scipy omegaconf \
  antlr4-python3-runtime==4.9.3 pulp ninja nvidia-ml-py
PYTHONPATH=$out "$llmc/bin/python" -c "import modelopt.torch.quantization, modelopt.torch.export; print('modelopt ok')"
stamp_done
