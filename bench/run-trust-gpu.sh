#!/bin/bash
# The GPU run after the trust boundary: every GPU test binary and the kernel benchmarks against
# PyTorch (bench/run-gpu.sh), the GPU daemon end to end with clients handing over their files and
# regions, a pinned region cut under concurrent jobs (tests/gpu/daemon_gpu.sh), and a world of two
# ranks on the GPUs whose input file each rank opens and checks itself (tests/gpu/world_gpu.sh).
# Builds nothing; writes each output under OUT_DIR.
# Usage: bench/run-trust-gpu.sh BUILD_DIR OUT_DIR   (LD_LIBRARY_PATH pointing at .gpu/lib)
set -uo pipefail
build=${1:?usage: run-trust-gpu.sh BUILD_DIR OUT_DIR}
out=${2:?usage: run-trust-gpu.sh BUILD_DIR OUT_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
rc=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. "$root/bench/run-common.sh"
TAIL=60 run kernels-and-benchmarks 900 bash "$root/bench/run-gpu.sh" "$build" "$out/gpu"
TAIL=60 run daemon 600 bash "$root/tests/gpu/daemon_gpu.sh" "$build" "$out/daemon"
py=$(env -u LD_LIBRARY_PATH which python3)
run world_gpu 300 sh "$root/tests/gpu/world_gpu.sh" "$build/daemon/qdpd" "$build/proto/qdp.desc" \
  "$py" "$build/tests/gpu/views_client"
exit $rc
