#!/usr/bin/env bash
# On the device, after the kit's install.sh: the embedded model (from the carried GGUF), the BIG-bench
# data, and the random Llama-3-8B-shaped model, all into $QEVAL_CACHE. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
P=${PAYLOAD:-/tmp/payload}
t0=$(date +%s)
# every payload file staged, whole? (a call left out, or a machine recycled between calls, shows here)
[ -f $P/payload.sha256 ] || { echo "device-setup: no $P/payload.sha256: stage the payload calls" >&2; exit 2; }
(cd $P && sha256sum --quiet -c payload.sha256) ||
  { echo "device-setup: payload files missing or damaged in $P (above): stage their calls again" >&2; exit 2; }
mkdir -p /tmp/site-gguf "$QEVAL_CACHE/models/.download" "$QEVAL_CACHE/data"
[ -d /tmp/site-gguf/gguf ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site-gguf $P/gguf-*.whl
[ -d /tmp/site/tenacity ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site $P/tenacity-*.whl
# ModelOpt, when its wheels were carried (p3): an overlay of its own, like scripts/env-modelopt.sh on the CPU
if ls $P/nvidia_modelopt-*.whl >/dev/null 2>&1 && [ ! -d /tmp/site-modelopt/modelopt ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/site-modelopt $P/nvidia_modelopt-*.whl \
    $P/omegaconf-*.whl $P/pulp-*.whl $P/antlr4_python3_runtime-*.whl
fi
name=$(awk '{print $2}' $P/model.gguf.sha256)
gguf=$QEVAL_CACHE/models/.download/$name
if [ ! -f "$gguf" ]; then
  cat $P/model.gguf.part-* > "$gguf.tmp"
  (cd "$(dirname "$gguf")" && mv "$gguf.tmp" "$gguf" && sha256sum -c $P/model.gguf.sha256)
fi
[ -d "$QEVAL_CACHE/data/bigbench" ] || tar xzf $P/data.tgz -C "$QEVAL_CACHE/data"
base=$QEVAL_CACHE/models/smollm2-135m-instruct
[ -f "$base/config.json" ] || PYTHONPATH=$QEVAL_LLMC_PYTHONPATH "$QEVAL_LLMC_PYTHON" qeval/workers/convert_gguf.py "$gguf" "$base"
# SKIP_RANDOM_8B=1: only configs/gpu-llama8b.yaml needs it (19 s)
[ "${SKIP_RANDOM_8B:-0}" = 1 ] || PYTHONPATH=$QEVAL_VLLM_PYTHONPATH "$QEVAL_VLLM_PYTHON" scripts/make-random-llama.py "$QEVAL_CACHE/models/llama-3-8b-random" \
  --tokenizer "$base" ${RANDOM_TINY:+--tiny}  # RANDOM_TINY=1: try this script on a CPU
PYTHONPATH=$QEVAL_VLLM_PYTHONPATH "$QEVAL_VLLM_PYTHON" -c "import ray; print('ray', ray.__version__)"  # the ray executor's
echo "device setup took $(( $(date +%s) - t0 )) s"; df -h /tmp | tail -1; nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
