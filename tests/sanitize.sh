#!/bin/sh
# The unit and integration suites again, built with ASan + UBSan into build-asan (CPU backend
# only: the CUDA runtime and ASan do not share an address space well, and the GPU suite skips
# here anyway). The mpi suite stays out: Open MPI's own start-up leaks and races would drown the
# project's; so does the wheel suite, which builds and runs binaries of its own, not this build's.
# Any report fails the test that made it: UBSan is built not to recover, and a leak at exit turns
# the exit status non-zero (tests/lsan.supp lists the third-party leaks ignored).
#   sh tests/sanitize.sh [MESON_TEST_ARGS...]
set -eu
cd "$(dirname "$0")/.."
if [ ! -f build-asan/build.ninja ]; then
  # b_lundef=false: the sanitizer runtimes resolve in the executables, not in the shared libqdp.
  meson setup build-asan -Dcuda=disabled -Db_sanitize=address,undefined -Db_lundef=false \
    -Dc_args=-fno-sanitize-recover=all >&2
fi
ninja -C build-asan >&2
supp=$(pwd)/tests/lsan.supp
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1} \
LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$supp:print_suppressions=0} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
  meson test -C build-asan --no-suite mpi --no-suite fuzz --no-suite wheel --print-errorlogs "$@"
