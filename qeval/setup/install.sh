#!/usr/bin/env bash
# Install qeval and its tool envs from a kit made by `qeval kit`, offline.
#
#   bash install.sh [--check] [--system-site-packages] [PREFIX]
#
# KIT_DIR: the folder holding the part-NNN/ folders (or all their files in one folder); default: the folder
# above this script's part-NNN/, else this script's own folder. PREFIX (default ~/qeval) receives the joined
# wheelhouse, the campaign files (PREFIX/examples, PREFIX/suites) and the venv qeval runs from.
# --check joins and verifies the files only.
# PYTHON: the interpreter the venvs are made from (default python3; its version must be the kit's).
set -euo pipefail

check=0
system_site=0
prefix=""
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    --system-site-packages) system_site=1 ;;
    -h|--help) sed -n 2,10p "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "install.sh: unknown option $arg" >&2; exit 2 ;;
    *) prefix=$arg ;;
  esac
done
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -z "${KIT_DIR:-}" ]; then
  case "$(basename "$here")" in
    part-[0-9][0-9][0-9]) KIT_DIR=$(dirname "$here") ;;
    *) KIT_DIR=$here ;;
  esac
fi
prefix=${prefix:-$HOME/qeval}
py=${PYTHON:-python3}
wheelhouse=$prefix/wheelhouse
mkdir -p "$wheelhouse"

# Join the pieces and check every sha256; name what is missing or damaged. Prints the manifest's settings.
settings=$("$py" - "$KIT_DIR" "$wheelhouse" <<'PY'
import hashlib, json, os, sys
from pathlib import Path

kit, out = Path(sys.argv[1]), Path(sys.argv[2])
found = sorted(kit.glob("manifest.json")) + sorted(kit.glob("part-*/manifest.json"))
if not found:
    sys.exit(f"install.sh: no manifest.json in {kit} or {kit}/part-*/ (set KIT_DIR to the kit's folder)")
manifest = json.loads(found[0].read_text())
want = manifest["python_version"]
have = "%d.%d" % sys.version_info[:2]
if have != want:
    sys.exit(f"install.sh: the kit is for Python {want}, {sys.executable} is {have} (set PYTHON)")

def locate(piece):
    for cand in (kit / piece["folder"] / piece["name"], kit / piece["name"]):
        if cand.is_file():
            return cand
    return next(iter(sorted(kit.glob("*/" + piece["name"]))), None)

def sha(paths):
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()

missing, damaged, todo = [], [], []
for f in manifest["files"]:
    target = out / f["name"]
    if target.is_file() and target.stat().st_size == f["size"] and sha([target]) == f["sha256"]:
        continue  # joined by an earlier run
    paths = []
    for piece in f["pieces"]:
        p = locate(piece)
        if p is None:
            missing.append(f"{piece['folder']}/{piece['name']}")
        elif p.stat().st_size != piece["size"] or sha([p]) != piece["sha256"]:
            damaged.append(f"{piece['folder']}/{piece['name']} (at {p})")
        paths.append(p)
    todo.append((f, paths))
if missing or damaged:
    for m in missing:
        print(f"install.sh: missing {m}", file=sys.stderr)
    for d in damaged:
        print(f"install.sh: sha256 mismatch {d}", file=sys.stderr)
    total = sum(len(f["pieces"]) for f in manifest["files"])
    sys.exit(f"install.sh: {len(missing)} missing, {len(damaged)} damaged of {total} pieces; copy them again from the kit")
for f, paths in todo:
    tmp = out / (f["name"] + ".joining")
    with open(tmp, "wb") as dst:
        for p in paths:
            with open(p, "rb") as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    dst.write(block)
    if sha([tmp]) != f["sha256"]:
        tmp.unlink()
        sys.exit(f"install.sh: {f['name']} joined has the wrong sha256")
    os.replace(tmp, out / f["name"])
print(f"install.sh: {len(manifest['files'])} files checked in {out}", file=sys.stderr)
print(manifest["device"], int(manifest.get("system_site_packages", False)), int(manifest.get("assets", True)),
      manifest["qeval_wheel"], ",".join(manifest.get("extras", [])) or "-", manifest.get("campaigns") or "-")
PY
)
read -r device kit_system_site kit_assets qeval_wheel extras campaigns <<<"$settings"
[ "$check" = 1 ] && exit 0

# the campaign files, side by side as in the repository (the examples name their suites as ../suites/...);
# a newer kit's files replace an older one's, files of the user's own beside them stay
if [ "$campaigns" != - ]; then
  "$py" - "$wheelhouse/$campaigns" "$prefix" <<'PY'
import sys, tarfile

with tarfile.open(sys.argv[1]) as tar:
    # "data": no absolute paths, no links out of PREFIX (Python 3.12, and 3.11.4 onwards)
    tar.extractall(sys.argv[2], **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    top = sorted({m.name.split("/", 1)[0] for m in tar.getmembers()})
print("install.sh: campaign files in " + ", ".join(f"{sys.argv[2]}/{t}" for t in top), file=sys.stderr)
PY
fi

# a kit made with --have leaves out what the target's Python already has: the envs must see it
[ "$kit_system_site" = 1 ] && system_site=1
site=()
[ "$system_site" = 1 ] && site=(--system-site-packages)
assets=()
[ "$kit_assets" = 1 ] || assets=(--no-assets)  # a kit made with --no-assets: the model and data come otherwise
echo "install.sh: qeval into $prefix/venv"
"$py" -m venv "${site[@]}" "$prefix/venv"
if [ "$system_site" = 1 ]; then
  # Python's venv would see only the base installation's packages: where "$py" is itself a venv (CUDA images
  # often ship torch in one), a .pth file names its site dirs too (qeval setup does the same for the tool envs)
  "$py" -s - "$prefix/venv/bin/python" <<'PY'
import os, subprocess, sys
code = ("import os, sys; print('\\n'.join(p for p in sys.path "
        "if os.path.basename(p) in ('site-packages', 'dist-packages') and os.path.isdir(p)))")
own = subprocess.run([sys.argv[1], "-s", "-c", code], capture_output=True, text=True, check=True).stdout.split()
mine = [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p)]
missing = [p for p in mine if p not in own]
if missing:
    with open(os.path.join(own[0], "qeval-inherited.pth"), "w") as f:
        f.write("\n".join(missing) + "\n")
    print("install.sh: the venv also sees " + ", ".join(missing), file=sys.stderr)
PY
fi
extra_spec=""
[ "$extras" = - ] || extra_spec="[$extras]"  # the extras the kit carries the wheels of (ray: the Ray executor)
"$prefix/venv/bin/python" -m pip install -q --no-index --find-links "$wheelhouse" "$wheelhouse/$qeval_wheel$extra_spec"
"$prefix/venv/bin/qeval" setup --device "$device" --wheelhouse "$wheelhouse" "${site[@]}" "${assets[@]}"
echo "install.sh: done; qeval is $prefix/venv/bin/qeval. Next: $prefix/venv/bin/qeval doctor"
if [ -f "$prefix/examples/gpu-quick.yaml" ]; then
  echo "  then: $prefix/venv/bin/qeval run $prefix/examples/gpu-quick.yaml"
fi
