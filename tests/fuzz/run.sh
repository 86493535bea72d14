#!/bin/sh
# The libFuzzer harnesses, built in build-fuzz with clang, ASan and UBSan (-Dfuzz=true):
#   sh tests/fuzz/run.sh                  every harness for QDP_FUZZ_SECONDS (15) as meson tests
#                                         of suite 'fuzz' (what tests/run-all.sh and CI run)
#   sh tests/fuzz/run.sh HARNESS [ARGS]   one harness, long: no time limit unless ARGS give one,
#                                         e.g. -runs=10000000, -max_total_time=3600, -jobs=4
# HARNESS is fuzz_request, fuzz_npy, fuzz_reply or fuzz_fetch. Crashing inputs are kept in
# build-fuzz/fuzz-artifacts/. See tests/fuzz/README.md.
set -eu
cd "$(dirname "$0")/../.."
cc=${QDP_FUZZ_CC:-clang-14}
if [ ! -f build-fuzz/build.ninja ]; then
  # b_lundef=false: with clang the sanitizer runtimes are linked into executables only, so the
  # shared libqdp has their symbols undefined until it is loaded.
  CC=$cc meson setup build-fuzz -Dfuzz=true -Dcuda=disabled -Db_sanitize=address,undefined \
    -Db_lundef=false -Dc_args=-fno-sanitize-recover=all -Dbuildtype=debugoptimized >&2
fi
harnesses="fuzz_request fuzz_npy fuzz_reply fuzz_fetch"
targets=""
for h in $harnesses; do
  targets="$targets tests/fuzz/$h"
done
# Only the harnesses: the rest of this configuration is never run.
# shellcheck disable=SC2086  # targets is a word list on purpose
ninja -C build-fuzz $targets >&2
artifacts=$(pwd)/build-fuzz/fuzz-artifacts
if [ $# -eq 0 ]; then
  QDP_FUZZ_ARTIFACTS=$artifacts meson test -C build-fuzz --no-rebuild --suite fuzz --print-errorlogs
else
  h=$1
  shift
  [ -x "build-fuzz/tests/fuzz/$h" ] || { echo "run.sh: no harness '$h' (one of: $harnesses)" >&2; exit 2; }
  QDP_FUZZ_ARTIFACTS=$artifacts QDP_FUZZ_SECONDS=${QDP_FUZZ_SECONDS:-0} \
    sh tests/fuzz/fuzz-one.sh "build-fuzz/tests/fuzz/$h" "tests/fuzz/corpus/$h" "$@"
fi
