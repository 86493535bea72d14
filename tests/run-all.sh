#!/bin/sh
# Installs what is missing (deploy/install-deps.sh --tests), builds, and runs every test suite
# (unit, gpu, integration, mpi, wheel; GPU tests skip without a GPU) in ./build, and the Python
# package's tests against that build (tests/python.sh, pytest in build/pyenv, with packages from
# PyPI); then the unit and integration suites again under ASan + UBSan in ./build-asan
# (tests/sanitize.sh), and each libFuzzer harness for QDP_FUZZ_SECONDS (15) in ./build-fuzz
# (tests/fuzz/run.sh). Meson's summary follows each step; the per-test logs are
# <build folder>/meson-logs/. Arguments go to the first step's meson test (e.g. --suite unit);
# QDP_PYTHON=0, QDP_SANITIZE=0 and QDP_FUZZ=0 leave out the Python tests, the second and the third;
# QDP_WHEEL=0 leaves out the wheel suite (tests/wheel: `pip wheel .`, which QDP_PYTHON=0 skips too,
# since pip fetches meson-python from PyPI).
set -eu
cd "$(dirname "$0")/.."
sh deploy/install-deps.sh --tests
sh deploy/build.sh
# .ci/run counts the four logs: none may be left from an earlier run.
rm -f build/meson-logs/testlog.json build/python-logs/junit.xml \
  build-asan/meson-logs/testlog.json build-fuzz/meson-logs/testlog.json
rc=0
meson test -C build --print-errorlogs "$@" || rc=1
if [ "${QDP_PYTHON:-1}" != 0 ]; then
  sh tests/python.sh || rc=1
fi
if [ "${QDP_SANITIZE:-1}" != 0 ]; then
  sh tests/sanitize.sh || rc=1
fi
if [ "${QDP_FUZZ:-1}" != 0 ]; then
  sh tests/fuzz/run.sh || rc=1
fi
exit $rc
