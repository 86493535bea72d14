#!/bin/bash
# Call 2: NEW's runtime GPU test and the daemon end to end; OLD, MID and NEW qdpd alternating
# (region batches at 4, 8 and 16 clients, the small job); mesh_bench host1 and iqp of OLD and NEW.
export LD_LIBRARY_PATH=$PWD/.gpu/lib OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
O=$OUT/r3; mkdir -p $O
QDP_COMMIT=${COMMIT:-new} STEPS="daemon python" BASELINE=/nonexistent \
  bash bench/run-gpu-steps.sh /tmp/b/old /tmp/b/new3 $O > $O/steps.log 2>&1
CK_FORK=no /tmp/b/new3/tests/gpu/test_runtime_cuda > $O/test_runtime_cuda.txt 2>&1; echo "test_runtime_cuda exit $?" >> $O/steps.log
grep "== \|exit" $O/steps.log
ab() { # build label
  d=$(mktemp -d)
  $1/daemon/qdpd --socket $d/s --devices auto 2> $d/log &
  p=$!
  for _ in $(seq 300); do grep -q "listening on unix:" $d/log && break; sleep 0.1; done
  echo "## $2 small"; QDP_TARGET=unix:$d/s $1/bench/qdpd_bench --seconds 2 2>&1 | grep amplitude-8q
  for c in 4 8 16; do
    echo "## $2 batch 16:64 clients $c"
    QDP_TARGET=unix:$d/s $1/bench/qdpd_bench --shm-batch 16:64 --clients $c --seconds 3 2>&1 | tail -1
  done
  kill -TERM $p; wait $p; echo "## $2 qdpd exit $?"; rm -rf $d
}
for r in 1 2 3; do ab /tmp/b/old OLD; ab /tmp/b/mid MID; ab /tmp/b/new3 NEW; done > $O/daemon_ab.txt 2>&1
grep -v "^$" $O/daemon_ab.txt
for b in new3; do for w in host1; do
  echo "## $b mesh_bench $w"; timeout 120 /tmp/b/$b/bench/mesh_bench $w 2>&1 | tail -8
done; done > $O/mesh_bench.txt 2>&1
cat $O/mesh_bench.txt
tar -C $OUT -czf $OUT/r3.tgz r3 && rm -rf $O
