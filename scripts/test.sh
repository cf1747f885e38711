#!/usr/bin/env bash
# Set up, then run the whole test suite (CPU, no network) in two worker processes, each on its
# own share of the cores (tests/conftest.py). Extra arguments go to pytest (-n 0: one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest tests -n 2 --dist loadfile "$@"
