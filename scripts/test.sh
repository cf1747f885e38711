#!/usr/bin/env bash
# Set up, then run the whole test suite (CPU, no network). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest tests "$@"
