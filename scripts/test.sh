#!/usr/bin/env bash
# Set up, then run the whole test suite (CPU, no network) in two worker processes, each on its
# own share of the cores (tests/conftest.py), which take whole modules in the order tests/conftest.py
# puts them (the slowest first). Extra arguments go to pytest (-n 0: one process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# run_logged COMMAND...: run it with its output in a log; when it fails, print the log's last line (the reason the
# notes below give) and fail.
run_logged() {
  local log status=0
  log=$(mktemp)
  "$@" > "$log" 2>&1 || status=$?
  [ "$status" = 0 ] || tail -n 1 "$log"
  rm -f "$log"
  return "$status"
}
# stale STAMP [PATH...]: the venv whose STAMP this is is missing, or older than setup.cfg, constraints.txt or a file
# under PATH (the package, for a venv that runs its own installed copy of it).
stale() { [ ! -f "$1" ] || [ -n "$(find constraints.txt setup.cfg "${@:2}" -newer "$1" -print -quit)" ]; }
# venv_from_checkout DIR PIP_ARGS...: DIR made afresh with `pip install . PIP_ARGS` (no extras), then stamped.
venv_from_checkout() {
  local dir=$1
  shift
  rm -rf "$dir" && python3 -m venv "$dir" && "$dir/bin/pip" install -q . "$@" && touch "$dir/.ernie_ft-installed" \
    && rm -rf build
}
# warn NOTE WHAT: a loud line when NOTE (why some tests cannot run) is set.
warn() { [ -z "$1" ] || echo "WARNING: $1: $2" >&2; }
# The browser tests of the serving page drive Debian's Chromium; install it where this machine allows
# (root, apt-get). Where it cannot be had they skip, and say so loudly: here, in pytest's summary (the
# skip reason) and again after it. In CI (CI=true) they fail instead (tests/test_serve.py): CI's machines
# reach Debian's packages, so a missing Chromium there is a broken setup, and a skip would let a broken
# page land unseen.
browser_note=""
if ! command -v chromedriver > /dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    echo "installing chromium and chromium-driver for the browser tests (apt-get)"
    why=$(run_logged bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
      chromium-driver fonts-noto-cjk') || browser_note="could not install chromium and chromium-driver with apt-get ($why)"
  else
    browser_note="chromium and chromium-driver are not installed and cannot be here (root and apt-get needed)"
  fi
fi
warn "$browser_note" "the browser tests of the serving page will be SKIPPED${CI:+ (CI: they FAIL)}"
# The Label Studio tests (tests/test_label_studio_real.py) drive a real Label Studio from a venv of its own,
# .venv-label-studio: its pins would fight ours, so it is never in .venv nor a dependency of the package. Made
# here when missing, from PyPI; where that fails the tests skip and say so, and in CI (CI=true) they fail.
label_studio_note=""
if [ ! -x .venv-label-studio/bin/label-studio ]; then
  echo "installing label-studio 1.23.2 and label-studio-sdk 2.1.2 into .venv-label-studio (pip)"
  why=$(run_logged bash -c 'python3 -m venv .venv-label-studio && .venv-label-studio/bin/pip install -q \
    label-studio==1.23.2 label-studio-sdk==2.1.2') || label_studio_note="could not install label-studio into .venv-label-studio ($why)"
fi
if [ -z "$label_studio_note" ] && ! .venv/bin/python tests/helpers/label_studio.py > /dev/null; then
  label_studio_note="label-studio init could not make the tests' data directory (python tests/helpers/label_studio.py)"
fi
warn "$label_studio_note" "the Label Studio tests will be SKIPPED${CI:+ (CI: they FAIL)}"
# The runtime install's tests (tests/test_runtime_install.py) run the checkout's code on .venv-runtime: `pip install .`
# without extras (no Paddle), made here when missing or older than setup.cfg or constraints.txt, from PyPI; where that
# fails the tests skip and say so, and in CI (CI=true) they fail.
runtime_note=""
if stale .venv-runtime/.ernie_ft-installed ernie_ft; then  # its tests run the installed copy: rebuilt on any change
  echo "installing ernie_ft without extras (the runtime) into .venv-runtime (pip)"
  why=$(run_logged venv_from_checkout .venv-runtime -c constraints.txt) \
    || runtime_note="could not install the runtime into .venv-runtime ($why)"
fi
warn "$runtime_note" "the runtime install's tests will be SKIPPED${CI:+ (CI: they FAIL)}"
# The Ray Data and Spark tests (tests/test_scale_engines.py) run docs/examples/scale/ on .venv-scale: the runtime
# (`pip install .` without extras) with ray[data], pyspark and pandas<3 (which pyspark 4 wants) beside it, never
# dependencies of the package, and not in .venv-runtime, whose size and contents its own tests check. Made here when
# missing or older than setup.cfg or constraints.txt; where that fails (or, for Spark, Java is missing) those tests
# skip and say so, and in CI (CI=true) they fail.
scale_note=""
if stale .venv-scale/.ernie_ft-installed; then
  echo "installing ernie_ft without extras, ray[data] 2.60.0 and pyspark 4.3.0 into .venv-scale (pip)"
  pins=$(mktemp)
  grep -v '^pandas==' constraints.txt > "$pins"
  why=$(run_logged venv_from_checkout .venv-scale 'ray[data]==2.60.0' 'pyspark==4.3.0' 'pandas<3' -c "$pins") \
    || scale_note="could not install ray and pyspark into .venv-scale ($why)"
  rm -f "$pins"
fi
warn "$scale_note" "the Ray and Spark tests will be SKIPPED${CI:+ (CI: they FAIL)}"
if ! command -v java > /dev/null; then
  echo "WARNING: no Java runtime (java) for Spark: the Spark test will be SKIPPED${CI:+ (CI: it FAILS)}" >&2
fi
# Python keeps the modules it compiles (ernie_ft's, and pytest's rewritten tests) in __pycache__ folders, which git
# ignores, even where the environment says not to write them: each pytest worker's collection then takes half the CPU
# (3.8 s against 7.2 s on the Xeon of docs/benchmarks.md), and the suite's other interpreters skip compiling ernie_ft.
unset PYTHONDONTWRITEBYTECODE
status=0
.venv/bin/python -m pytest tests -n 2 --dist loadfile --no-loadscope-reorder "$@" || status=$?
warn "$browser_note" "the browser tests of the serving page did not run${CI:+ (CI: they failed)}"
warn "$label_studio_note" "the Label Studio tests did not run${CI:+ (CI: they failed)}"
warn "$runtime_note" "the runtime install's tests did not run${CI:+ (CI: they failed)}"
warn "$scale_note" "the Ray and Spark tests did not run${CI:+ (CI: they failed)}"
exit "$status"
