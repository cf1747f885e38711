#!/usr/bin/env bash
# Create .venv if missing and install ernie_ft with everything (training: the train extra, CPU Paddle: cpu, the
# tests' tools: dev) with the tested pins in constraints.txt. Python packages only (the demo runs this);
# scripts/test.sh adds what the browser test needs. GPU users: install paddlepaddle-gpu into the environment first,
# then `pip install -e '.[train]'`. Serving only: `pip install .` (the runtime, docs/deployment.md).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv with $($python --version)"
  "$python" -m venv .venv
fi
stamp=.venv/.ernie_ft-installed
if [ ! -f "$stamp" ] || [ constraints.txt -nt "$stamp" ] || [ setup.cfg -nt "$stamp" ]; then
  echo "installing ernie_ft and its pinned dependencies into .venv (first time: about a minute)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[train,cpu,dev]" -c constraints.txt
  touch "$stamp"
fi
