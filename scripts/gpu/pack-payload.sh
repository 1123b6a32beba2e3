#!/usr/bin/env bash
# Local: what the device needs besides the wheel kit, as small files in .devkit/payload/ (git-ignored):
# the embedded model's GGUF in 8 MiB parts (converted on the device: the bf16 checkpoint is 257 MiB),
# the `gguf` and `tenacity` wheels, the BIG-bench task data, NVIDIA Model Optimizer's wheels, and
# payload.sha256 over all of them. scripts/gpu/plan-calls.py spreads these files over the calls' spare room.
# Builds the GGUF and the data first when the cache lacks them (`make assets`, as `make setup` would).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${QEVAL_CACHE:-$HOME/.cache/qeval}
out=$root/.devkit/payload
have_assets() { ls "$cache"/models/.download/*.gguf >/dev/null 2>&1 && [ -f "$cache/data/bigbench/.stamp" ]; }
if ! have_assets; then
  echo "pack-payload: building the GGUF and the BIG-bench data into $cache (make assets)"
  make -C "$root" QEVAL_CACHE="$cache" assets
fi
have_assets || { echo "pack-payload: still no GGUF in $cache/models/.download or data in $cache/data/bigbench" >&2; exit 2; }
gguf=$(ls "$cache"/models/.download/*.gguf | head -1)
rm -rf "$out" && mkdir -p "$out"
split -b 8M -d -a 2 "$gguf" "$out/model.gguf.part-"
sha256sum "$gguf" | awk -v n="$(basename "$gguf")" '{print $1 "  " n}' > "$out/model.gguf.sha256"
python3 -m pip download -q --no-deps gguf==0.19.0 -d "$out"
# lm-eval's API models need tenacity (lm-eval[api]); the kit's lock leaves it out (found on the device)
python3 -m pip download -q --no-deps tenacity==9.2.1 -d "$out"
tar czf "$out/data.tgz" -C "$cache/data" bigbench
# ModelOpt for the FP8 checkpoint vLLM serves (quantizer: modelopt); the rest of what it needs (torch,
# transformers, scipy, ninja, nvidia-ml-py) is in the kit. antlr4's only release is an sdist: made a wheel here
python3 -m pip download -q --no-deps nvidia-modelopt==0.47.0 omegaconf==2.4.0 pulp==3.3.2 -d "$out"
python3 -m pip wheel -q --no-deps antlr4-python3-runtime==4.9.3 -w "$out"
(cd "$out" && sha256sum -- * > ../payload.sha256 && mv ../payload.sha256 .)
echo "payload: $(ls "$out" | wc -l) files, $(du -sh "$out" | cut -f1) in $out"
