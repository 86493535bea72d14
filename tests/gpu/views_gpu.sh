#!/bin/bash
# Zero-copy views, leases and gather on two GPUs: starts qdpd on cuda:0 and cuda:1 from an existing
# build folder (lease_grace 2 s and expire_interval 1 s, so that a lease of an exited client ends
# within seconds), runs tests/gpu/views_client against it from processes of their own, shows
# `qdpctl describe --views` of a sharded state, then SIGTERM, which must exit 0.
# Usage: tests/gpu/views_gpu.sh BUILD_DIR OUT_DIR
# Exits 77 when the machine has fewer than two GPUs. The daemon and the clients run with the
# carried libraries (.gpu/lib).
set -uo pipefail
build=$(cd "${1:?usage: views_gpu.sh BUILD_DIR OUT_DIR}" && pwd)
out=${2:?usage: views_gpu.sh BUILD_DIR OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${ngpu:-0}" -lt 2 ]; then
  echo "SKIP: ${ngpu:-0} GPUs; views_gpu.sh needs two"
  exit 77
fi
export LD_LIBRARY_PATH="$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
dir=$(mktemp -d)
sock="$dir/qdpd.sock"
pid=
trap '[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
"$build/daemon/qdpd" --socket "$sock" --devices cuda:0,cuda:1 --lease-grace 2 \
  --expire-interval 1 2>"$out/qdpd-views.log" &
pid=$!
for _ in $(seq 300); do
  grep -q "listening on unix:" "$out/qdpd-views.log" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$out/qdpd-views.log"; exit 1; }
  sleep 0.1
done
export QDP_TARGET="unix:$sock"
rc=0
echo "== views_client"
"$build/tests/gpu/views_client" 2>&1 | tee "$out/views_client.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1

echo "== qdpctl describe --views"
ctl() { "$build/client/qdpctl/qdpctl" "$@"; }
ref=$(ctl --json encode --encoding phase --qubits 20 --policy even --devices cuda:0,cuda:1 \
  --values 0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0,1.1,1.2,1.3,1.4,1.5,1.6,1.7,1.8,1.9,2.0 |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["ref"])')
ctl describe --views "$ref" | tee "$out/describe_views.txt" || rc=1
ctl describe "$ref" | grep -q "cuda:1" || { echo "!! describe lost the layout"; rc=1; }
ctl gather "$ref" --device cuda:1 | tee "$out/gather.txt" || rc=1
ctl rm "$ref" || rc=1

echo "== SIGTERM"
kill -TERM "$pid"
wait "$pid"
st=$?
pid=
echo "qdpd exit status $st"
[ "$st" -eq 0 ] || rc=1
[ ! -e "$sock" ] || { echo "socket left behind"; rc=1; }
grep -E "lease|CloseView|Gather" "$out/qdpd-views.log" | tail -n 20
exit $rc
