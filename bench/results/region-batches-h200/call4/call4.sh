#!/bin/bash
# Call 4: the cache test before (e69d2bc's cuda_memory.c) and after; NEW4's runtime test; the
# daemon end to end with NEW3 and NEW4 (its batch figures come from a daemon that has run the
# integration suite first); NEW3 and NEW4 fresh daemons side by side.
export LD_LIBRARY_PATH=$PWD/.gpu/lib OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p /tmp/b && tar -C /tmp/b -xJf .gpu/builds.tar.xz
O=$OUT/r4; mkdir -p $O
CK_FORK=no CK_RUN_CASE=memory /tmp/b/oldtest/test_runtime_cuda > $O/cache_test_before.txt 2>&1; echo "before: exit $?"; tail -n 4 $O/cache_test_before.txt
CK_FORK=no /tmp/b/new4/tests/gpu/test_runtime_cuda > $O/test_runtime_cuda.txt 2>&1; echo "after: exit $?"; grep -A1 "full cache" $O/test_runtime_cuda.txt; tail -n 1 $O/test_runtime_cuda.txt
for b in new3 new4 new3 new4; do
  bash tests/gpu/daemon_gpu.sh /tmp/b/$b $O/d-$b > $O/daemon-$b.txt 2>&1; echo "daemon_gpu $b exit $?"
  grep "shm-batch\|amplitude-8q" $O/daemon-$b.txt | cut -c1-160
  rm -rf $O/d-$b
done
ab() { # build label
  d=$(mktemp -d)
  $1/daemon/qdpd --socket $d/s --devices auto 2> $d/log &
  p=$!
  for _ in $(seq 300); do grep -q "listening on unix:" $d/log && break; sleep 0.1; done
  for c in 4 16; do
    echo "## $2 batch 16:64 clients $c"
    QDP_TARGET=unix:$d/s $1/bench/qdpd_bench --shm-batch 16:64 --clients $c --seconds 3 2>&1 | tail -1
  done
  kill -TERM $p; wait $p; echo "## $2 qdpd exit $?"; rm -rf $d
}
for r in 1 2; do ab /tmp/b/new3 NEW3; ab /tmp/b/new4 NEW4; done > $O/daemon_ab.txt 2>&1
grep -v "^$" $O/daemon_ab.txt | cut -c1-160
tar -C $OUT -czf $OUT/r4.tgz r4 && rm -rf $O
