#!/usr/bin/env bash
# On the device: run (or resume) one campaign within a time budget, then bring its results back in $OUT.
# usage: bash scripts/gpu/device-run.sh CONFIG BUDGET_SECONDS
# A campaign that runs out of time is killed and resumed by the next call (qeval keeps every record).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
cfg=$1; budget=$2
name=$(python3 -c "import sys,yaml; print(yaml.safe_load(open(sys.argv[1]))['name'])" "$cfg")
# a fresh device has no runs/: start from the committed reference run, whose per-item store lets qeval
# skip every variant and suite already there (the store is keyed by variant and suite, not by run)
ref=$(ls -d results/*/"$name" 2>/dev/null | sort | tail -1)
if [ ! -d "runs/$name" ] && [ -n "$ref" ]; then
  mkdir -p runs && cp -r "$ref" "runs/$name"
  [ -f "runs/$name/results.sqlite.gz" ] && gunzip "runs/$name/results.sqlite.gz"
  echo "resuming from $ref"
fi
PYTHONPATH=$PWD:/tmp/site timeout -s INT -k 30 "$budget" python3 -m qeval.cli run "$cfg" --no-mlflow
rc=$?
echo "qeval exit code: $rc"
if [ -n "${OUT:-}" ] && [ -d "runs/$name" ]; then
  # the record, reports, per-request tables and logs; the SQLite store too (per-item evidence)
  tar czf "$OUT/$name.tgz" --exclude='*.tmp*' --exclude="$name/work" -C runs "$name"  # work/: lm-eval's dataset caches
  ls -la "$OUT"
fi
exit $rc
