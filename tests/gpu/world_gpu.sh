#!/bin/sh
# A world of 2 qdpd ranks on GPUs against a single-rank qdpd (tests/gpu/test_world_gpu.py): the
# cross-rank amplitude norm and iqp split over ranks (no exchange) on the CUDA backend. With two GPUs or more each
# rank owns its own (--devices local-rank) and the reference is one rank owning both (2 ranks x 1
# GPU against 1 rank x 2 GPUs); with one GPU both ranks share it and the reference uses it too.
# With a GPU per rank and VIEWS_CLIENT given, it then opens the views of a state across both
# ranks from a process of its own (tests/gpu/views_client world).
# Usage: world_gpu.sh QDPD QDP_DESC [PYTHON [VIEWS_CLIENT]]     Exits 77 without a GPU.
set -u
qdpd=$1
desc=$2
python=${3:-python3}
views=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "world_gpu: SKIP: no GPU"
  exit 77
fi
if [ "$(nvidia-smi -L | grep -c '^GPU ')" -ge 2 ]; then
  world=local-rank ref=0,1
else
  world=0 ref=0
fi
cmd='"$0" "$1"'
if [ -n "$views" ] && [ "$world" = local-rank ]; then
  cmd="$cmd"' && echo "== views across ranks" && "$2" world'
fi
QDP_DESC=$desc PYTHONPATH="$here/../integration" QDP_WORLD_DEVICES=$world QDP_REF_DEVICES=$ref \
  sh "$here/../mpi/with_world.sh" 2 "$qdpd" -- sh -c "$cmd" "$python" "$here/test_world_gpu.py" \
  "$views"
