#!/bin/sh
# Copies what the GPU machine runs out of a build folder (the daemon, qdpctl, libqdp, the GPU tests
# and the views client, the benchmarks, the descriptor set) into a slim folder with the same
# layout, so the build travels in a few MiB instead of the whole tree of objects.
# Usage: bench/slim-build.sh BUILD_DIR SLIM_DIR
set -eu
src=${1:?usage: slim-build.sh BUILD_DIR SLIM_DIR}
dst=${2:?usage: slim-build.sh BUILD_DIR SLIM_DIR}
rm -rf "$dst"
for f in daemon/qdpd client/qdpctl/qdpctl 'client/libqdp/libqdp.so*' bench/qdpd_bench \
  bench/qdpk_bench bench/mesh_bench bench/world_bench proto/qdp.desc 'tests/gpu/test_*' \
  tests/gpu/views_client tests/sim_custatevec; do
  for p in "$src"/$f; do
    [ -e "$p" ] || continue
    [ -d "$p" ] && continue
    rel=${p#"$src"/}
    mkdir -p "$dst/$(dirname "$rel")"
    cp -a "$p" "$dst/$rel"
  done
done
# Debug sections are most of the size and the GPU machine does not need them.
find "$dst" -type f -perm -u+x -exec strip --strip-debug {} + 2>/dev/null
find "$dst" -type f -name '*.so*' -exec strip --strip-debug {} + 2>/dev/null
du -sh "$dst"
