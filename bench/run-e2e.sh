#!/bin/bash
# Starts qdpd from an existing build folder on a private socket, runs qdpd_bench against it, stops
# the daemon, and writes the figures to OUT_FILE (and stdout).
# Usage: bench/run-e2e.sh BUILD_DIR [OUT_FILE] [qdpd options...]   (default devices: cpu:2)
set -euo pipefail
build=${1:?usage: run-e2e.sh BUILD_DIR [OUT_FILE] [qdpd options...]}
out=${2:-/dev/stdout}
shift $(( $# >= 2 ? 2 : 1 ))
dir=$(mktemp -d)
trap 'kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
opts=("$@")
[ ${#opts[@]} -gt 0 ] || opts=(--devices cpu:2)
"$build/daemon/qdpd" --socket "$dir/qdpd.sock" --log-level warning "${opts[@]}" 2>"$dir/qdpd.log" &
pid=$!
for _ in $(seq 100); do
  [ -S "$dir/qdpd.sock" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$dir/qdpd.log" >&2; exit 1; }
  sleep 0.1
done
{
  echo "# qdpd_bench $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores, qdpd ${opts[*]}"
  QDP_TARGET="unix:$dir/qdpd.sock" "$build/bench/qdpd_bench"
} | tee "$out"
