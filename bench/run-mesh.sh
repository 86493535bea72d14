#!/bin/bash
# The two-GPU run: the topology the driver reports, the runtime's GPU suites (two-GPU sharding over
# NCCL and the host fallback, registered input, views and gather), the two-GPU benchmark, views
# opened from other processes, and the daemon end to end on every GPU. Builds nothing; writes each output under OUT_DIR.
# Usage: bench/run-mesh.sh BUILD_DIR OUT_DIR     (LD_LIBRARY_PATH pointing at .gpu/lib)
set -uo pipefail
build=${1:?usage: run-mesh.sh BUILD_DIR OUT_DIR}
out=${2:?usage: run-mesh.sh BUILD_DIR OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
rc=0
. "$root/bench/run-common.sh"
for t in ${QDP_MESH_TESTS:-test_runtime_cuda test_views_cuda}; do
  run "$t" 300 "$build/tests/gpu/$t"
done
run mesh_bench 300 "$build/bench/mesh_bench" ${QDP_MESH_BENCH:-}
bash "$root/tests/gpu/views_gpu.sh" "$build" "$out/views" > "$out/views.txt" 2>&1 || rc=1
echo "== views"; tail -n 40 "$out/views.txt"
# Small batches from a registered region through a one-GPU daemon (the single-GPU figure), then
# through one owning both GPUs (batches split by sample).
for devs in 0 0,1; do
  d=$(mktemp -d)
  "$build/daemon/qdpd" --socket "$d/s" --devices "$devs" 2>"$out/qdpd-shm-$devs.log" &
  qpid=$!
  for _ in $(seq 300); do
    grep -q "listening on unix:" "$out/qdpd-shm-$devs.log" 2>/dev/null && break
    sleep 0.1
  done
  for clients in 4 16; do
    echo "== shm batches, devices $devs, $clients clients"
    QDP_TARGET="unix:$d/s" timeout 60 "$build/bench/qdpd_bench" --shm-batch 16:64 \
      --clients "$clients" --seconds 3 | tee -a "$out/shm-batch.txt" || rc=1
  done
  kill -TERM "$qpid"
  wait "$qpid" || rc=1
  rm -rf "$d"
done
# Placement on a GPU another process is using: 100 GiB taken on cuda:1 by PyTorch, then a
# capacity plan over both GPUs gives cuda:1 the smaller shard.
d=$(mktemp -d)
env -u LD_LIBRARY_PATH python3 -c "
import time, torch
x = torch.empty(100 * 2**30, dtype=torch.uint8, device='cuda:1')
open('$d/held', 'w').close()
time.sleep(60)" &
hog=$!
for _ in $(seq 300); do [ -e "$d/held" ] && break; sleep 0.1; done
"$build/daemon/qdpd" --socket "$d/s" --devices 0,1 2>"$out/qdpd-shared.log" &
qpid=$!
for _ in $(seq 300); do
  grep -q "listening on unix:" "$out/qdpd-shared.log" 2>/dev/null && break
  sleep 0.1
done
{
  echo "== a GPU shared with another process (100 GiB held on cuda:1)"
  "$build/client/qdpctl/qdpctl" --socket "$d/s" status
  "$build/client/qdpctl/qdpctl" --socket "$d/s" plan --encoding angle --qubits 33 \
    --policy capacity --values "$(seq -s, 0.1 0.1 3.3)"
  "$build/client/qdpctl/qdpctl" --socket "$d/s" plan --encoding angle --qubits 34 --policy auto \
    --values "$(seq -s, 0.1 0.1 3.4)"
} 2>&1 | tee "$out/shared-gpu.txt"
kill -TERM "$qpid"
wait "$qpid" || rc=1
kill "$hog" 2>/dev/null
wait "$hog" 2>/dev/null
rm -rf "$d"
if [ -z "${QDP_MESH_NO_DAEMON:-}" ]; then
  bash "$root/tests/gpu/daemon_gpu.sh" "$build" "$out/daemon" > "$out/daemon.txt" 2>&1 || rc=1
  echo "== daemon"; head -n 40 "$out/daemon.txt"
fi
exit $rc
