#!/bin/sh
# Installs what is missing, builds, and runs every test suite (unit, gpu, integration; GPU tests
# skip without a GPU). Meson's own summary follows; the per-test log is build/meson-logs/.
set -eu
cd "$(dirname "$0")/.."
sh deploy/install-deps.sh
sh deploy/build.sh
meson test -C build --print-errorlogs "$@"
