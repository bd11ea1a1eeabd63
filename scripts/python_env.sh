#!/usr/bin/env bash
# Creates the virtual environment .venv (reused when present) with what the Python package, its
# tests and the demo need (tests/python/requirements.txt), and the Python headers the package's
# extension is built against.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Debian splits ensurepip (which venv needs) and the C headers off python3.
if ! python3 -c "import ensurepip" > /dev/null 2>&1; then bash scripts/deps.sh python3-venv; fi
if ! python3 -c "import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"; then
  bash scripts/deps.sh python3-dev
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r tests/python/requirements.txt
