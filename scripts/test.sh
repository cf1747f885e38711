#!/usr/bin/env bash
# Set up, then run the whole test suite (CPU, no network) in two worker processes, each on its
# own share of the cores (tests/conftest.py), which take whole modules in the order tests/conftest.py
# puts them (the slowest first). Extra arguments go to pytest (-n 0: one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The browser test of the serving page drives Debian's Chromium; install it where this machine allows
# (root, apt-get). Anywhere else that one test is skipped.
if ! command -v chromedriver > /dev/null && [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
  echo "installing chromium and chromium-driver for the browser test (apt-get)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver fonts-noto-cjk) > /dev/null 2>&1 \
    || echo "could not install chromium; the browser test will be skipped"
fi
exec .venv/bin/python -m pytest tests -n 2 --dist loadfile --no-loadscope-reorder "$@"
