#!/bin/bash
# The GPU run after a change that must not change behaviour or speed: every GPU test binary of the
# NEW build, the GPU daemon end to end (tests/gpu/daemon_gpu.sh) and a world of two ranks on the
# GPU (tests/gpu/world_gpu.sh), then the OLD and NEW builds' figures side by side
# (bench/run-side-by-side.sh, which ends with bench/regress.py). STEPS picks some of "tests daemon
# world side" (all four by default) so that the run can be cut into calls. Builds nothing.
# Usage: bench/run-refactor-gpu.sh OLD_BUILD NEW_BUILD OUT_DIR   (LD_LIBRARY_PATH at .gpu/lib)
set -uo pipefail
old=${1:?usage: run-refactor-gpu.sh OLD_BUILD NEW_BUILD OUT_DIR}
new=${2:?usage: run-refactor-gpu.sh OLD_BUILD NEW_BUILD OUT_DIR}
out=${3:?usage: run-refactor-gpu.sh OLD_BUILD NEW_BUILD OUT_DIR}
steps=" ${STEPS:-tests daemon world side} "
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
rc=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$root/bench/run-common.sh"
if [[ $steps == *" tests "* ]]; then
  for t in "$new"/tests/gpu/test_*; do
    [ -f "$t" ] && [ -x "$t" ] || continue
    TAIL=6 run "$(basename "$t")" 400 "$t"
  done
fi
[[ $steps == *" daemon "* ]] && TAIL=30 run daemon 400 bash "$root/tests/gpu/daemon_gpu.sh" "$new" "$out/daemon"
if [[ $steps == *" world "* ]]; then
  py=$(env -u LD_LIBRARY_PATH which python3)
  run world_gpu 300 sh "$root/tests/gpu/world_gpu.sh" "$new/daemon/qdpd" "$new/proto/qdp.desc" \
    "$py" "$new/tests/gpu/views_client"
fi
if [[ $steps == *" side "* ]]; then
  bash "$root/bench/run-side-by-side.sh" "$old" "$new" "$out/side" "${ROUNDS:-2}" || rc=1
fi
exit $rc
