#!/bin/bash
# The Python package's tests (client/python/tests) on a GPU node: the CPU-backend daemon tests and
# the GPU ones (views as CUDA tensors, CUDA tensor input, leases), against qdpd of an existing
# build folder. The package is imported from the tree (that machine has no package registry);
# qdpd runs with the carried libraries (.gpu/lib), Python without them.
# Usage: tests/gpu/python_gpu.sh BUILD_DIR
set -uo pipefail
build=$(cd "${1:?usage: python_gpu.sh BUILD_DIR}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$root/.gpu/lib" "$build/daemon/qdpd" \
  > "$dir/qdpd"
chmod +x "$dir/qdpd"
cd "$dir"
env -u LD_LIBRARY_PATH QDPD="$dir/qdpd" QDP_FRESH_DESC="$build/proto/qdp.desc" \
  PYTHONPATH="$root/client/python" PYTHONDONTWRITEBYTECODE=1 \
  python3 -m pytest -q -p no:cacheprovider -rs "$root/client/python/tests"
