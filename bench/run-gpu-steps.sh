#!/bin/bash
# A GPU run in steps, each into OUT_DIR: every GPU test binary of the NEW build ("tests"), the GPU
# daemon end to end (tests/gpu/daemon_gpu.sh, "daemon"), a world of two ranks on the GPU
# (tests/gpu/world_gpu.sh, "world"), the Python package's suite on the GPU node
# (tests/gpu/python_gpu.sh, "python"), the Python benchmark beside qumat-qdp
# (bench/python_bench.py with BENCH_ARGS; qumat_qdp importable from QUMAT_SITE when set, "bench"),
# qdp.torch's loader beside qumat-qdp's (bench/loader_bench.py with LOADER_ARGS, "loader"), and
# the OLD and NEW builds' C figures side by side (bench/run-side-by-side.sh, ending in
# bench/regress.py, ROUNDS rounds, "side"); and, only when STEPS names it, the Python side on
# every GPU of the node (bench/two_gpu_bench.py with TWO_ARGS: shards, gather, DDP loading, "two"),
# and qdp.sim with cuStateVec (tests/gpu/sim_gpu.sh, then bench/sim_bench.py with SIM_ARGS, its
# JSON summary in OUT_DIR/sim_bench.json, "sim"; Python runs with SIM_LD_LIBRARY_PATH and
# SIM_PYTHONPATH, which must reach libcustatevec.so.1, its cuBLAS and cuStateVec's bindings).
# STEPS picks some of them (all but "two" and "sim" by default) so that the run can be cut into
# calls. It ends with bench/regress.py --common against the committed baseline of the GPU's kind
# (BASELINE, default bench/baselines/KIND.txt, KIND the model's second word: h200 for an "NVIDIA
# H200"; docs/performance.md says how to write or move one): the figures this run made against the
# same ones there. Builds nothing.
# Usage: bench/run-gpu-steps.sh OLD_BUILD NEW_BUILD OUT_DIR   (LD_LIBRARY_PATH at .gpu/lib)
set -uo pipefail
old=${1:?usage: run-gpu-steps.sh OLD_BUILD NEW_BUILD OUT_DIR}
new=${2:?usage: run-gpu-steps.sh OLD_BUILD NEW_BUILD OUT_DIR}
out=${3:?usage: run-gpu-steps.sh OLD_BUILD NEW_BUILD OUT_DIR}
steps=" ${STEPS:-tests daemon world python bench loader side} "
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
rc=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$root/bench/run-common.sh"
py=$(env -u LD_LIBRARY_PATH which python3)
if [[ $steps == *" tests "* ]]; then
  for t in "$new"/tests/gpu/test_*; do
    [ -f "$t" ] && [ -x "$t" ] || continue
    TAIL=6 run "$(basename "$t")" 400 "$t"
  done
fi
[[ $steps == *" daemon "* ]] && TAIL=30 run daemon 400 bash "$root/tests/gpu/daemon_gpu.sh" "$new" "$out/daemon"
if [[ $steps == *" world "* ]]; then
  run world_gpu 300 sh "$root/tests/gpu/world_gpu.sh" "$new/daemon/qdpd" "$new/proto/qdp.desc" \
    "$py" "$new/tests/gpu/views_client"
fi
[[ $steps == *" python "* ]] && TAIL=25 run python_gpu 500 bash "$root/tests/gpu/python_gpu.sh" "$new"
if [[ $steps == *" bench "* ]]; then
  # shellcheck disable=SC2086 # BENCH_ARGS is a list of arguments
  TAIL=80 run python_bench 550 env -u LD_LIBRARY_PATH \
    PYTHONPATH="${QUMAT_SITE:+$QUMAT_SITE:}$root/client/python" \
    "$py" "$root/bench/python_bench.py" "$new" ${BENCH_ARGS:-}
fi
if [[ $steps == *" loader "* ]]; then
  # shellcheck disable=SC2086 # LOADER_ARGS is a list of arguments
  TAIL=80 run loader_bench 580 env -u LD_LIBRARY_PATH \
    PYTHONPATH="${QUMAT_SITE:+$QUMAT_SITE:}$root/client/python" \
    "$py" "$root/bench/loader_bench.py" "$new" ${LOADER_ARGS:-}
fi
if [[ $steps == *" two "* ]]; then
  # shellcheck disable=SC2086 # TWO_ARGS is a list of arguments
  TAIL=20 run two_gpu_bench 580 env -u LD_LIBRARY_PATH PYTHONPATH="$root/client/python" \
    "$py" "$root/bench/two_gpu_bench.py" "$new" ${TWO_ARGS:-}
fi
if [[ $steps == *" sim "* ]]; then
  TAIL=30 run sim_gpu 500 env LD_LIBRARY_PATH="${SIM_LD_LIBRARY_PATH:-}" \
    PYTHONPATH="${SIM_PYTHONPATH:-}" bash "$root/tests/gpu/sim_gpu.sh" "$new"
  # shellcheck disable=SC2086 # SIM_ARGS is a list of arguments
  TAIL=20 run sim_bench 580 env LD_LIBRARY_PATH="${SIM_LD_LIBRARY_PATH:-}" \
    PYTHONPATH="$root/client/python${SIM_PYTHONPATH:+:$SIM_PYTHONPATH}" \
    "$py" "$root/bench/sim_bench.py" "$new" --json "$out/sim_bench.json" ${SIM_ARGS:-}
fi
if [[ $steps == *" side "* ]]; then
  bash "$root/bench/run-side-by-side.sh" "$old" "$new" "$out/side" "${ROUNDS:-2}" || rc=1
fi
kind=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null |
  awk 'NR == 1 {print tolower($2)}')
baseline=${BASELINE:-$root/bench/baselines/${kind:-unknown}.txt}
if [ -e "$baseline" ]; then
  echo "== regress $baseline $out"
  env -u LD_LIBRARY_PATH python3 "$root/bench/regress.py" --common --band "${BASELINE_BAND:-5}" \
    "$baseline" "$out" \
    > "$out/regress-baseline.txt" 2>&1 || rc=1
  tail -n 1 "$out/regress-baseline.txt"
else
  echo "== regress: no baseline $baseline for this GPU (${kind:-none found}): not compared"
fi
exit $rc
