#!/bin/sh
# Installs what building and running need, when it is missing (deploy/install-deps.sh, without
# the test tools), builds, starts qdpd on a private socket (GPUs when there are any, else the CPU
# backend), encodes a 3-qubit amplitude state through qdpctl, fetches it back as .npy, prints it,
# and stops the daemon.
set -eu
cd "$(dirname "$0")/.."
sh deploy/install-deps.sh
sh deploy/build.sh
dir=$(mktemp -d)
trap 'kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
./build/daemon/qdpd --socket "$dir/qdpd.sock" --devices auto 2>"$dir/qdpd.log" &
pid=$!
i=0
until [ -S "$dir/qdpd.sock" ]; do
  i=$((i + 1))
  if [ "$i" -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
    cat "$dir/qdpd.log" >&2
    exit 1
  fi
  sleep 0.1
done
export QDP_TARGET="unix:$dir/qdpd.sock"
ctl=./build/client/qdpctl/qdpctl
$ctl status
echo
echo "encode: amplitude, 3 qubits, values 1 2 3 4 5 6 7 8"
ref=$($ctl encode --encoding amplitude --qubits 3 --values 1,2,3,4,5,6,7,8 --json |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["ref"])')
$ctl describe "$ref"
$ctl fetch "$ref" -o "$dir/state.npy"
/usr/bin/python3 -c 'import numpy as np, sys
psi = np.load(sys.argv[1])
print("psi =", np.array2string(psi, precision=4, max_line_width=100))
print("sum |psi|^2 =", float(np.sum(np.abs(psi) ** 2)))' "$dir/state.npy"
$ctl rm "$ref"
