#!/usr/bin/env bash
# Create .venv if missing and install ernie_ft (CPU Paddle) with the tested pins in constraints.txt.
# GPU users: install paddlepaddle-gpu into the environment first, then `pip install -e .`.
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
  .venv/bin/python -m pip install -q -e ".[cpu,dev]" -c constraints.txt
  touch "$stamp"
fi
# The browser test drives Debian's Chromium; install it where this machine allows (root, apt-get).
if ! command -v chromedriver > /dev/null && [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
  echo "installing chromium and chromium-driver for the browser test (apt-get)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver fonts-noto-cjk) > /dev/null 2>&1 \
    || echo "could not install chromium; the browser test will be skipped"
fi
