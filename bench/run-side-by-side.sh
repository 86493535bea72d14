#!/bin/bash
# Two builds' figures in one run on the same GPU, interleaved so that clocks and neighbours weigh on
# both alike: for each round, each build's kernel benchmark (qdpk_bench) and its daemon end to end
# (qdpd_bench: small-job round trip, concurrent jobs, Fetch, then 16-qubit batches of 64 from a
# registered region with 4 and 16 clients) against a qdpd of that build on the GPU. Then
# bench/regress.py OLD NEW compares them figure by figure (its exit status is this script's).
# Builds nothing.
# Usage: bench/run-side-by-side.sh OLD_BUILD NEW_BUILD OUT_DIR [ROUNDS (2)] [qdpd devices (cuda:0)]
# (LD_LIBRARY_PATH pointing at .gpu/lib; Python runs without it.)
set -uo pipefail
old=$(cd "${1:?usage: run-side-by-side.sh OLD_BUILD NEW_BUILD OUT_DIR [ROUNDS] [DEVICES]}" && pwd)
new=$(cd "${2:?usage: run-side-by-side.sh OLD_BUILD NEW_BUILD OUT_DIR [ROUNDS] [DEVICES]}" && pwd)
out=${3:?usage: run-side-by-side.sh OLD_BUILD NEW_BUILD OUT_DIR [ROUNDS] [DEVICES]}
rounds=${4:-2}
devices=${5:-cuda:0}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out/old" "$out/new"
rc=0
. "$root/bench/run-common.sh"

# qdpd_bench against a qdpd of build $1 on a private socket, into $2.
daemon_figures() {
  local build=$1 file=$2 dir pid r=0
  dir=$(mktemp -d)
  "$build/daemon/qdpd" --socket "$dir/qdpd.sock" --devices "$devices" --log-level warning \
    2>"$dir/qdpd.log" &
  pid=$!
  for _ in $(seq 300); do
    [ -S "$dir/qdpd.sock" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$dir/qdpd.log"; return 1; }
    sleep 0.1
  done
  {
    QDP_TARGET="unix:$dir/qdpd.sock" timeout 60 "$build/bench/qdpd_bench" --seconds 2 || r=1
    for clients in 4 16; do
      QDP_TARGET="unix:$dir/qdpd.sock" timeout 60 "$build/bench/qdpd_bench" --shm-batch 16:64 \
        --clients "$clients" --seconds 3 || r=1
    done
  } > "$file" 2>&1
  kill -TERM "$pid"
  wait "$pid" || r=1
  rm -rf "$dir"
  return $r
}

for r in $(seq "$rounds"); do
  for side in old new; do
    build=$old
    [ "$side" = new ] && build=$new
    TAIL=3 run "$side/qdpk_bench-$r" 300 "$build/bench/qdpk_bench"
    daemon_figures "$build" "$out/$side/qdpd_bench-$r.txt" || rc=1
    echo "== $side/qdpd_bench-$r"
    grep '^bench' "$out/$side/qdpd_bench-$r.txt"
  done
done
echo "== regress old new"
env -u LD_LIBRARY_PATH python3 "$root/bench/regress.py" "$out/old" "$out/new" \
  | tee "$out/regress.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
exit $rc
