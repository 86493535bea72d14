#!/bin/sh
# Configures (once) and builds qdp into ./build. CUDA is built when nvcc is found.
set -eu
cd "$(dirname "$0")/.."
toolkit=${QDP_TOOLKIT_DIR:-/usr/local/cuda}
[ -x "$toolkit/bin/nvcc" ] && PATH="$toolkit/bin:$PATH"
export PATH
[ -f build/build.ninja ] || meson setup build -Dtoolkit_dir="$toolkit" >&2
ninja -C build >&2
