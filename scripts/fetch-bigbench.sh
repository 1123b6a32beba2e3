#!/usr/bin/env bash
# Real benchmark data offline: BIG-bench task JSON from the bigbench sdist on PyPI (never committed).
# The extraction is qeval's own (qeval/suites/bigbench.py, standard library only), as `qeval data bigbench` uses.
set -euo pipefail
out=$1
root=$(cd "$(dirname "$0")/.." && pwd)
. "$(dirname "$0")/stamp.sh" "$out" "$0" "$root/qeval/suites/bigbench.py"
dl=$(dirname "$out")/.download
mkdir -p "$dl" "$out"
[ -f "$dl"/bigbench-1.0.0.tar.gz ] || python3 -m pip download -q --no-deps --no-binary :all: bigbench==1.0.0 -d "$dl"
PYTHONPATH="$root" python3 -m qeval.suites.bigbench "$dl"/bigbench-1.0.0.tar.gz "$out"
stamp_done
