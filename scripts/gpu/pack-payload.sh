#!/usr/bin/env bash
# Local: what the device needs besides the wheel kit, in carry folders of at most ~60 MiB:
# the embedded model's GGUF (converted on the device), the `gguf` wheel, BIG-bench task data.
# p1 rides along with the kit's last (small) folder, p2 goes alone. Never committed (.devkit/ is ignored).
set -euo pipefail
cache=${QEVAL_CACHE:-$HOME/.cache/qeval}
root=$(cd "$(dirname "$0")/../.." && pwd)
kit=$root/.devkit
gguf=$(ls "$cache"/models/.download/*.gguf | head -1)
rm -rf "$kit/p1" "$kit/p2" && mkdir -p "$kit/p1" "$kit/p2"
split -b 40M -d -a 2 "$gguf" "$kit/p1/model.gguf.part-"
mv "$kit"/p1/model.gguf.part-0[1-9] "$kit/p2/"
sha256sum "$gguf" | awk -v n="$(basename "$gguf")" '{print $1 "  " n}' > "$kit/p2/model.gguf.sha256"
python3 -m pip download -q --no-deps gguf==0.19.0 -d "$kit/p2"
# lm-eval's API models need tenacity (lm-eval[api]); the kit's lock leaves it out (found on the device)
python3 -m pip download -q --no-deps tenacity==9.2.1 -d "$kit/p2"
tar czf "$kit/p2/data.tgz" -C "$cache/data" bigbench
du -sh "$kit"/p1 "$kit"/p2
