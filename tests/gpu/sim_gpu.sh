#!/bin/bash
# qdp.sim on a GPU node: tests/gpu/test_sim_gpu.py against qdpd of an existing build folder (which
# the test starts with --devices auto; its two-GPU test skips on one GPU). The package is imported
# from the tree; qdpd runs with the carried libraries (.gpu/lib). Python keeps the caller's
# LD_LIBRARY_PATH and PYTHONPATH, which must let it import cuStateVec's bindings and load
# libcustatevec.so.1 and its cuBLAS (see the header of tests/gpu/test_sim_gpu.py); without them
# every test is skipped saying what to install.
# Usage: tests/gpu/sim_gpu.sh BUILD_DIR [pytest args...]
set -uo pipefail
build=$(cd "${1:?usage: sim_gpu.sh BUILD_DIR [pytest args...]}" && pwd)
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$root/.gpu/lib" "$build/daemon/qdpd" \
  > "$dir/qdpd"
chmod +x "$dir/qdpd"
cd "$dir"
QDPD="$dir/qdpd" QDP_FRESH_DESC="$build/proto/qdp.desc" \
  PYTHONPATH="$root/client/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1 \
  python3 -m pytest -q -p no:cacheprovider -rs -s "$root/tests/gpu/test_sim_gpu.py" "$@"
