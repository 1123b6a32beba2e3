#!/usr/bin/env bash
# Real benchmark data offline: BIG-bench task JSON from the bigbench sdist on PyPI (never committed).
set -euo pipefail
out=$1
. "$(dirname "$0")/stamp.sh" "$out" "$0" "$(dirname "$0")/bigbench_to_jsonl.py"
dl=$(dirname "$out")/.download
mkdir -p "$dl" "$out"
[ -f "$dl"/bigbench-1.0.0.tar.gz ] || python3 -m pip download -q --no-deps --no-binary :all: bigbench==1.0.0 -d "$dl"
tasks="general_knowledge arithmetic/1_digit_addition unit_conversion/unit_identification movie_recommendation logical_sequence"
members=$(for t in $tasks; do echo "bigbench-1.0.0/bigbench/benchmark_tasks/$t/task.json"; done)
tar -xzf "$dl"/bigbench-1.0.0.tar.gz -C "$dl" $members
for t in $tasks; do
  mkdir -p "$out/$t"; cp "$dl/bigbench-1.0.0/bigbench/benchmark_tasks/$t/task.json" "$out/$t/task.json"
done
python3 "$(dirname "$0")/bigbench_to_jsonl.py" "$out"
stamp_done
