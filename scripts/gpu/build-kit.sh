#!/usr/bin/env bash
# Local: the wheel kit's carry folders .devkit/c1..cN (vLLM 0.26.0, lm-eval, llm-compressor, Ray for the H200),
# built by the shared kit's build.py in .devkit/ (git-ignored: never committed). ~2.5 min and 438 MB of
# PyPI downloads the first time; a rerun downloads only what is missing and repacks the folders.
# usage: bash scripts/gpu/build-kit.sh [KIT_SOURCE]   (default ../shared/device/kit beside the checkout)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
src=${1:-${DEVKIT_SRC:-$root/../shared/device/kit}}
kit=$root/.devkit
[ -f "$src/build.py" ] || { echo "build-kit: no kit at $src (give its folder as the first argument)" >&2; exit 2; }
git -C "$root" check-ignore -q .devkit/ || { echo "build-kit: .devkit/ is not git-ignored in $root" >&2; exit 2; }
mkdir -p "$kit"
# the shared kit is read-only: copy without its modes, so a rerun can overwrite the copy
cp -r --no-preserve=mode "$src"/. "$kit"/
# qeval's own additions to the kit's vLLM lock (its build.py splits any wheel over 60 MiB the same way):
# Ray for the `ray` executor; all that Ray 2.60.0 needs (click, jsonschema, msgpack, protobuf, ...) is
# already in the lock or on the device
for pin in ray==2.60.0; do
  grep -qix "$pin" "$kit/reqA.txt" || echo "$pin" >> "$kit/reqA.txt"
done
python3 -c "import packaging" 2>/dev/null || { echo "build-kit: python3 needs 'packaging' (pip install packaging)" >&2; exit 2; }
(cd "$kit" && python3 build.py)
ls -d "$kit"/c[0-9]* | xargs -n1 du -sh
