#!/usr/bin/env bash
# Creates the virtual environment .venv (reused when present) with what the Python package and
# its tests need (tests/python/requirements.txt).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! python3 -m venv --help > /dev/null 2>&1; then bash scripts/deps.sh python3-venv; fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r tests/python/requirements.txt
