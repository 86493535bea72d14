#!/bin/bash
# Call 1: every GPU test, the daemon end to end, the world, the Python suite of NEW; then OLD and
# NEW qdpd alternating: the small job's round trip and the region batches.
export LD_LIBRARY_PATH=$PWD/.gpu/lib OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
O=$OUT/r; mkdir -p $O
QDP_COMMIT=${COMMIT:-new} STEPS="tests daemon world python" BASELINE=/nonexistent \
  bash bench/run-gpu-steps.sh /tmp/b/old /tmp/b/new $O > $O/steps.log 2>&1
grep "== " $O/steps.log
ab() { # build label
  d=$(mktemp -d)
  $1/daemon/qdpd --socket $d/s --devices auto 2> $d/log &
  p=$!
  for _ in $(seq 300); do grep -q "listening on unix:" $d/log && break; sleep 0.1; done
  echo "## $2 small"; QDP_TARGET=unix:$d/s $1/bench/qdpd_bench --seconds 2 2>&1 | tail -4
  for c in 4 16; do
    echo "## $2 batch 16:64 clients $c"
    QDP_TARGET=unix:$d/s $1/bench/qdpd_bench --shm-batch 16:64 --clients $c --seconds 3 2>&1 | tail -3
  done
  kill -TERM $p; wait $p; echo "## $2 qdpd exit $?"; rm -rf $d
}
for r in 1 2 3; do ab /tmp/b/old OLD; ab /tmp/b/new NEW; done > $O/daemon_ab.txt 2>&1
cat $O/daemon_ab.txt | grep -v "^$" | head -120
