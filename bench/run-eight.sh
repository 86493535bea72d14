#!/bin/bash
# The all-GPU run (written for an 8 x H200 machine; runs on any power-of-two GPU count, and was
# checked on two): the topology qdp detects and the placement it chooses, the largest angle states
# the GPUs hold together (36 qubits complex128 and 37 qubits complex64 on eight H200s) described
# and read back in part, strong scaling of amplitude complex128 (2^32 on eight GPUs, 2^31 below)
# over 1, 2, 4, 8 GPUs of one process and over one process per GPU, the norm all-gather at each
# count, iqp 30 qubits over 1, 2, 4, 8 GPUs, and a world of one rank per GPU (its NCCL group:
# the norm inside a job, iqp's stages between ranks). Builds nothing; writes each output under
# OUT_DIR.
# Usage: bench/run-eight.sh BUILD_DIR OUT_DIR     (LD_LIBRARY_PATH pointing at .gpu/lib)
set -uo pipefail
build=${1:?usage: run-eight.sh BUILD_DIR OUT_DIR}
out=${2:?usage: run-eight.sh BUILD_DIR OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
rc=0
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  nvidia-smi topo -m
  # QDP_COMMIT: the commit the tree was built from (a copied tree may carry a stale .git).
  echo "commit ${QDP_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
} > "$out/gpu.txt" 2>&1
cat "$out/gpu.txt"

# The daemon's view: the mesh, its link matrix, and the even plan of a state over every GPU.
d=$(mktemp -d)
"$build/daemon/qdpd" --socket "$d/s" --devices auto 2>"$out/qdpd.log" &
qpid=$!
for _ in $(seq 600); do
  grep -q "listening on unix:" "$out/qdpd.log" 2>/dev/null && break
  sleep 0.1
done
{
  "$build/client/qdpctl/qdpctl" --socket "$d/s" status
  "$build/client/qdpctl/qdpctl" --socket "$d/s" plan --encoding iqp-z --qubits 30 --policy even \
    --values "$(seq -s, 0.01 0.01 0.30)"
} 2>&1 | tee "$out/status.txt"
kill -TERM "$qpid"
wait "$qpid" || rc=1
rm -rf "$d"

echo "== mesh_bench capacity_max, scaling, iqp over $ngpu GPUs"
timeout 580 "$build/bench/mesh_bench" capacity_max,scaling,iqp 2>&1 | tee "$out/mesh_bench.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1

echo "== $ngpu processes of one GPU each"
timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -n "$ngpu" \
  -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE "$build/bench/mesh_bench" ranks 2>&1 |
  tee "$out/ranks.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1

# The same through the coordinator (world_encode, as qdpd's Encode runs it): a world of one rank
# per GPU joined in one NCCL group; the norm collective inside a small amplitude job, and iqp 30
# with its global-bit stages between ranks.
for job in "amplitude --qubits 16 --jobs 2000" "iqp --qubits 30 --jobs 3"; do
  echo "== a world of $ngpu ranks x 1 GPU: $job"
  # shellcheck disable=SC2086  # job is a word list on purpose
  timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -n "$ngpu" \
    -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE "$build/bench/world_bench" --devices local-rank --all \
    --encoding $job 2>&1 | grep "bench op" | tee -a "$out/world.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
done
exit $rc
