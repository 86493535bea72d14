#!/bin/bash
# The GPU run of the Python client and the daemon paths under it: every GPU test binary of the NEW
# build, the package's suite on the GPU node (tests/gpu/python_gpu.sh), the Python benchmark beside
# qumat-qdp (bench/python_bench.py; qumat_qdp importable from QUMAT_SITE when set), and the OLD
# and NEW builds' C figures side by side (bench/run-side-by-side.sh, ending in bench/regress.py).
# STEPS picks some of "tests python bench side" (all by default), so that the run can be cut into
# calls. Builds nothing.
# Usage: bench/run-python-gpu.sh OLD_BUILD NEW_BUILD OUT_DIR   (LD_LIBRARY_PATH at .gpu/lib)
set -uo pipefail
old=${1:?usage: run-python-gpu.sh OLD_BUILD NEW_BUILD OUT_DIR}
new=${2:?usage: run-python-gpu.sh OLD_BUILD NEW_BUILD OUT_DIR}
out=${3:?usage: run-python-gpu.sh OLD_BUILD NEW_BUILD OUT_DIR}
steps=" ${STEPS:-tests python bench side} "
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
[[ $steps == *" python "* ]] && TAIL=25 run python_gpu 500 bash "$root/tests/gpu/python_gpu.sh" "$new"
if [[ $steps == *" bench "* ]]; then
  TAIL=80 run python_bench 550 env -u LD_LIBRARY_PATH \
    PYTHONPATH="${QUMAT_SITE:+$QUMAT_SITE:}$root/client/python" \
    python3 "$root/bench/python_bench.py" "$new" ${BENCH_ARGS:-}
fi
if [[ $steps == *" side "* ]]; then
  bash "$root/bench/run-side-by-side.sh" "$old" "$new" "$out/side" "${ROUNDS:-2}" || rc=1
fi
exit $rc
