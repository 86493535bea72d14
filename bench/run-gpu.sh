#!/bin/bash
# Runs every GPU test binary and both benchmarks (qdpk_bench, torch_ref.py) from an existing build
# folder — it builds nothing — writes each output under the output folder, and prints the
# comparison table last.
#
# Usage: bench/run-gpu.sh BUILD_DIR [OUT_DIR]     (OUT_DIR defaults to $OUT)
# Each step has a time limit (QDP_TEST_TIMEOUT, QDP_BENCH_TIMEOUT seconds) so that one stuck step
# still leaves the others' output.
# On the GPU machine, start with LD_LIBRARY_PATH pointing at the carried libraries (.gpu/lib);
# Python runs without it, on that machine's own libraries.
set -uo pipefail
build=${1:?usage: run-gpu.sh BUILD_DIR [OUT_DIR]}
out=${2:-${OUT:?set OUT or pass OUT_DIR}}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
rc=0

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,memory.total,power.limit \
    --format=csv 2>&1
  echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} > "$out/gpu.txt"
cat "$out/gpu.txt"

for t in "$build"/tests/gpu/test_*; do
  [ -f "$t" ] && [ -x "$t" ] || continue
  name=$(basename "$t")
  start=$(date +%s)
  CK_FORK=no timeout "${QDP_TEST_TIMEOUT:-400}" "$t" > "$out/$name.txt" 2>&1
  r=$?
  echo "== $name: exit $r ($(( $(date +%s) - start )) s)"
  grep -v '^ *[0-9.]* s  ' "$out/$name.txt" | tail -n 15
  [ $r -eq 0 ] || rc=1
done

echo "== qdpk_bench"
if ! timeout "${QDP_BENCH_TIMEOUT:-300}" "$build/bench/qdpk_bench" > "$out/qdpk_bench.txt" 2>&1; then
  rc=1
fi
cat "$out/qdpk_bench.txt"

echo "== torch_ref.py"
if ! env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 timeout "${QDP_BENCH_TIMEOUT:-300}" \
  python3 "$root/bench/torch_ref.py" > "$out/torch_ref.txt" 2>&1; then
  rc=1
fi
cat "$out/torch_ref.txt"

echo "== comparison"
env -u LD_LIBRARY_PATH python3 "$root/bench/compare.py" "$out/qdpk_bench.txt" "$out/torch_ref.txt" \
  | tee "$out/compare.txt"
exit $rc
