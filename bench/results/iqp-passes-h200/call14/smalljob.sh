#!/bin/bash
# The 8-qubit round trip (qdpd_bench, p50/p99 beside Health) of a fresh qdpd at --log_level info
# and warning, two rounds interleaved, then of the info daemon again after 60,000 more jobs.
# Usage: smalljob.sh BUILD OUT   (LD_LIBRARY_PATH at .gpu/lib)
B=$1; O=$2; mkdir -p $O
d=$(mktemp -d)
start() {
  $B/daemon/qdpd --socket $d/s.sock --devices auto --log_level $1 2> $O/qdpd-$2.log &
  pid=$!
  for _ in $(seq 300); do grep -q "listening on unix:" $O/qdpd-$2.log && break; sleep 0.1; done
}
bench() { QDP_TARGET=unix:$d/s.sock timeout 120 $B/bench/qdpd_bench --jobs ${2:-5000} --seconds 1 --fetch-qubits 20 > $O/$1.txt 2>&1; echo "$1 exit $?"; grep -E "op=(small|health|round|amplitude-8q)" $O/$1.txt | cut -c1-160; }
for r in 1 2; do for lv in info warning; do
  start $lv $lv$r; bench fresh-$lv$r; kill -TERM $pid; wait $pid
done; done
start info aged
bench aged-before
for k in 1 2 3; do bench aged-fill$k 20000 > /dev/null; done
bench aged-after
echo "aged daemon log: $(wc -l < $O/qdpd-aged.log) lines, $(stat -c %s $O/qdpd-aged.log) B"
kill -TERM $pid; wait $pid
rm -rf $d
