#!/usr/bin/env bash
# On the device: run (or resume) one campaign within a time budget, then bring its results back in $OUT.
# usage: [SEED=RUN_FOLDER] [FRESH=1] bash scripts/gpu/device-run.sh CONFIG BUDGET_SECONDS [QEVAL RUN OPTIONS...]
# FRESH=1: from nothing, for a wall time (no committed reference run, no seed, no quantized variant or shared
# record kept from an earlier call on this machine; the compile caches stay, as on any warm machine)
# Out of time, qeval gets SIGINT and GRACE seconds (default 20) to stop its children and write its record,
# then SIGKILL; the next call resumes it (qeval keeps every record). Keep BUDGET + GRACE + ~25 s (the
# tarball, the start) under the call's 600 s: plan-calls.py does.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/env.sh
cfg=$1; budget=$2; shift 2; grace=${GRACE:-20}
name=$(python3 -c "import sys,yaml; print(yaml.safe_load(open(sys.argv[1]))['name'])" "$cfg")
# a fresh device has no runs/: start from the committed reference run, whose per-item store lets qeval
# skip every variant and suite already there (the store is keyed by variant and suite, not by run)
ref=$(ls -d results/*/"$name" 2>/dev/null | sort | tail -1)
if [ -n "${FRESH:-}" ]; then
  rm -rf "runs/$name" "$QEVAL_CACHE/variants" "$QEVAL_CACHE/records.sqlite"*; ref=""; SEED=""
  export QEVAL_RECORDS=off
  echo "from nothing (FRESH)"
fi
if [ ! -d "runs/$name" ] && [ -n "$ref" ]; then
  mkdir -p runs && cp -r "$ref" "runs/$name"
  [ -f "runs/$name/results.sqlite.gz" ] && gunzip "runs/$name/results.sqlite.gz"
  echo "resuming from $ref"
elif [ ! -d "runs/$name" ] && [ -n "${SEED:-}" ]; then
  # another campaign's run folder whose suites and variants this one shares: only its per-item store is
  # taken (records under the same keys are not served again); its record and reports stay its own
  mkdir -p "runs/$name"
  if [ -f "$SEED/results.sqlite.gz" ]; then gunzip -c "$SEED/results.sqlite.gz" > "runs/$name/results.sqlite"
  else cp "$SEED/results.sqlite" "runs/$name/"; fi
  echo "seeded the store from $SEED"
fi
# env --default-signal=INT: a command started in the background by a shell without job control inherits
# SIGINT ignored, and Python then never sees timeout's SIGINT (only the SIGKILL after the grace)
PYTHONPATH=$PWD:/tmp/site timeout -s INT -k "$grace" "$budget" env --default-signal=INT \
  python3 -m qeval.cli run "$cfg" --no-mlflow "$@"
rc=$?
echo "qeval exit code: $rc"
if [ -n "${OUT:-}" ] && [ -d "runs/$name" ]; then
  # the record, reports, per-request tables and logs; the SQLite store too (per-item evidence)
  tar czf "$OUT/$name.tgz" --exclude='*.tmp*' --exclude="$name/work" -C runs "$name"  # work/: lm-eval's dataset caches
  ls -la "$OUT"
fi
exit $rc
