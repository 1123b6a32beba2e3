#!/usr/bin/env bash
# Local: what the device needs besides the wheel kit, in carry folders of at most ~60 MiB:
# the embedded model's GGUF (converted on the device), the `gguf` and `tenacity` wheels, BIG-bench task
# data; NVIDIA Model Optimizer's wheels (p3, ~19 MiB). p1 rides along with the kit's last (small) folder,
# p2 goes alone, p3 with the first run call. Never committed (.devkit/ is ignored).
set -euo pipefail
cache=${QEVAL_CACHE:-$HOME/.cache/qeval}
root=$(cd "$(dirname "$0")/../.." && pwd)
kit=$root/.devkit
gguf=$(ls "$cache"/models/.download/*.gguf | head -1)
rm -rf "$kit/p1" "$kit/p2" "$kit/p3" && mkdir -p "$kit/p1" "$kit/p2" "$kit/p3"
split -b 40M -d -a 2 "$gguf" "$kit/p1/model.gguf.part-"
mv "$kit"/p1/model.gguf.part-0[1-9] "$kit/p2/"
sha256sum "$gguf" | awk -v n="$(basename "$gguf")" '{print $1 "  " n}' > "$kit/p2/model.gguf.sha256"
python3 -m pip download -q --no-deps gguf==0.19.0 -d "$kit/p2"
# lm-eval's API models need tenacity (lm-eval[api]); the kit's lock leaves it out (found on the device)
python3 -m pip download -q --no-deps tenacity==9.2.1 -d "$kit/p2"
tar czf "$kit/p2/data.tgz" -C "$cache/data" bigbench
# ModelOpt for the FP8 checkpoint vLLM serves (quantizer: modelopt); the rest of what it needs (torch,
# transformers, scipy, ninja, nvidia-ml-py) is in the kit. antlr4's only release is an sdist: made a wheel here
python3 -m pip download -q --no-deps nvidia-modelopt==0.47.0 omegaconf==2.4.0 pulp==3.3.2 -d "$kit/p3"
python3 -m pip wheel -q --no-deps antlr4-python3-runtime==4.9.3 -w "$kit/p3"
du -sh "$kit"/p1 "$kit"/p2 "$kit"/p3
