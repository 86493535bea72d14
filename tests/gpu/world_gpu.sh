#!/bin/sh
# A world of 2 qdpd ranks on GPUs against a single-rank qdpd (tests/gpu/test_world_gpu.py): the
# cross-rank amplitude norm and iqp global-bit stage on the CUDA backend. Each rank uses GPU
# $QDP_WORLD_GPU (default 0: on a one-GPU machine both ranks share it).
# Usage: world_gpu.sh QDPD QDP_DESC [PYTHON]     Exits 77 without a GPU.
set -u
qdpd=$1
desc=$2
python=${3:-python3}
here=$(cd "$(dirname "$0")" && pwd)
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "world_gpu: SKIP: no GPU"
  exit 77
fi
QDP_DESC=$desc PYTHONPATH="$here/../integration" \
  QDP_WORLD_DEVICES="${QDP_WORLD_GPU:-0}" QDP_REF_DEVICES="${QDP_WORLD_GPU:-0}" \
  sh "$here/../mpi/with_world.sh" 2 "$qdpd" -- "$python" "$here/test_world_gpu.py"
