#!/usr/bin/env bash
# Set up, then run the whole test suite (CPU, no network) in two worker processes, each on its
# own share of the cores (tests/conftest.py), which take whole modules in the order tests/conftest.py
# puts them (the slowest first). Extra arguments go to pytest (-n 0: one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The browser tests of the serving page drive Debian's Chromium; install it where this machine allows
# (root, apt-get). Where it cannot be had they skip, and say so loudly: here, in pytest's summary (the
# skip reason) and again after it. In CI (CI=true) they fail instead (tests/test_serve.py): CI's machines
# reach Debian's packages, so a missing Chromium there is a broken setup, and a skip would let a broken
# page land unseen.
browser_note=""
if ! command -v chromedriver > /dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    echo "installing chromium and chromium-driver for the browser tests (apt-get)"
    log=$(mktemp)
    if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver fonts-noto-cjk) > "$log" 2>&1; then
      browser_note="could not install chromium and chromium-driver with apt-get ($(tail -n 1 "$log"))"
    fi
    rm -f "$log"
  else
    browser_note="chromium and chromium-driver are not installed and cannot be here (root and apt-get needed)"
  fi
fi
if [ -n "$browser_note" ]; then
  echo "WARNING: $browser_note: the browser tests of the serving page will be SKIPPED${CI:+ (CI: they FAIL)}" >&2
fi
# The Label Studio tests (tests/test_label_studio_real.py) drive a real Label Studio from a venv of its own,
# .venv-label-studio: its pins would fight ours, so it is never in .venv nor a dependency of the package. Made
# here when missing, from PyPI; where that fails the tests skip and say so, and in CI (CI=true) they fail.
label_studio_note=""
if [ ! -x .venv-label-studio/bin/label-studio ]; then
  echo "installing label-studio 1.23.2 and label-studio-sdk 2.1.2 into .venv-label-studio (pip)"
  log=$(mktemp)
  if ! (python3 -m venv .venv-label-studio && .venv-label-studio/bin/pip install -q label-studio==1.23.2 label-studio-sdk==2.1.2) > "$log" 2>&1; then
    label_studio_note="could not install label-studio into .venv-label-studio ($(tail -n 1 "$log"))"
  fi
  rm -f "$log"
fi
if [ -z "$label_studio_note" ] && ! .venv/bin/python tests/helpers/label_studio.py > /dev/null; then
  label_studio_note="label-studio init could not make the tests' data directory (python tests/helpers/label_studio.py)"
fi
if [ -n "$label_studio_note" ]; then
  echo "WARNING: $label_studio_note: the Label Studio tests will be SKIPPED${CI:+ (CI: they FAIL)}" >&2
fi
# The runtime install's tests (tests/test_runtime_install.py) run the checkout's code on .venv-runtime: `pip install .`
# without extras (no Paddle), made here when missing or older than setup.cfg or constraints.txt, from PyPI; where that
# fails the tests skip and say so, and in CI (CI=true) they fail.
runtime_note=""
runtime_stamp=.venv-runtime/.ernie_ft-installed
if [ ! -f "$runtime_stamp" ] || [ constraints.txt -nt "$runtime_stamp" ] || [ setup.cfg -nt "$runtime_stamp" ]; then
  echo "installing ernie_ft without extras (the runtime) into .venv-runtime (pip)"
  log=$(mktemp)
  if (rm -rf .venv-runtime && python3 -m venv .venv-runtime && .venv-runtime/bin/pip install -q . -c constraints.txt \
      && touch "$runtime_stamp") > "$log" 2>&1; then
    rm -rf build
  else
    runtime_note="could not install the runtime into .venv-runtime ($(tail -n 1 "$log"))"
  fi
  rm -f "$log"
fi
if [ -n "$runtime_note" ]; then
  echo "WARNING: $runtime_note: the runtime install's tests will be SKIPPED${CI:+ (CI: they FAIL)}" >&2
fi
# The Ray Data and Spark tests (tests/test_scale_engines.py) run docs/examples/scale/ on .venv-scale: the runtime
# (`pip install .` without extras) with ray[data], pyspark and pandas<3 (which pyspark 4 wants) beside it, never
# dependencies of the package, and not in .venv-runtime, whose size and contents its own tests check. Made here when
# missing or older than setup.cfg or constraints.txt; where that fails (or, for Spark, Java is missing) those tests
# skip and say so, and in CI (CI=true) they fail.
scale_note=""
scale_stamp=.venv-scale/.ernie_ft-installed
if [ ! -f "$scale_stamp" ] || [ constraints.txt -nt "$scale_stamp" ] || [ setup.cfg -nt "$scale_stamp" ]; then
  echo "installing ernie_ft without extras, ray[data] 2.60.0 and pyspark 4.3.0 into .venv-scale (pip)"
  log=$(mktemp)
  pins=$(mktemp)
  grep -v '^pandas==' constraints.txt > "$pins"
  if (rm -rf .venv-scale && python3 -m venv .venv-scale && .venv-scale/bin/pip install -q . 'ray[data]==2.60.0' \
      'pyspark==4.3.0' 'pandas<3' -c "$pins" && touch "$scale_stamp") > "$log" 2>&1; then
    rm -rf build
  else
    scale_note="could not install ray and pyspark into .venv-scale ($(tail -n 1 "$log"))"
  fi
  rm -f "$log" "$pins"
fi
if [ -n "$scale_note" ]; then
  echo "WARNING: $scale_note: the Ray and Spark tests will be SKIPPED${CI:+ (CI: they FAIL)}" >&2
fi
if ! command -v java > /dev/null; then
  echo "WARNING: no Java runtime (java) for Spark: the Spark test will be SKIPPED${CI:+ (CI: it FAILS)}" >&2
fi
status=0
.venv/bin/python -m pytest tests -n 2 --dist loadfile --no-loadscope-reorder "$@" || status=$?
if [ -n "$browser_note" ]; then
  echo "WARNING: $browser_note: the browser tests of the serving page did not run${CI:+ (CI: they failed)}" >&2
fi
if [ -n "$label_studio_note" ]; then
  echo "WARNING: $label_studio_note: the Label Studio tests did not run${CI:+ (CI: they failed)}" >&2
fi
if [ -n "$runtime_note" ]; then
  echo "WARNING: $runtime_note: the runtime install's tests did not run${CI:+ (CI: they failed)}" >&2
fi
if [ -n "$scale_note" ]; then
  echo "WARNING: $scale_note: the Ray and Spark tests did not run${CI:+ (CI: they failed)}" >&2
fi
exit "$status"
